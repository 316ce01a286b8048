package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// dispatch serves a fully read request and writes its reply; false ends the
// connection.
func (c *conn) dispatch(start time.Time) bool {
	req := &c.req
	c.out = c.out[:0]
	var (
		err        error
		closeAfter bool
		eventID    int64
		timeout    = c.s.opts.WriteTimeout
	)
	switch req.Header.Cmd {
	case protocol.CmdAlive:
		c.out = protocol.AppendReplyAlive(c.out)
		timeout = c.s.opts.AliveWriteTimeout
	case protocol.CmdPub:
		eventID, err = c.pub()
	case protocol.CmdCreate:
		eventID, err = c.create()
	case protocol.CmdDelete:
		eventID, err = c.delete()
	case protocol.CmdTopicInfo:
		err = c.info()
	case protocol.CmdList:
		err = c.list(c.visibleTopics(hideSystemTopics(c.s.opts.Backend.Topics())))
	case protocol.CmdValidList:
		err = c.list(c.s.opts.Backend.ValidTopics(req.EventID))
	case protocol.CmdDelay:
		eventID, err = c.delay()
	case protocol.CmdStatus:
		err = c.status()
	case protocol.CmdPromote:
		err = c.promote()
	case protocol.CmdFollow:
		err = c.follow()
	case protocol.CmdSwitchover:
		err = c.switchover()
	case protocol.CmdCursorList, protocol.CmdCursorSet, protocol.CmdCursorReset:
		err = c.cursorCommand()
	case protocol.CmdQueueCreate, protocol.CmdQueueDelete, protocol.CmdQueueInfo:
		err = c.queueCommand()
	case protocol.CmdQueueConsume:
		keep := c.consume(start)
		c.dr.armed.forget()
		return keep
	case protocol.CmdSub:
		// A stream writes its own frames and logs, and sets read
		// deadlines directly.
		keep := c.sub(start)
		c.dr.armed.forget()
		return keep
	case protocol.CmdReplica:
		if c.s.opts.Replication != nil && !c.s.opts.Backend.IsSlave() {
			keep := c.replica(start)
			c.dr.armed.forget()
			return keep
		}
		err = protocol.ErrNotSupported
		closeAfter = true
	default:
		// replica turns the connection into a stream that is not served
		// here, and the client would wait for frames: close.
		err = protocol.ErrNotSupported
		closeAfter = true
	}
	if err == nil && eventID > 0 {
		// Semi-sync: the write is committed; only this reply waits for
		// the slaves' confirmations (never the writer). A dedupe hit
		// carries the original's eventId and waits the same way.
		err = c.s.opts.Sync.Wait(c.s.ctx, eventID)
	}

	if err != nil {
		c.out = protocol.AppendReplyError(c.out[:0], err.Error())
		switch {
		case closeAfter:
			c.s.opts.Metrics.Error(metrics.KindProtocol)
			c.log.Warn("refusing request and closing connection", c.attrs(err.Error(), start)...)
		case !protocol.IsBizError(err):
			c.log.Warn("request failed", c.attrs(err.Error(), start)...)
		default:
			c.s.opts.Metrics.Error(metrics.KindBusiness)
			if c.s.sampler.sample() {
				c.log.Info("request refused", c.attrs(err.Error(), start)...)
			}
		}
	} else if c.s.sampler.sample() {
		a := c.attrs("", start)
		if eventID != 0 {
			a = append(a, "eventId", eventID)
		}
		c.log.Info("request served", a...)
	}
	ok := c.write(timeout)
	c.s.opts.Metrics.ObserveRequest(req.Header.Cmd, time.Since(start), err == nil)
	if !ok {
		return false
	}
	if closeAfter {
		c.linger()
		return false
	}
	return true
}

// Topic names, the slave role, a create's lifetime and delay.maxDelay are
// the broker's rules (Backend): the handlers below pass requests on and
// send its refusals verbatim, which come in the order of docs/protocol.md
// §1.5. The one role check here is serveRequest's: §1.5.5 answers a
// slave's delay with the role's refusal also when the request reader
// refused its content, which the broker never sees.

func (c *conn) pub() (int64, error) {
	c.notePublisher()
	req := &c.req
	id, err := c.s.opts.Backend.Publish(c.s.ctx, req.Topic, req.Payload, req.RecordCount)
	if err != nil {
		return 0, err
	}
	c.out = protocol.AppendReplyOK(c.out)
	return id, nil
}

// delay serves a delay pub (§1.5.5). The request reader already refused a
// payload of 8 bytes or less, a delay under 1 s and invalid records, in that
// order (on a slave serveRequest answers those with the role's refusal);
// the broker checks the role, delay.maxDelay and the name, in that order.
func (c *conn) delay() (int64, error) {
	req := &c.req
	id, err := c.s.opts.Backend.PublishDelay(c.s.ctx, req.Topic, req.Payload, req.RecordCount, req.DelayMs)
	if err != nil {
		return 0, err
	}
	c.out = protocol.AppendReplyOK(c.out)
	return id, nil
}

func (c *conn) create() (int64, error) {
	req := &c.req
	id, err := c.s.opts.Backend.CreateTopic(c.s.ctx, req.Topic, req.ExpireAt)
	if err != nil {
		return 0, err
	}
	c.out = protocol.AppendReplyOK(c.out)
	return id, nil
}

func (c *conn) delete() (int64, error) {
	req := &c.req
	id, err := c.s.opts.Backend.DeleteTopic(c.s.ctx, req.Topic)
	if err != nil {
		return 0, err
	}
	c.out = protocol.AppendReplyOK(c.out)
	return id, nil
}

func (c *conn) info() error {
	req := &c.req
	if len(req.Topic) == 0 {
		return protocol.ErrTopicNameRequired // §1.5.8, before the name rule
	}
	t, err := c.s.opts.Backend.Topic(req.Topic)
	if err != nil {
		return err
	}
	body, err := json.Marshal(&t)
	if err != nil {
		return fmt.Errorf("encode topic info: %w", err)
	}
	return c.appendJSON(body)
}

func (c *conn) list(topics []protocol.TopicInfo, err error) error {
	if err != nil {
		return err
	}
	if len(topics) == 0 {
		// §2.2: no entries is a 200 with length 0 and no body.
		return c.appendJSON(nil)
	}
	body, err := json.Marshal(topics)
	if err != nil {
		return fmt.Errorf("encode topic list: %w", err)
	}
	return c.appendJSON(body)
}

func (c *conn) appendJSON(body []byte) error {
	out, err := protocol.AppendReplyJSON(c.out, body)
	if err != nil {
		return errors.New("reply too large")
	}
	c.out = out
	return nil
}
