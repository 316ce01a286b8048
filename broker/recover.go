package broker

import (
	"bytes"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/internal/fsmode"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// maxDropBytes bounds what recovery cuts off a file without asking: a crash
// can only tear the last group's write, which is far smaller. More bad bytes
// than this look like damage in the middle of a file, and start-up refuses
// rather than throw away data that may be whole.
const maxDropBytes = 64 << 20

// ErrDamaged is wrapped by recovery errors about data it will not repair
// automatically.
var ErrDamaged = errors.New("data damaged beyond automatic repair")

// loadTopics registers every topic meta knows and returns the recovery
// checkpoint: the first step of recover and recoverReadOnly alike.
func (b *Broker) loadTopics() (ckpt meta.Checkpoint, ok bool, err error) {
	metas, err := b.meta.Topics()
	if err != nil {
		return ckpt, false, err
	}
	for _, m := range metas {
		b.addTopic(m, b.topicDir(m.Name))
	}
	return b.meta.Checkpoint()
}

// recover brings binlog, topic logs and meta into agreement before the
// writer starts (see the package doc) and returns the next eventId.
func (b *Broker) recover() (int64, error) {
	ckpt, hasCkpt, err := b.loadTopics()
	if err != nil {
		return 0, err
	}

	// 1. The binlog: find where replay starts and cut a torn tail.
	if err := b.binlog.DropEmptyTail(); err != nil {
		return 0, err
	}
	from, err := b.replayStart(ckpt, hasCkpt)
	if err != nil {
		return 0, err
	}
	if err := b.cutTail(b.binlog, from); err != nil {
		return 0, fmt.Errorf("binlog: %w", err)
	}
	binLast, _, err := lastBlock(b.binlog)
	if err != nil {
		return 0, fmt.Errorf("binlog: %w", err)
	}

	// 2. Every topic's tail: cut torn bytes and blocks the binlog does not
	// have; a topic that lost whole blocks is refilled by the replay.
	maxTopicLast := int64(0)
	names := make([]string, 0, len(b.topics))
	for name := range b.topics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		last, refill, err := b.checkTopicTail(b.topics[name], binLast)
		if err != nil {
			return 0, fmt.Errorf("topic %s: %w", name, err)
		}
		maxTopicLast = max(maxTopicLast, last)
		if refill != nil && refill.Less(from) {
			from = *refill
		}
	}

	// 3. Replay the binlog from the checkpoint, rolling topics and meta
	// forward.
	r := &replayer{b: b, cursors: map[*topic]*cursor{}, from: from, end: b.binlog.Committed(), logAt: time.Now().Add(replayProgressEvery)}
	if _, err := b.binlog.Scan(from, r.apply); err != nil {
		return 0, fmt.Errorf("replay binlog from %s: %w", from, err)
	}
	if err := r.finish(); err != nil {
		return 0, err
	}

	next := max(ckpt.NextEventID, binLast+1, maxTopicLast+1, r.maxID+1, 1)
	if !b.IsSlave() {
		// A master never reuses an id, even one whose binlog block was
		// lost. A slave's position is what its binlog holds: topics
		// copied by the start-up sync carry ids it has not replicated.
		for _, t := range b.topics {
			next = max(next, t.meta.CreateEventID+1)
		}
	}
	end := b.binlog.Committed()
	mb := b.meta.NewBatch()
	mb.SetCheckpoint(meta.Checkpoint{BinlogFileID: end.FileID, BinlogOffset: end.Offset, NextEventID: next})
	if err := b.meta.Commit(mb); err != nil {
		return 0, fmt.Errorf("write checkpoint: %w", err)
	}
	if err := b.meta.Sync(); err != nil {
		return 0, fmt.Errorf("sync meta: %w", err)
	}
	if r.blocks > 0 {
		b.log.Info("binlog replayed", "from", from.String(), "blocks", r.blocks, "topicBlocksAppended", r.appended, "topicsTruncated", r.truncated)
	}
	return next, nil
}

// replayStart is the checkpoint when it names a block boundary in a file
// that exists, else the start of the newest binlog file.
func (b *Broker) replayStart(ckpt meta.Checkpoint, ok bool) (segment.Position, error) {
	files := b.binlog.Files()
	if len(files) == 0 {
		return segment.Position{}, nil
	}
	last := files[len(files)-1]
	fallback := segment.Position{FileID: last}
	if !ok || ckpt.BinlogFileID < files[0] {
		return fallback, nil
	}
	if ckpt.BinlogFileID > last {
		return b.binlog.Committed(), nil
	}
	st, err := os.Stat(b.binlog.Path(ckpt.BinlogFileID))
	if err != nil {
		return segment.Position{}, fmt.Errorf("stat checkpoint file: %w", err)
	}
	if ckpt.BinlogOffset > st.Size() {
		b.log.Warn("checkpoint beyond the end of its binlog file; replaying the whole file", "file", b.binlog.Path(ckpt.BinlogFileID), "checkpoint", ckpt.BinlogOffset, "size", st.Size())
		return segment.Position{FileID: ckpt.BinlogFileID}, nil
	}
	pos := segment.Position{FileID: ckpt.BinlogFileID, Offset: ckpt.BinlogOffset}
	if pos.Offset < st.Size() {
		// The checkpoint must name a block boundary; if not, distrust it.
		bad := false
		_, err := b.binlog.Scan(pos, func(segment.Position, int64, int64, []byte) error { return errStopScan })
		var ce *segment.CorruptError
		if errors.As(err, &ce) && ce.Offset == pos.Offset && !ce.Torn() {
			bad = true
		}
		if bad {
			b.log.Warn("checkpoint is not at a block boundary; replaying the whole file", "file", b.binlog.Path(pos.FileID), "offset", pos.Offset)
			return segment.Position{FileID: pos.FileID}, nil
		}
	}
	return pos, nil
}

var errStopScan = errors.New("stop scan")

// cutTail scans l from `from` and truncates a bad tail, refusing when the
// damage is not at the tail of the newest file or is too large to be a torn
// write. A block whose eventId does not follow the one before it is bad
// too: eventIds only grow, and such a block (a damaged digit) would give
// one id to two messages.
func (b *Broker) cutTail(l *segment.Log, from segment.Position) error {
	prev := int64(0)
	end, err := l.Scan(from, func(pos segment.Position, first, last int64, _ []byte) error {
		if first <= prev {
			return &segment.CorruptError{Path: l.Path(pos.FileID), Offset: pos.Offset,
				Err: fmt.Errorf("eventId %d does not follow eventId %d", first, prev)}
		}
		prev = last
		return nil
	})
	if errors.Is(err, errStopScan) {
		err = nil
	}
	if err == nil {
		return nil
	}
	return b.truncateBad(l, end, err)
}

func (b *Broker) truncateBad(l *segment.Log, end segment.Position, err error) error {
	var ce *segment.CorruptError
	if !errors.As(err, &ce) {
		return err
	}
	files := l.Files()
	if len(files) == 0 || end.FileID != files[len(files)-1] {
		return fmt.Errorf("%w: %v (not in the newest file %s)", ErrDamaged, ce, l.Dir())
	}
	st, serr := os.Stat(ce.Path)
	if serr != nil {
		return fmt.Errorf("stat %s: %w", ce.Path, serr)
	}
	drop := st.Size() - ce.Offset
	if drop > maxDropBytes {
		return fmt.Errorf("%w: %v: %d bytes follow the bad block; refusing to drop more than %d (move the file aside or truncate it by hand)", ErrDamaged, ce, drop, maxDropBytes)
	}
	b.log.Warn("truncating torn or corrupt tail", "file", ce.Path, "offset", ce.Offset, "droppedBytes", drop, "cause", ce.Err)
	return l.TruncateTo(end)
}

// lastBlock returns the last eventId of the log's newest block and where
// that block starts.
func lastBlock(l *segment.Log) (int64, segment.Position, error) {
	var last int64
	var at segment.Position
	_, err := l.ScanTail(func(pos segment.Position, _, l int64, _ []byte) error {
		last, at = l, pos
		return nil
	})
	return last, at, err
}

// checkTopicTail cuts a torn tail of t's log and any block newer than the
// binlog's last event. It returns the topic's last eventId (on a master,
// before that cut: ids are never reused) and, when whole blocks may have
// been lost, the binlog position from which the replay must start to
// restore them.
func (b *Broker) checkTopicTail(t *topic, binLast int64) (int64, *segment.Position, error) {
	l, err := b.topicLog(t)
	if err != nil {
		return 0, nil, err
	}
	if err := l.DropEmptyTail(); err != nil {
		return 0, nil, err
	}
	var last int64
	var src *segment.Position
	end, err := l.ScanTail(func(_ segment.Position, first, _ int64, blk []byte) error {
		tb, _, derr := topicblock.DecodeBlock(blk)
		if derr != nil {
			return derr
		}
		last = first
		src = &segment.Position{FileID: tb.SrcFileID, Offset: tb.SrcPos}
		return nil
	})
	var refill *segment.Position
	if err != nil {
		if terr := b.truncateBad(l, end, err); terr != nil {
			return 0, nil, terr
		}
		refill = src
		if refill == nil {
			// Nothing whole is left to anchor on: replay the oldest
			// binlog file onward (a repair path, not the normal start).
			if files := b.binlog.Files(); len(files) > 0 {
				refill = &segment.Position{FileID: files[0]}
			}
		}
	}
	if last > binLast {
		loc, err := l.Locate(binLast)
		if err != nil {
			return 0, nil, err
		}
		b.log.Warn("topic has messages the binlog lost; truncating them", "topic", t.meta.Name, "binlogLast", binLast, "topicLast", last, "at", loc.Pos.String())
		if err := l.TruncateTo(loc.Pos); err != nil {
			return 0, nil, err
		}
		if b.IsSlave() {
			// A slave's counter follows its binlog, which replication
			// resumes from. A master keeps last: subscribers may have
			// seen those ids, so they must never name other messages.
			last = binLast
		}
	}
	return last, refill, nil
}

// cursor is the replay's position in one topic log. While it compares,
// rd reads ahead from pos: one sequential reader per topic, so a replay
// reads each topic file once however many records it checks.
type cursor struct {
	pos       segment.Position
	appending bool
	rd        *segment.Reader
	lru       *list.Element // in replayer.open while it holds descriptors
}

func (c *cursor) close() {
	if c.rd != nil {
		c.rd.Close()
		c.rd = nil
	}
}

type replayer struct {
	b       *Broker
	cursors map[*topic]*cursor
	// open orders the topics whose reader or current file the replay
	// holds, most recent first; beyond store.maxOpenTopics the oldest are
	// closed (their cursor keeps its position), so a replay over more
	// topics than descriptors does not run out of them.
	open      list.List
	maxID     int64
	blocks    int
	appended  int
	truncated int
	buf       []byte
	marks     []segment.Mark
	// from, end and logAt serve the progress log of a long replay.
	from, end segment.Position
	logAt     time.Time
}

// replayProgressEvery is how often a replay that is still running says
// where it is: start-up does not listen until it ends. A variable for
// tests.
var replayProgressEvery = 5 * time.Second

func (r *replayer) apply(pos segment.Position, first, last int64, raw []byte) error {
	blk, _, err := binlog.DecodeBlock(raw)
	if err != nil {
		return err
	}
	r.blocks++
	r.maxID = max(r.maxID, last)
	if r.blocks%64 == 0 && time.Now().After(r.logAt) {
		r.logAt = time.Now().Add(replayProgressEvery)
		r.b.log.Info("replaying binlog", "from", r.from.String(), "at", pos.String(), "to", r.end.String(),
			"blocks", r.blocks, "topicBlocksAppended", r.appended)
	}
	b := r.b
	name := string(blk.Topic)
	t := b.topics[name]
	// A command applies to the incarnation of the topic it was written
	// for: one created at or before it.
	current := t != nil && t.meta.CreateEventID <= blk.EventID
	switch blk.Cmd {
	case binlog.CmdPub:
		if current {
			return r.ensureBlocks(t, &blk, pos, blk.Payload)
		}
	case binlog.CmdDelayApply:
		key, err := meta.DelayKeyFromValue(blk.Payload, blk.Topic)
		if err != nil {
			return err
		}
		mb := b.meta.NewBatch()
		mb.DeleteDelay(key)
		if err := b.meta.Commit(mb); err != nil {
			return err
		}
		delayID := int64(binary.LittleEndian.Uint64(blk.Payload[8:]))
		if current && t.meta.CreateEventID < delayID {
			return r.ensureBlocks(t, &blk, pos, blk.Payload[binlog.DelayPrefixLen:])
		}
	case binlog.CmdDelay:
		if current {
			key, err := meta.DelayKeyFromValue(blk.Payload, blk.Topic)
			if err != nil {
				return err
			}
			mb := b.meta.NewBatch()
			mb.PutDelay(key, append([]byte(nil), blk.Payload...))
			return b.meta.Commit(mb)
		}
	case binlog.CmdCreate:
		if t != nil {
			if t.meta.CreateEventID == blk.EventID {
				return os.MkdirAll(t.dir, fsmode.Dir())
			}
			if t.meta.CreateEventID < blk.EventID {
				b.log.Error("BUG: binlog creates a topic that meta holds from an older create", "topic", name, "metaCreate", t.meta.CreateEventID, "binlogCreate", blk.EventID)
			}
			return nil
		}
		m := meta.Topic{Name: name, CreateTime: blk.WriteTime, CreateEventID: blk.EventID,
			StateChangeTime: blk.WriteTime, StateChangeEventID: blk.EventID}
		if len(blk.Payload) >= 8 {
			m.ExpireAt = int64(binary.LittleEndian.Uint64(blk.Payload))
		}
		dir := b.topicDir(name)
		if err := b.freshDir(dir, blk.EventID); err != nil {
			return err
		}
		mb := b.meta.NewBatch()
		mb.PutTopic(&m)
		if err := b.meta.Commit(mb); err != nil {
			return err
		}
		b.addTopic(m, dir)
		b.log.Info("recovery: re-applied topic create", "topic", name, "eventId", blk.EventID)
	case binlog.CmdDelete:
		if current && t.meta.CreateEventID < blk.EventID {
			mb := b.meta.NewBatch()
			mb.DeleteTopic(&t.meta)
			if err := b.meta.Commit(mb); err != nil {
				return err
			}
			if cur := r.cursors[t]; cur != nil {
				cur.close()
				if cur.lru != nil {
					r.open.Remove(cur.lru)
				}
				delete(r.cursors, t)
			}
			b.removeTopic(t, blk.EventID)
			b.log.Info("recovery: completed topic delete", "topic", name, "eventId", blk.EventID)
		} else if t == nil {
			return b.trash(b.topicDir(name), blk.EventID)
		}
	}
	return nil
}

// ensureBlocks makes t's log hold exactly the messages of blk at the
// cursor: whole matching blocks are kept, the first mismatch truncates the
// log and everything from there is rewritten from the binlog.
func (r *replayer) ensureBlocks(t *topic, blk *binlog.Block, src segment.Position, records []byte) error {
	l, err := r.b.topicLog(t)
	if err != nil {
		return err
	}
	cur := r.cursors[t]
	if cur == nil {
		loc, err := l.Locate(blk.EventID - 1)
		if err != nil {
			return err
		}
		cur = &cursor{pos: loc.Pos}
		r.cursors[t] = cur
	}
	if err := r.touch(t, cur); err != nil {
		return err
	}
	r.buf, r.marks = r.buf[:0], r.marks[:0]
	tb := topicblock.Block{Ts: blk.WriteTime, SaveTime: blk.WriteTime, SrcFileID: src.FileID, SrcPos: src.Offset}
	for i := 0; len(records) > 0; i++ {
		tb.Record, records = protocol.NextRecord(records)
		tb.EventID, tb.Index = blk.EventID+int64(i), i
		if !cur.appending {
			match, err := r.matchAt(l, cur, &tb)
			if err != nil {
				return err
			}
			if match {
				continue
			}
			cur.close()
			if err := l.TruncateTo(cur.pos); err != nil {
				return err
			}
			r.truncated++
			cur.appending = true
		}
		r.marks = append(r.marks, segment.Mark{EventID: tb.EventID, Off: int64(len(r.buf))})
		r.buf = topicblock.AppendBlock(r.buf, &tb)
		r.appended++
	}
	if len(r.buf) > 0 {
		if _, err := l.Append(r.buf, r.marks); err != nil {
			return err
		}
		l.Commit()
		t.dirty = true
	}
	return nil
}

// touch puts t first among the topics holding descriptors and closes the
// files of the least recent beyond Options.MaxOpenTopics: the reader (the
// cursor's pos is where it stood, and matchAt reopens it there) and the
// current file, fsynced by CloseIdle and reopened by the next append.
func (r *replayer) touch(t *topic, cur *cursor) error {
	if cur.lru != nil {
		r.open.MoveToFront(cur.lru)
	} else {
		cur.lru = r.open.PushFront(t)
	}
	for r.open.Len() > r.b.opts.MaxOpenTopics {
		old := r.open.Back().Value.(*topic)
		oc := r.cursors[old]
		r.open.Remove(oc.lru)
		oc.lru = nil
		oc.close()
		if err := old.log.CloseIdle(); err != nil {
			return fmt.Errorf("close the file of topic %s (store.maxOpenTopics): %w", old.meta.Name, err)
		}
		old.dirty = false
	}
	return nil
}

// matchAt reports whether the block at the cursor is want (same eventId,
// source and record bytes) and advances past it if so. The record is
// compared too: a damaged byte in it decodes fine, and the binlog is what
// slaves serve.
func (r *replayer) matchAt(l *segment.Log, cur *cursor, want *topicblock.Block) (bool, error) {
	if cur.rd == nil {
		cur.rd = l.NewReader(cur.pos)
	}
	var got topicblock.Block
	var at segment.Position
	found, sameRecord := false, false
	for !found {
		n, _, err := cur.rd.Next(1, func(_, _ int64, raw []byte, next segment.Position) error {
			tb, _, derr := topicblock.DecodeBlock(raw)
			if derr != nil {
				return derr
			}
			got, found = tb, true
			at = segment.Position{FileID: next.FileID, Offset: next.Offset - int64(len(raw))}
			// tb.Record is valid only during this call.
			sameRecord = bytes.Equal(tb.Record, want.Record)
			return nil
		})
		if err != nil {
			return false, err
		}
		if n == 0 && cur.rd.Pos().FileID >= l.Committed().FileID {
			cur.pos = cur.rd.Pos()
			return false, nil // the log ends before want
		}
		// n == 0 before the last file: the reader stepped over an empty
		// file and reads on in the next one.
	}
	if got.EventID == want.EventID && got.SrcFileID == want.SrcFileID && got.SrcPos == want.SrcPos && sameRecord {
		cur.pos = cur.rd.Pos()
		return true, nil
	}
	// The mismatch is cut where it starts, which is in a later file than
	// cur.pos when the reader moved on to find it.
	cur.pos = at
	return false, nil
}

// finish cuts topic blocks after the last one the replay vouched for and
// fsyncs what the replay wrote.
func (r *replayer) finish() error {
	for t, cur := range r.cursors {
		cur.close()
		l := t.log
		if !cur.appending {
			end := l.Committed()
			if cur.pos != end {
				// Only blocks no binlog block accounts for can follow.
				if _, ok := l.NextFile(cur.pos.FileID); ok || cur.pos.Offset < end.Offset {
					r.b.log.Warn("topic has blocks the binlog does not; truncating", "topic", t.meta.Name, "at", cur.pos.String())
					if err := l.TruncateTo(cur.pos); err != nil {
						return err
					}
					r.truncated++
				}
			}
		}
		// The writer starts with no topic file open (its LRU is empty):
		// CloseIdle fsyncs what the replay wrote and closes it; the
		// topic's next append reopens it.
		if err := l.CloseIdle(); err != nil {
			return err
		}
		if t.dirty {
			if err := l.Sync(); err != nil {
				return err
			}
			t.dirty = false
		}
	}
	return nil
}
