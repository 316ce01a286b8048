package broker

import (
	"context"
	"sync"

	"github.com/smssmq/smss/protocol"
)

// Pub is one publish of PublishBatch: Topic, Records and Count in (as for
// Publish), EventID and Err out.
type Pub struct {
	Topic, Records []byte
	Count          int
	EventID        int64
	Err            error
}

// cmdSlices recycles PublishBatch's command lists.
var cmdSlices = sync.Pool{New: func() any { s := make([]*command, 0, 64); return &s }}

// PublishBatch publishes every ps[i] as Publish would and fills in its
// EventID or Err. The publishes that pass Publish's checks are queued in
// order under one lock and awaited on the caller's goroutine, which runs
// the writer itself when the token comes to it (lead.go): a front-end that
// reads many publishes at once (the server's epoll loop) gets them written
// as one group without a goroutine or a wake-up per publish. Their eventIds
// follow the order of ps.
func (b *Broker) PublishBatch(ctx context.Context, ps []Pub) {
	sp := cmdSlices.Get().(*[]*command)
	cs := (*sp)[:0]
	now := b.opts.Now()
	for i := range ps {
		p := &ps[i]
		p.EventID, p.Err = 0, b.checkPub(p.Topic, p.Records)
		if p.Err != nil {
			continue
		}
		msgID, err := b.publishID(p.Records)
		if err != nil {
			p.Err = err
			continue
		}
		c := getCommand()
		c.op, c.topic, c.records, c.count, c.timestamp = opPub, string(p.Topic), p.Records, p.Count, now
		c.msgID, c.batched = msgID, true
		cs = append(cs, c)
	}
	var qerr error
	if len(cs) > 0 {
		qerr = b.enqueue(ctx, false, cs...)
	}
	j := 0
	for i := range ps {
		p := &ps[i]
		if p.Err != nil {
			continue
		}
		c := cs[j]
		j++
		if qerr != nil {
			p.Err = qerr
			putCommand(c)
			continue
		}
		// Once queued, it is executed: wait for it even if ctx ends (as
		// submit does).
		b.await(c)
		b.noteNoSpace(c.err)
		if c.err != nil {
			p.Err = c.err
		} else {
			p.EventID = c.eventID
			if c.dup {
				b.opts.Metrics.DedupeHit(p.Topic)
			} else {
				b.opts.Metrics.PublishedBytes(p.Topic, p.Count, len(p.Records))
			}
		}
		putCommand(c)
	}
	clear(cs)
	*sp = cs[:0]
	cmdSlices.Put(sp)
}

// checkPub is Publish's refusals before queueing, in its order: the name,
// the role, the reserved topic, the disk watermark.
func (b *Broker) checkPub(topicName, records []byte) error {
	if err := protocol.ValidateTopicName(topicName); err != nil {
		return err
	}
	if b.IsSlave() {
		return protocol.ErrSlavePub
	}
	if err := reservedErr(topicName); err != nil {
		return err
	}
	return b.diskRefusal(len(records))
}
