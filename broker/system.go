package broker

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// System topics: topics the server writes for its own state, replicated
// like any topic because they are ordinary create and pub blocks (so the
// binlog stays byte-compatible with the original). Clients may read them
// but not publish, delay, create or delete them; list (100) leaves them
// out.
//
//   - __cursors (CursorTopic): stored consumer positions, written and
//     applied by the broker itself (cursor.go).
//   - __queues (QueueTopic): the state of the work-queue groups, written
//     and read back by package queue through PublishSystem and
//     ReadSystemTopic; the broker does not interpret its records.

// QueueTopic is the system topic of the work-queue groups (package queue).
const QueueTopic = protocol.QueueTopic

// ErrReservedQueueTopic refuses client writes to the queue topic.
var ErrReservedQueueTopic = protocol.NewBizError("topic " + QueueTopic + " is reserved for the server's work-queue groups")

// IsSystemTopic reports whether name is one of the server's system topics.
func IsSystemTopic(name string) bool { return name == CursorTopic || name == QueueTopic }

// reservedErr is the refusal of a client write to a system topic, or nil.
func reservedErr(name []byte) error {
	switch string(name) {
	case CursorTopic:
		return ErrReservedTopic
	case QueueTopic:
		return ErrReservedQueueTopic
	}
	return nil
}

// PublishSystem appends count records to the system topic name, creating
// it the first time, and returns the first eventId. Only the server's own
// components call it; the role and disk checks of Publish apply.
func (b *Broker) PublishSystem(ctx context.Context, name string, records []byte, count int) (int64, error) {
	if name != QueueTopic {
		return 0, fmt.Errorf("broker: %q is not a system topic written through PublishSystem", name)
	}
	if b.IsSlave() {
		return 0, protocol.ErrSlavePub
	}
	if err := b.diskRefusal(len(records)); err != nil {
		return 0, err
	}
	if err := b.ensureSystemTopic(ctx, name); err != nil {
		return 0, err
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.topic, c.records, c.count, c.timestamp = opPub, name, records, count, b.opts.Now()
	if err := b.submit(ctx, c); err != nil {
		return 0, fmt.Errorf("write %d record(s) to %s: %w", count, name, err)
	}
	return c.eventID, nil
}

// ensureSystemTopic creates the system topic name the first time it is
// written (__cursors and __queues alike).
func (b *Broker) ensureSystemTopic(ctx context.Context, name string) error {
	b.mu.RLock()
	exists := b.topics[name] != nil
	b.mu.RUnlock()
	if exists {
		return nil
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.topic, c.timestamp = opCreate, name, b.opts.Now()
	if err := b.submit(ctx, c); err != nil && !errors.Is(err, protocol.ErrTopicExist) {
		return fmt.Errorf("create %s: %w", name, err)
	}
	return nil
}

// ReadSystemTopic calls fn with every retained record of the system topic
// name, oldest first, whether or not the commit point passed it: the
// records are the node's own state, read back when it becomes master.
// A missing topic has no records. It reads at most up to the last eventId
// committed when it starts.
func (b *Broker) ReadSystemTopic(name string, fn func(eventID int64, record []byte) error) error {
	if !IsSystemTopic(name) {
		return fmt.Errorf("broker: %q is not a system topic", name)
	}
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	if t == nil {
		return nil
	}
	l, err := b.readLog(t)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	files := l.Files()
	if len(files) == 0 {
		return nil
	}
	last := b.LastEventID()
	r := l.NewReader(segment.Position{FileID: files[0]})
	defer r.Close()
	errPast := errors.New("past the start's last eventId")
	for {
		got, _, err := r.Next(1024, func(eventID, _ int64, raw []byte, _ segment.Position) error {
			if eventID > last {
				return errPast
			}
			_, rec, ok := topicblock.Delivery(raw)
			if !ok {
				return fmt.Errorf("block without a record in %s", name)
			}
			for len(rec) > 0 {
				one, rest, ok := splitRecord(rec)
				if !ok {
					return fmt.Errorf("malformed records in %s at eventId %d", name, eventID)
				}
				if err := fn(eventID, one); err != nil {
					return err
				}
				rec = rest
			}
			return nil
		})
		if errors.Is(err, errPast) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if got == 0 {
			return nil
		}
	}
}

// startsQueueSnapshot reports whether a pub's records to __queues begin
// with a snapshot (protocol.QueueSnapshotBody): every group's state is in
// that message, so the topic's files before it hold nothing needed.
func startsQueueSnapshot(records []byte) bool {
	rec, _, ok := splitRecord(records)
	if !ok {
		return false
	}
	r, _, err := protocol.ParseRecord(rec)
	return err == nil && len(r.Headers) == 0 && string(r.Body) == protocol.QueueSnapshotBody
}

// compactBefore removes the files of tb's topic before the one its pub
// starts in. The writer calls it after the pub committed.
func (b *Broker) compactBefore(tb *topicBatch) {
	if tb == nil {
		return
	}
	for _, id := range tb.log.Files() {
		if id >= tb.start.FileID {
			break
		}
		if err := tb.log.RemoveFile(id); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.log.Warn("remove compacted file of "+QueueTopic, "file", id, "err", err)
		}
	}
}

// MessagesAfter counts the messages of topic after eventID, -1 when
// unknown (no such topic, or eventID before what retention kept). Counts
// are cached per (topic, key) like the stored positions' lags, so asking
// again after the position or the topic's end moved reads only the blocks
// in between. key names the asker (a queue group); it never collides with
// a subscriber's who.
func (b *Broker) MessagesAfter(topic, key string, eventID int64) int64 {
	b.mu.RLock()
	t := b.topics[topic]
	b.mu.RUnlock()
	if t == nil {
		return -1
	}
	return b.cursorLag(cursorKey{topic, "\x00" + key}, t, eventID)
}

// ReadMessages calls fn with each stored message of topic whose eventId is
// above after and at most upTo, oldest first, whether or not the commit
// point passed it: for a component reading back messages it handed out
// before (a queue group's pending messages after a restart), which were
// committed then. A position retention removed is not an error: the
// messages still stored are read.
func (b *Broker) ReadMessages(topic string, after, upTo int64, fn func(eventID, ts int64, record []byte) error) error {
	b.mu.RLock()
	t := b.topics[topic]
	b.mu.RUnlock()
	if t == nil {
		return protocol.ErrTopicNotExist
	}
	l, err := b.readLog(t)
	if err != nil {
		return err
	}
	files := l.Files()
	if len(files) == 0 {
		return nil
	}
	pos := segment.Position{FileID: files[0]}
	if after > 0 {
		loc, err := l.Locate(after)
		if err != nil {
			return fmt.Errorf("locate eventId %d in %s: %w", after, topic, err)
		}
		pos = loc.Pos
	}
	r := l.NewReader(pos)
	defer r.Close()
	errPast := errors.New("past upTo")
	for {
		got, _, err := r.Next(1024, func(eventID, _ int64, raw []byte, _ segment.Position) error {
			if eventID > upTo {
				return errPast
			}
			if eventID <= after {
				return nil
			}
			ts, rec, ok := topicblock.Delivery(raw)
			if !ok {
				return fmt.Errorf("block without a record in %s at eventId %d", topic, eventID)
			}
			return fn(eventID, ts, rec)
		})
		if errors.Is(err, errPast) || (err == nil && got == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
	}
}
