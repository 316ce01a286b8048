package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/protocol"
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
	if err := reservedErr(topicName); err != nil {
		return 0, err
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
	c.op, c.topic, c.records, c.count, c.timestamp, c.trigger = opDelay, string(topicName), records, count, now, now+delayMs
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
	c.op, c.topic, c.records, c.timestamp = opDelayApply, topicName, value, b.opts.Now()
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
	c.op, c.topic, c.expireAt, c.timestamp = opDelete, topicName, expireAt, b.opts.Now()
	if err := b.submit(ctx, c); err != nil {
		return false, err
	}
	return c.eventID != 0, nil
}
