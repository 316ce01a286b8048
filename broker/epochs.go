package broker

import (
	"context"
	"fmt"
	"slices"

	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
)

// The epoch history (issue 32, "positions that cannot point into a lost
// future"): where each promotion epoch of the history this node holds
// began (protocol.EpochStart, meta key smss@epochs). A master appends its
// epoch when it is promoted (numbering from its next eventId, dropping
// what it replicated of epochs that begin later: see
// protocol.WithPromotion); a slave adopts its master's history at each
// replication session (its binlog is a prefix of the master's, which the
// session checks first). Status reports it ("epochs"), so a consumer can
// tell whether the position it took on one node is a position of
// another's history (protocol.ResumePoint).

// EpochStarts is the node's epoch history, oldest first; nil when none was
// recorded (a directory that never saw a promotion with this build).
func (b *Broker) EpochStarts() []protocol.EpochStart {
	if h := b.epochs.Load(); h != nil {
		return slices.Clone(*h)
	}
	return nil
}

func (b *Broker) loadEpochStarts() error {
	h, err := b.meta.EpochStarts()
	if err != nil {
		return fmt.Errorf("broker: read the epoch history: %w", err)
	}
	b.epochs.Store(&h)
	return nil
}

// LearnEpochStarts makes h, the epoch history of the master this slave
// follows, the slave's own, durably; it reports whether it changed. A
// history that breaks its invariants is refused.
func (b *Broker) LearnEpochStarts(ctx context.Context, h []protocol.EpochStart) (bool, error) {
	if !b.IsSlave() {
		return false, ErrNotSlave
	}
	if err := protocol.CheckEpochStarts(h); err != nil {
		return false, fmt.Errorf("broker: the master's epoch history: %w", err)
	}
	if slices.Equal(h, b.EpochStarts()) {
		return false, nil
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.epochs = opEpoch, slices.Clone(h)
	if c.epochs == nil {
		c.epochs = []protocol.EpochStart{}
	}
	if err := b.submit(ctx, c); err != nil {
		return false, err
	}
	return c.eventID != 0, nil
}

// adoptEpochStarts runs LearnEpochStarts' command on the writer.
func (w *writer) adoptEpochStarts(c *command) error {
	b := w.b
	if slices.Equal(c.epochs, b.EpochStarts()) {
		return nil
	}
	h := c.epochs
	if err := w.commitMeta(func(mb *meta.Batch) { mb.SetEpochStarts(h) }); err != nil {
		return fmt.Errorf("broker: record the master's epoch history: %w", err)
	}
	b.epochs.Store(&h)
	b.log.Info("adopted the master's epoch history", "entries", len(h))
	c.eventID = 1
	return nil
}
