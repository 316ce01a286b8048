package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
)

// ErrNotSlave is returned by LearnEpoch on a master.
var ErrNotSlave = errors.New("broker: not a slave")

// Epoch is the promotion epoch: on a master, the one its last promotion
// recorded (0 if it never was promoted); on a slave, the highest epoch of a
// master it followed (LearnEpoch). It only grows.
func (b *Broker) Epoch() uint64 { return b.epoch.Load() }

// Promote turns a slave into a master, as a restart as master would: the
// writer stops accepting replicated blocks, continues eventIds after the
// highest one the node holds, and client writes are accepted from then on.
// The role and the new epoch (Epoch()+1: Epoch already holds the highest
// epoch learned from a master) are committed to meta and synced before it
// returns. The caller must have stopped replication first, and starts the
// master's background jobs (delay scheduler, expiry reaper) after.
// On a master it returns protocol.ErrAlreadyMaster.
func (b *Broker) Promote(ctx context.Context) (uint64, error) {
	c := getCommand()
	defer putCommand(c)
	c.op = opPromote
	if err := b.submit(ctx, c); err != nil {
		return 0, err
	}
	return c.epoch, nil
}

// PromoteTo is Promote with the epoch given, for a cluster whose consensus
// assigns it (the node may already hold it: a master of that epoch that
// restarted). An epoch below Epoch() is refused: epochs only grow.
func (b *Broker) PromoteTo(ctx context.Context, epoch uint64) (uint64, error) {
	if epoch == 0 || epoch < b.epoch.Load() {
		return 0, fmt.Errorf("broker: promote to epoch %d: this node already holds epoch %d", epoch, b.epoch.Load())
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.epoch = opPromote, epoch
	if err := b.submit(ctx, c); err != nil {
		return 0, err
	}
	return c.epoch, nil
}

// LearnEpoch records the epoch of the master this slave follows when it is
// higher than Epoch, durably, so that a later promotion numbers itself
// above every master this node has followed. It reports whether the epoch
// changed.
func (b *Broker) LearnEpoch(ctx context.Context, epoch uint64) (bool, error) {
	if !b.IsSlave() {
		return false, ErrNotSlave
	}
	if epoch <= b.epoch.Load() {
		return false, nil
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.epoch = opEpoch, epoch
	if err := b.submit(ctx, c); err != nil {
		return false, err
	}
	return c.eventID != 0, nil
}

// promote runs opPromote on the writer, which alone changes the role, so
// no command of the writer sees half of the switch.
func (w *writer) promote(c *command) error {
	b := w.b
	if !b.IsSlave() {
		return protocol.ErrAlreadyMaster
	}
	epoch := b.epoch.Load() + 1
	if c.epoch != 0 { // PromoteTo: the cluster's epoch
		if c.epoch < b.epoch.Load() {
			return fmt.Errorf("broker: promote to epoch %d below this node's %d", c.epoch, b.epoch.Load())
		}
		epoch = c.epoch
	}
	// What recovery computes for a master (recover.go): a master never
	// reuses an id, and the topics the start-up sync copied carry ids the
	// slave may not have replicated.
	next := w.next
	for _, t := range b.topics {
		next = max(next, t.meta.CreateEventID+1)
	}
	// The eventIds from next on are this epoch's (epochs.go).
	epochs := protocol.WithPromotion(b.EpochStarts(), epoch, next)
	if err := w.commitMeta(func(mb *meta.Batch) {
		mb.SetRole(meta.RoleMaster)
		mb.SetEpoch(epoch)
		mb.SetEpochStarts(epochs)
	}); err != nil {
		return fmt.Errorf("broker: promote: record role and epoch %d: %w", epoch, err)
	}
	b.epochs.Store(&epochs)
	w.next = next
	b.lastID.Store(next - 1)
	b.epoch.Store(epoch)
	b.slave.Store(false)
	c.epoch = epoch
	b.log.Info("promoted to master", "epoch", epoch, "nextEventId", next)
	return nil
}

// learnEpoch runs opEpoch on the writer.
func (w *writer) learnEpoch(c *command) error {
	b := w.b
	if !b.IsSlave() {
		return ErrNotSlave
	}
	if c.epochs != nil {
		return w.adoptEpochStarts(c)
	}
	if c.epoch <= b.epoch.Load() {
		return nil
	}
	if err := w.commitMeta(func(mb *meta.Batch) { mb.SetEpoch(c.epoch) }); err != nil {
		return fmt.Errorf("broker: record the master's epoch %d: %w", c.epoch, err)
	}
	b.log.Info("learned the master's promotion epoch", "epoch", c.epoch, "was", b.epoch.Load())
	b.epoch.Store(c.epoch)
	c.eventID = 1
	return nil
}

// commitMeta commits one batch of its own and syncs meta: the callers
// answer only once the change is durable.
func (w *writer) commitMeta(fill func(*meta.Batch)) error {
	mb := w.b.meta.NewBatch()
	fill(mb)
	if err := w.b.meta.Commit(mb); err != nil {
		return err
	}
	return w.b.meta.Sync()
}
