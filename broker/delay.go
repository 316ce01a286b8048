package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
)

// maxDelayMs bounds delays so trigger times can never overflow; the
// configured, much smaller, Options.MaxDelay applies first.
const maxDelayMs = protocol.MaxDelayMs

// DefaultMaxDelay is Options.MaxDelay's default (delay.maxDelay).
const DefaultMaxDelay = 30 * 24 * time.Hour

// Hooks are called by the writer after a group commits, so background
// schedulers can arm their timers without polling. They must not block.
type Hooks struct {
	// DelayStored gets the trigger time of each new delayed message.
	DelayStored func(triggerMs int64)
	// TopicExpiry gets the expiry of each topic created with a lifetime.
	TopicExpiry func(expireAtMs int64)
}

// SetHooks installs h; call it before traffic starts.
func (b *Broker) SetHooks(h Hooks) { b.hooks.Store(&h) }

func (b *Broker) hook() *Hooks {
	if h := b.hooks.Load(); h != nil {
		return h
	}
	return &Hooks{}
}

// PublishDelay stores records to be published on topic after delayMs
// (docs/protocol.md §1.5.5). The records were validated with protocol.CountRecords.
func (b *Broker) PublishDelay(ctx context.Context, topicName, records []byte, count int, delayMs int64) (int64, error) {
	// The role, then delay.maxDelay, then the name: the order of the
	// replies on the wire (docs/protocol.md §1.5.5, §11), which the server
	// does not check itself.
	if b.IsSlave() {
		return 0, protocol.ErrSlavePub
	}
	if max := b.opts.MaxDelay.Milliseconds(); delayMs > max {
		return 0, protocol.NewBizError(fmt.Sprintf("delay of %d ms exceeds delay.maxDelay %d", delayMs, max))
	}
	if err := protocol.ValidateTopicName(topicName); err != nil {
		return 0, err
	}
	if string(topicName) == CursorTopic {
		return 0, ErrReservedTopic
	}
	if delayMs < protocol.MinDelayMs {
		return 0, protocol.ErrDelayTooShort
	}
	if delayMs > maxDelayMs {
		return 0, protocol.NewBizError(fmt.Sprintf("delay of %d ms is too long (at most %d)", delayMs, int64(maxDelayMs)))
	}
	if err := b.diskRefusal(len(records)); err != nil {
		return 0, err
	}
	msgID, err := b.publishID(records)
	if err != nil {
		return 0, err
	}
	c := getCommand()
	defer putCommand(c)
	now := b.opts.Now()
	c.cmd, c.topic, c.records, c.count, c.timestamp, c.trigger = protocol.CmdDelay, string(topicName), records, count, now, now+delayMs
	c.msgID = msgID
	if err := b.submit(ctx, c); err != nil {
		return 0, err
	}
	if c.dup {
		b.opts.Metrics.DedupeHit(topicName)
	}
	return c.eventID, nil
}

// ApplyDelay publishes a due delayed message: value is the stored delay@
// value (trigger, delay eventId, records). The publication and the removal
// of its key commit together, so each delayed message is published exactly
// once (docs/protocol.md §11). A key that is already gone is a no-op; a topic that is
// gone only drops the key. It returns the first eventId, 0 when nothing was
// published.
func (b *Broker) ApplyDelay(ctx context.Context, topicName string, value []byte) (int64, error) {
	if b.IsSlave() {
		return 0, protocol.ErrSlavePub
	}
	if len(value) < binlog.DelayPrefixLen+protocol.RecordPrefixSize+1 {
		return 0, fmt.Errorf("delay apply: stored value of %d bytes is too short", len(value))
	}
	c := getCommand()
	defer putCommand(c)
	c.cmd, c.topic, c.records, c.timestamp = protocol.CmdDelayApply, topicName, value, b.opts.Now()
	if err := b.submit(ctx, c); err != nil {
		return 0, err
	}
	return c.eventID, nil
}

// ExpireTopic deletes topicName through the writer (a binlogged delete, so
// slaves and subscribers see it) if it still is the incarnation that
// expires at expireAt and that time has passed.
func (b *Broker) ExpireTopic(ctx context.Context, topicName string, expireAt int64) (bool, error) {
	if b.IsSlave() {
		return false, protocol.ErrSlaveManage
	}
	c := getCommand()
	defer putCommand(c)
	c.cmd, c.topic, c.expireAt, c.timestamp = protocol.CmdDelete, topicName, expireAt, b.opts.Now()
	if err := b.submit(ctx, c); err != nil {
		return false, err
	}
	return c.eventID != 0, nil
}

func (w *writer) stageDelay(c *command, now int64) error {
	t := w.b.topics[c.topic]
	if t == nil || t.meta.Expired(now) {
		return protocol.ErrTopicNotExist
	}
	if c.msgID.n != 0 {
		dup, existed := w.dd.check(t, c, now)
		if dup {
			return nil
		}
		w.dd.stage(t, c, w.next, now, existed) // nothing below fails
	}
	c.eventID = w.next
	w.next++
	value := meta.DelayValue(c.trigger, c.eventID, c.records)
	w.appendBinlog(&binlog.Block{WriteTime: now, Cmd: binlog.CmdDelay, EventID: c.eventID,
		Timestamp: c.timestamp, Topic: []byte(c.topic), Payload: value})
	w.mb.PutDelay(meta.DelayKey(c.trigger, c.eventID, []byte(c.topic)), value)
	trigger := c.trigger
	w.post = append(w.post, func() {
		if f := w.b.hook().DelayStored; f != nil {
			f(trigger)
		}
	})
	if w.b.sample() {
		w.b.log.Info("delay", "topic", c.topic, "eventId", c.eventID, "trigger", c.trigger, "records", c.count)
	}
	return nil
}

func (w *writer) stageDelayApply(c *command, now int64, binStart segment.Position) error {
	key, err := meta.DelayKeyFromValue(c.records, []byte(c.topic))
	if err != nil {
		return fmt.Errorf("delay apply: %w", err)
	}
	if w.applied[string(key)] {
		return nil // the same key twice in one group
	}
	ok, err := w.b.meta.HasDelay(key)
	if err != nil {
		return fmt.Errorf("delay apply: %w", err)
	}
	if !ok {
		return nil // already applied
	}
	delayID := int64(binary.LittleEndian.Uint64(c.records[8:]))
	t := w.b.topics[c.topic]
	if t == nil || t.meta.Expired(now) || t.meta.CreateEventID > delayID {
		// The topic it was stored for is gone; a topic created later
		// under the same name must not inherit it (docs/protocol.md §11).
		w.b.log.Info("delayed message dropped: its topic is gone", "topic", c.topic, "delayEventId", delayID)
		w.applied[string(key)] = true
		w.mb.DeleteDelay(key)
		return nil
	}
	records := c.records[binlog.DelayPrefixLen:]
	count, err := protocol.CountRecords(records, 0)
	if err != nil {
		return fmt.Errorf("BUG: stored delay value has invalid records: %w", err)
	}
	l, err := w.b.topicLog(t)
	if err != nil {
		return fmt.Errorf("open topic %s: %w", c.topic, err)
	}
	// Nothing below can fail: the key's removal is staged together with
	// the publication it stands for, never without it.
	w.applied[string(key)] = true
	w.mb.DeleteDelay(key)
	c.eventID = w.next
	w.next += int64(count)
	off := w.appendBinlog(&binlog.Block{WriteTime: now, Cmd: binlog.CmdDelayApply, EventID: c.eventID,
		Timestamp: c.timestamp, Topic: []byte(c.topic), Payload: c.records})
	w.appendTopicBlocks(w.batchFor(t, l), c.eventID, now, segment.Position{FileID: binStart.FileID, Offset: binStart.Offset + off}, records)
	return nil
}
