package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
)

// ErrReplicaOrder is wrapped when a replicated block does not follow the
// slave's last eventId: applying it would reorder or duplicate history. It is
// binlog.ErrBlockOrder, which replication matches without importing broker.
var ErrReplicaOrder = binlog.ErrBlockOrder

// ApplyReplicated appends one binlog block received from the master (a
// slave only) through the writer, byte for byte, and applies it to topics
// and meta as docs/protocol.md §4.4 says. It returns the block's last eventId. The
// block is validated like client input.
func (b *Broker) ApplyReplicated(ctx context.Context, raw []byte) (int64, error) {
	for {
		// A full disk pauses replication instead of stopping it (see
		// ApplyReplicatedBatch).
		if err := b.disk.wait(ctx); err != nil {
			return 0, err
		}
		last, err := b.applyReplicated(ctx, raw)
		if err == nil || !errors.Is(err, syscall.ENOSPC) {
			return last, err
		}
		if werr := b.waitSpace(ctx, err); werr != nil {
			return 0, werr
		}
	}
}

// applyReplicated is ApplyReplicated without the wait for disk space.
func (b *Broker) applyReplicated(ctx context.Context, raw []byte) (int64, error) {
	if !b.IsSlave() {
		return 0, errors.New("broker: replicated blocks are applied on a slave only")
	}
	blk, last, n, err := binlog.DecodeSpan(raw)
	if err == nil && n != len(raw) {
		err = fmt.Errorf("%d bytes after the block", len(raw)-n)
	}
	if err != nil {
		return 0, fmt.Errorf("invalid replicated block: %w", err)
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.raw, c.replCmd, c.topic, c.prevLast = opReplicated, raw, blk.Cmd, string(blk.Topic), -1
	c.repl, c.replLast = blk, last
	if err := b.submit(ctx, c); err != nil {
		return 0, err
	}
	b.recordReplicated(c)
	return c.eventID, nil
}

// recordReplicated counts an applied replicated pub or delay apply (the
// writer set count and records when it wrote the topic's messages).
func (b *Broker) recordReplicated(c *command) {
	if c.err == nil && c.count > 0 {
		b.opts.Metrics.Published(c.topic, c.count, len(c.records))
	}
}

// ApplyReplicatedBatch applies raws in order, queueing them back to back so
// they share the writer's group commits. Each block after the first is
// applied only if the one before it was (it names its predecessor's last
// eventId), so the applied blocks are always a prefix of raws and a failure
// can never leave a gap. It returns the last eventId applied, how many
// blocks were applied and the first error.
//
// A full disk pauses it instead of failing: it waits while the free space
// is below store.minFreeMB, and after a group failed with ENOSPC (rolled
// back by the writer) it waits for space and applies the rest.
func (b *Broker) ApplyReplicatedBatch(ctx context.Context, raws [][]byte) (int64, int, error) {
	var last int64
	total := 0
	for {
		if err := b.disk.wait(ctx); err != nil {
			return last, total, err
		}
		l, n, err := b.applyReplicatedBatch(ctx, raws[total:])
		if n > 0 {
			last, total = l, total+n
		}
		if err == nil || total == len(raws) || !errors.Is(err, syscall.ENOSPC) {
			return last, total, err
		}
		if werr := b.waitSpace(ctx, err); werr != nil {
			return last, total, werr
		}
	}
}

// waitSpace pauses a slave's replication after a write failed with ENOSPC:
// until the guard reads the disk above the watermark again, or for a
// second when it does already (the space went between the reading and the
// write, or the guard is off).
func (b *Broker) waitSpace(ctx context.Context, cause error) error {
	b.log.Warn("replication paused: the disk is full; retrying the rolled-back blocks when space returns", "err", cause)
	b.disk.check()
	if b.disk.low.Load() {
		return b.disk.wait(ctx)
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *Broker) applyReplicatedBatch(ctx context.Context, raws [][]byte) (int64, int, error) {
	if !b.IsSlave() {
		return 0, 0, errors.New("broker: replicated blocks are applied on a slave only")
	}
	cmds := make([]*command, 0, len(raws))
	defer func() {
		for _, c := range cmds {
			putCommand(c)
		}
	}()
	prev := int64(-1)
	var bad error
	for i, raw := range raws {
		blk, last, n, err := binlog.DecodeSpan(raw)
		if err == nil && n != len(raw) {
			err = fmt.Errorf("%d bytes after the block", len(raw)-n)
		}
		if err != nil {
			// Apply the valid prefix, then report the bad block.
			bad = fmt.Errorf("invalid replicated block %d of %d: %w", i+1, len(raws), err)
			break
		}
		c := getCommand()
		c.op, c.raw, c.replCmd, c.topic, c.prevLast = opReplicated, raw, blk.Cmd, string(blk.Topic), prev
		c.repl, c.replLast = blk, last
		prev = last
		cmds = append(cmds, c)
	}
	if len(cmds) == 0 {
		return 0, 0, bad
	}
	// Queued back to back in one step, so no other command comes between
	// them and they can share groups.
	if err := b.enqueue(ctx, false, cmds...); err != nil {
		for _, c := range cmds {
			c.err = err
		}
		return b.finishBatch(cmds, bad)
	}
	for _, c := range cmds {
		b.await(c)
	}
	return b.finishBatch(cmds, bad)
}

func (b *Broker) finishBatch(cmds []*command, tail error) (int64, int, error) {
	last := int64(0)
	for i, c := range cmds {
		if c.err != nil {
			return last, i, c.err
		}
		b.recordReplicated(c)
		last = c.eventID
	}
	return last, len(cmds), tail
}

func (w *writer) replicaTopicBlocks(t *topic, first, now int64, src segment.Position, records []byte) error {
	l, err := w.b.topicLog(t)
	if err != nil {
		return fmt.Errorf("open topic %s: %w", t.meta.Name, err)
	}
	w.appendTopicBlocks(w.batchFor(t, l), first, now, src, records)
	return nil
}

// BinlogStream reads binlog blocks for one replica connection. It registers
// its position so retention keeps the files it still needs.
type BinlogStream struct {
	b      *Broker
	reader *segment.Reader
	id     uint64
	timer  *time.Timer // Next's wait, reused

	since  int64                  // ms the stream started
	sent   atomic.Int64           // last eventId handed to the sender
	remote atomic.Pointer[string] // SetRemoteAddr
	wake   func() <-chan struct{} // SetWake; nil: waits end with commits only
}

type replicaSet struct {
	mu      sync.Mutex // a leaf (lock order: doc.go)
	next    uint64
	pos     map[uint64]int64 // stream id → binlog file it reads
	streams map[uint64]*BinlogStream
}

// ReplicaStream positions a reader right after the binlog block whose last
// eventId is after (docs/protocol.md §11); 0 means the oldest retained binlog block.
func (b *Broker) ReplicaStream(after int64) (*BinlogStream, error) {
	if after < 0 {
		return nil, protocol.ErrInvalidReplicaID
	}
	if last := b.LastEventID(); after > last {
		return nil, protocol.NewBizError(fmt.Sprintf("eventId %d is beyond the last eventId %d of this server", after, last))
	}
	pos := segment.Position{}
	files := b.binlog.Files()
	if after == 0 {
		if len(files) > 0 {
			pos = segment.Position{FileID: files[0]}
		} else {
			pos = b.binlog.Committed()
		}
	} else {
		loc, err := b.binlog.Locate(after)
		if err != nil {
			return nil, fmt.Errorf("locate eventId %d in the binlog: %w", after, err)
		}
		if loc.BeforeOldest {
			first, _, _ := b.binlog.FirstEventID()
			return nil, protocol.NewBizError(fmt.Sprintf("eventId %d is older than the oldest retained binlog block (%d)", after, first))
		}
		// The block must end with `after` (§11), or start with it: an
		// original slave resumes with its last block's first eventId
		// (docs/protocol.md §4.5), which names that block just as unambiguously.
		if loc.PrevLast != after && loc.PrevFirst != after {
			return nil, protocol.NewBizError(fmt.Sprintf("eventId %d is inside a binlog block (the block covers %d..%d); resume from its first or last eventId", after, loc.PrevFirst, loc.PrevLast))
		}
		pos = loc.Pos
	}
	s := &BinlogStream{b: b, reader: b.binlog.NewReader(pos), since: b.opts.Now()}
	s.sent.Store(after)
	b.replicas.mu.Lock()
	if b.replicas.pos == nil {
		b.replicas.pos = map[uint64]int64{}
		b.replicas.streams = map[uint64]*BinlogStream{}
	}
	b.replicas.next++
	s.id = b.replicas.next
	b.replicas.pos[s.id] = pos.FileID
	b.replicas.streams[s.id] = s
	b.replicas.mu.Unlock()
	return s, nil
}

// SentEventID is the last eventId handed to the stream's sender (the
// start eventId before any): a slave cannot have confirmed more.
func (s *BinlogStream) SentEventID() int64 { return s.sent.Load() }

// SetRemoteAddr names the slave's network address for Broker.Replication.
func (s *BinlogStream) SetRemoteAddr(addr string) { s.remote.Store(&addr) }

// Next calls fn with up to max whole committed binlog blocks. With nothing
// to send it waits for the writer's next commit, up to wait (then it
// returns 0: the caller sends an alive), or until ctx ends.
func (s *BinlogStream) Next(ctx context.Context, max int, wait time.Duration, fn func(block []byte) error) (int, error) {
	timerSet := false
	defer func() {
		if timerSet {
			s.timer.Stop()
		}
	}()
	for {
		changed := s.b.binlog.Changed()
		n, _, err := s.reader.Next(max, func(_, last int64, raw []byte, _ segment.Position) error {
			if err := fn(raw); err != nil {
				return err
			}
			s.sent.Store(last)
			return nil
		})
		if n > 0 {
			s.b.replicas.mu.Lock()
			s.b.replicas.pos[s.id] = s.reader.Pos().FileID
			s.b.replicas.mu.Unlock()
		}
		if err != nil {
			if errors.Is(err, segment.ErrFileRemoved) {
				return n, protocol.NewBizError("replication position is gone: " + err.Error())
			}
			return n, err
		}
		if n > 0 {
			return n, nil
		}
		if wait <= 0 {
			return 0, nil
		}
		if !timerSet {
			armTimer(&s.timer, wait) // one timer per stream, re-armed per wait
			timerSet = true
		}
		var wake <-chan struct{}
		if s.wake != nil {
			wake = s.wake()
		}
		select {
		case <-changed:
		case <-wake:
			return 0, nil // the caller has something else to send
		case <-s.timer.C:
			s.reader.Close() // hold no descriptor while idle
			return 0, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// SetWake makes Next's wait for a commit also end (returning 0) when the
// channel fn returns closes; fn is asked at every wait and may return nil.
// A version 2 replica stream sends commit frames that way
// (docs/protocol.md §4.6). Call it before the first Next.
func (s *BinlogStream) SetWake(fn func() <-chan struct{}) { s.wake = fn }

// Close unregisters the stream.
func (s *BinlogStream) Close() {
	s.reader.Close()
	s.b.replicas.mu.Lock()
	delete(s.b.replicas.pos, s.id)
	delete(s.b.replicas.streams, s.id)
	s.b.replicas.mu.Unlock()
}

// OldestReplicaFile returns the lowest binlog file id a connected replica
// still reads, ok=false when none is connected.
func (b *Broker) OldestReplicaFile() (int64, bool) {
	b.replicas.mu.Lock()
	defer b.replicas.mu.Unlock()
	var min int64
	ok := false
	for _, id := range b.replicas.pos {
		if !ok || id < min {
			min, ok = id, true
		}
	}
	return min, ok
}

// SyncTopic inserts m, as listed by the master's valid list, unless a topic
// of that name exists locally. It reports whether it was inserted.
func (b *Broker) SyncTopic(ctx context.Context, m meta.Topic) (bool, error) {
	if !b.IsSlave() {
		return false, errors.New("broker: topic sync is for a slave only")
	}
	// The rule of a replicated create (stage.go): the original's names
	// are kept, a directory outside the bucket never made.
	if err := protocol.ValidateExistingTopicName([]byte(m.Name)); err != nil {
		return false, fmt.Errorf("topic sync: %w", err)
	}
	c := getCommand()
	defer putCommand(c)
	m.TopicRoot, m.State = "", meta.StateNormal
	c.op, c.topic, c.sync = opSyncTopic, m.Name, &m
	if err := b.submit(ctx, c); err != nil {
		return false, err
	}
	return c.eventID != 0, nil
}
