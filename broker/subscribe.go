package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// Subscription reads one topic for one subscriber (who). It holds the
// (topic, who) slot until Close. Not safe for concurrent use, except that
// its position fields below are read by Broker.Subscribers at any time.
type Subscription struct {
	b      *Broker
	t      *topic
	who    string
	reader *segment.Reader
	timer  *time.Timer // Next's wait, reused
	closed bool
	// hook is the commit hook (subinline.go), set once before it is
	// registered; committers call it.
	hook func(inline bool) bool

	since, start int64                  // ms the subscription began; the eventId asked to start after
	delivered    atomic.Int64           // last eventId handed out by Next
	acked        atomic.Int64           // last eventId the subscriber acknowledged (Acked)
	remote       atomic.Pointer[string] // SetRemoteAddr
}

// Subscribe registers who on topic and positions a reader after eventID
// (docs/protocol.md §3, §11): messages with a greater eventId are delivered; 0 means
// the oldest retained message.
func (b *Broker) Subscribe(topicName, who []byte, after int64) (*Subscription, error) {
	if err := b.checkExistingName(topicName); err != nil {
		return nil, err
	}
	b.mu.RLock()
	t := b.topics[string(topicName)]
	b.mu.RUnlock()
	if t == nil || t.meta.Expired(b.opts.Now()) {
		return nil, protocol.ErrTopicNotExist
	}
	if after < 0 {
		return nil, protocol.NewBizError(fmt.Sprintf("invalid eventId %d: must be >= 0", after))
	}
	if last := b.LastEventID(); after > last {
		return nil, protocol.NewBizError(fmt.Sprintf("eventId %d is beyond the last eventId %d of this server", after, last))
	}
	l, err := b.readLog(t)
	if err != nil {
		return nil, err
	}
	pos, err := b.startPosition(l, after)
	if err != nil {
		return nil, err
	}
	t.subMu.Lock()
	if t.subs == nil {
		t.subs = map[string]struct{}{}
	}
	if _, dup := t.subs[string(who)]; dup {
		t.subMu.Unlock()
		return nil, protocol.NewBizError(string(who) + " regiester exist")
	}
	t.subs[string(who)] = struct{}{}
	t.subMu.Unlock()
	s := &Subscription{b: b, t: t, who: string(who), reader: l.NewReader(pos), since: b.opts.Now(), start: after}
	s.delivered.Store(after)
	s.acked.Store(after)
	b.stats.addSub(s)
	return s, nil
}

// readLog returns t's log for a reader. The writer opens logs lazily, so a
// subscriber may be first; opening under the topic's lock keeps one Log.
func (b *Broker) readLog(t *topic) (*segment.Log, error) {
	b.mu.RLock()
	l := t.log
	b.mu.RUnlock()
	if l != nil {
		return l, nil
	}
	// Only the writer may create a topic's Log (it owns appends), so ask it.
	c := getCommand()
	defer putCommand(c)
	c.op, c.topic = opOpenLog, t.meta.Name
	if err := b.submit(context.Background(), c); err != nil {
		return nil, err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if t.log == nil {
		return nil, protocol.ErrTopicNotExist
	}
	return t.log, nil
}

func (b *Broker) startPosition(l *segment.Log, after int64) (segment.Position, error) {
	files := l.Files()
	if after == 0 {
		if len(files) == 0 {
			return l.Committed(), nil
		}
		return segment.Position{FileID: files[0]}, nil
	}
	loc, err := l.Locate(after)
	if err != nil {
		return segment.Position{}, fmt.Errorf("locate eventId %d: %w", after, err)
	}
	if loc.BeforeOldest && len(files) > 0 && files[0] > 0 {
		// Retention removed the oldest files; messages right after
		// `after` may have been in them. Never skip silently.
		first, ok, err := l.FirstEventID()
		if err != nil {
			return segment.Position{}, err
		}
		if ok && first > after+1 {
			return segment.Position{}, protocol.NewBizError(fmt.Sprintf(
				"messages after eventId %d were removed by retention; the oldest retained eventId is %d", after, first))
		}
	}
	return loc.Pos, nil
}

// Deleted is closed when the topic is deleted or reaped.
func (s *Subscription) Deleted() <-chan struct{} { return s.t.deleted }

// errFrameFull stops a read before the message that would take a frame past
// Options.MaxFrameBytes; the reader stays before that message.
var errFrameFull = errors.New("subscription frame full")

// errNotCommitted stops a read before the first message above the commit
// point (commitpoint.go); the reader stays before it.
var errNotCommitted = errors.New("message above the commit point")

// errIdle ends Next's wait when wait passed (the caller sends an alive).
var errIdle = errors.New("subscription idle")

// Next appends up to max messages to dst as subscription message units
// (docs/protocol.md §2.4) and returns how many. The units appended stay within
// Options.MaxFrameBytes, except that the first is appended whatever its
// size (a message larger than the bound goes alone). With wait <= 0 it only polls. With
// nothing to deliver it waits until
// the writer commits more, the topic is deleted (protocol.ErrTopicDeleted), wait
// passes (0 messages: the caller sends an alive) or ctx ends.
func (s *Subscription) Next(ctx context.Context, dst []byte, max int, wait time.Duration) ([]byte, int, error) {
	timerSet := false
	defer func() {
		if timerSet {
			s.timer.Stop()
		}
	}()
	for {
		select {
		case <-s.t.deleted:
			return dst, 0, protocol.ErrTopicDeleted
		default:
		}
		changed := s.t.log.Changed()
		limit, moved := s.b.commit.view()
		out, n, held, err := s.read(dst, max, limit)
		if err != nil || n > 0 {
			return out, n, err
		}
		if wait <= 0 {
			return dst, 0, nil // a poll: keep the file open for the next one
		}
		if !timerSet {
			// One timer per subscription, re-armed per wait: at low rates
			// every message is a wait.
			armTimer(&s.timer, wait)
			timerSet = true
		}
		// Only a subscriber the commit point holds back waits for it to
		// move; one at the end of its topic waits for a commit, so that a
		// move does not wake every idle subscriber of every topic.
		var move <-chan struct{}
		if held {
			move = moved
			s.b.commit.blocked.Add(1)
		}
		var end error
		select {
		case <-changed:
		case <-move:
		case <-s.t.deleted:
			end = protocol.ErrTopicDeleted
		case <-s.timer.C:
			s.reader.Close() // hold no descriptor while idle
			end = errIdle
		case <-ctx.Done():
			end = ctx.Err()
		}
		if held {
			s.b.commit.blocked.Add(-1)
		}
		switch {
		case end == errIdle:
			return dst, 0, nil
		case end != nil:
			return dst, 0, end
		}
	}
}

// read appends up to max messages with eventIds at or below limit; held
// reports that it stopped before a message above limit.
func (s *Subscription) read(dst []byte, max int, limit int64) (_ []byte, _ int, held bool, _ error) {
	lastAt, lastID := -1, int64(0)
	room := s.b.opts.MaxFrameBytes
	n, endOfFile, err := s.reader.Next(max, func(eventID, _ int64, raw []byte, next segment.Position) error {
		if eventID > limit {
			return errNotCommitted // delivered once the commit point passes it
		}
		// The reader's decoder has validated the block already.
		ts, record, ok := topicblock.Delivery(raw)
		if !ok {
			return fmt.Errorf("BUG: validated topic block has no record at %s", next)
		}
		unit := protocol.SubMessageFixedSize + len(record)
		if lastAt >= 0 && unit > room {
			return errFrameFull // the next frame starts with it
		}
		room -= unit
		lastAt, lastID = len(dst), eventID
		dst = protocol.AppendSubMessage(dst, ts, eventID, next.FileID, next.Offset, record)
		return nil
	})
	held = errors.Is(err, errNotCommitted)
	if errors.Is(err, errFrameFull) || held {
		err = nil
	}
	if n > 0 {
		s.delivered.Store(lastID)
	}
	if n > 0 && endOfFile {
		// The frame ends exactly at the end of a rolled file: point at
		// the start of the next one (docs/protocol.md §2.4).
		pos := s.reader.Pos()
		putInt64(dst[lastAt+16:], pos.FileID)
		putInt64(dst[lastAt+24:], 0)
	}
	if err != nil {
		if errors.Is(err, segment.ErrFileRemoved) {
			return dst, n, false, protocol.NewBizError("subscription position is gone: " + err.Error())
		}
		var ce *segment.CorruptError
		if errors.As(err, &ce) {
			s.b.log.Error("corrupt topic data under a subscriber", "topic", s.t.meta.Name, "who", s.who, "err", err)
			return dst, n, false, protocol.NewBizError("corrupt data in topic file: " + err.Error())
		}
		return dst, n, false, err
	}
	return dst, n, held, nil
}

func putInt64(b []byte, v int64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

// Close frees the (topic, who) slot and the reader's file.
func (s *Subscription) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.dropHook()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.reader.Close()
	// Before the slot is freed: a snapshot must never see the who neither
	// subscribed nor recently used (retention, cursor.go).
	s.b.cursorTouch(s.t, s.who)
	s.t.subMu.Lock()
	delete(s.t.subs, s.who)
	s.t.subMu.Unlock()
	s.b.stats.removeSub(s)
	if s.b.cursorsOn() {
		s.b.kickCursors() // write its position now, not at the next tick
	}
}

// Acked records that the subscriber acknowledged every message up to
// eventID (the server calls it after each ack 0 or 1). It feeds the
// position and lag that Broker.Subscribers reports and moves the stored
// position of (topic, who) (cursor.go).
func (s *Subscription) Acked(eventID int64) {
	if eventID > s.acked.Load() {
		s.acked.Store(eventID)
		s.b.cursorAcked(s.t, s.who, eventID)
	}
}

// SetRemoteAddr names the subscriber's network address for
// Broker.Subscribers.
func (s *Subscription) SetRemoteAddr(addr string) { s.remote.Store(&addr) }
