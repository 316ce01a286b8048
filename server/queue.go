package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// Queues serves the work-queue groups (issue 33; docs/protocol.md §12.6).
type Queues interface {
	Create(ctx context.Context, topic string, cfg protocol.QueueConfig) (protocol.QueueInfo, error)
	Delete(ctx context.Context, topic, group string) error
	Info(topic, group string) ([]protocol.QueueInfo, error)
	// Join adds a consumer; maxInFlight 0 takes the group's.
	Join(topic, group, consumer, addr string, maxInFlight int) (QueueConsumer, error)
}

// QueueConsumer is one consumer of a group as a connection serves it
// (queue.Consumer).
type QueueConsumer interface {
	Wake() <-chan struct{}
	Done() <-chan struct{}
	Err() error
	Take(dst []byte) []byte
	Outcomes(os []protocol.QueueOutcome)
	Leave()
}

var errNoQueues = protocol.NewBizError("queue groups are not available on this server")

// queueCommand serves create (41), delete (42) and info (43).
func (c *conn) queueCommand() error {
	qs := c.s.opts.Queues
	if qs == nil {
		return errNoQueues
	}
	req := &c.req
	topic := string(req.Topic)
	if topic != "" || req.Header.Cmd != protocol.CmdQueueInfo {
		if err := protocol.ValidateTopicName(req.Topic); err != nil {
			return err
		}
	}
	switch req.Header.Cmd {
	case protocol.CmdQueueCreate:
		var cfg protocol.QueueConfig
		if err := protocol.DecodeQueueBody(req.Payload, &cfg); err != nil {
			return err
		}
		qi, err := qs.Create(c.s.ctx, topic, cfg)
		if err != nil {
			return err
		}
		return c.replyQueueJSON(qi)
	case protocol.CmdQueueDelete:
		var ref protocol.QueueRef
		if err := protocol.DecodeQueueBody(req.Payload, &ref); err != nil {
			return err
		}
		if err := qs.Delete(c.s.ctx, topic, ref.Group); err != nil {
			return err
		}
		c.out = protocol.AppendReplyOK(c.out)
		return nil
	default: // info
		var ref protocol.QueueRef
		if len(req.Payload) > 0 {
			if err := protocol.DecodeQueueBody(req.Payload, &ref); err != nil {
				return err
			}
		}
		list, err := qs.Info(topic, ref.Group)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return c.appendJSON(nil)
		}
		return c.replyQueueJSON(list)
	}
}

func (c *conn) replyQueueJSON(v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode queue reply: %w", err)
	}
	return c.appendJSON(body)
}

// consume serves a consume request (44): the connection becomes the
// stream of one consumer of a group until the client sends stop (then a
// 255 and back to the command loop), the group or its topic is deleted
// (255, then the connection is closed: the client may be writing
// outcomes), or the stream fails (400 + text, closed). One goroutine
// writes what the group queues for the consumer, and alives while idle;
// this one reads the client's outcome units. It returns false when the
// connection must be closed.
func (c *conn) consume(start time.Time) bool {
	qs := c.s.opts.Queues
	req := &c.req
	var spec protocol.QueueConsume
	var err error = errNoQueues
	var qc QueueConsumer
	if qs != nil {
		if err = protocol.ValidateTopicName(req.Topic); err == nil {
			if err = protocol.DecodeQueueBody(req.Payload, &spec); err == nil {
				qc, err = qs.Join(string(req.Topic), spec.Group, spec.Consumer, c.nc.RemoteAddr().String(), spec.MaxInFlight)
			}
		}
	}
	c.s.opts.Metrics.ObserveRequest(protocol.CmdQueueConsume, time.Since(start), err == nil)
	if err != nil {
		if protocol.IsBizError(err) {
			c.s.opts.Metrics.Error(metrics.KindBusiness)
		} else {
			c.log.Warn("request failed", c.attrs(err.Error(), start)...)
		}
		c.out = protocol.AppendReplyError(c.out[:0], err.Error())
		return c.write(c.s.opts.WriteTimeout)
	}
	if !c.s.setState(c, stateStream) {
		qc.Leave()
		c.out = protocol.AppendReplyError(c.out[:0], errShuttingDown)
		c.write(c.s.opts.WriteTimeout)
		return false
	}
	c.log.Info("queue consumer started", "topic", string(req.Topic), "group", spec.Group, "consumer", spec.Consumer,
		"maxInFlight", spec.MaxInFlight, "traceId", string(req.TraceID))

	wdone := make(chan bool, 1) // the writer's verdict: keep the connection
	stopRead := make(chan struct{})
	go func() { wdone <- c.consumeWriter(qc, stopRead) }()

	reason, readOK := c.consumeReader(qc, stopRead)
	keep := <-wdone && readOK
	qc.Leave()
	c.dr.timeout = c.s.opts.ReadTimeout
	_ = c.nc.SetReadDeadline(time.Time{})
	c.dr.armed.forget()
	c.log.Info("queue consumer ended", "topic", string(req.Topic), "group", spec.Group, "consumer", spec.Consumer,
		"reason", reason, "keepConnection", keep, "elapsed", time.Since(start))
	return keep
}

// consumeReader reads outcome units until the client sends stop (true:
// the stream ended where a request may follow), the writer ends the
// stream (stopRead), or the socket fails.
func (c *conn) consumeReader(qc QueueConsumer, stopRead chan struct{}) (string, bool) {
	c.dr.timeout = 0 // a worker may be silent for long; alives test the socket
	var unit [protocol.QueueOutcomeSize]byte
	var batch []protocol.QueueOutcome
	for {
		if _, err := io.ReadFull(c.br, unit[:]); err != nil {
			select {
			case <-stopRead:
				return "ended by the server", false
			default:
			}
			qc.Leave()
			if isTimeout(err) {
				return "read timeout", false
			}
			return "client closed: " + err.Error(), false
		}
		o, err := protocol.DecodeQueueOutcome(unit[:])
		if err != nil {
			c.s.opts.Metrics.Error(metrics.KindProtocol)
			qc.Leave()
			return "invalid outcome: " + err.Error(), false
		}
		batch = append(batch, o)
		// Hand over everything already buffered as one batch: one record
		// of the group covers it.
		if o.Op != protocol.QueueOpStop && c.br.Buffered() >= protocol.QueueOutcomeSize && len(batch) < 4096 {
			continue
		}
		qc.Outcomes(batch)
		batch = nil
		if o.Op == protocol.QueueOpStop {
			<-stopRead // the writer sends the last confirmations and 255
			return "stop", true
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// consumeWriter writes the consumer's frames, alives while idle, and the
// end. It closes stopRead when it is done and reports whether the
// connection may stay in the command loop.
func (c *conn) consumeWriter(qc QueueConsumer, stopRead chan struct{}) bool {
	defer close(stopRead)
	alive := time.NewTimer(c.s.opts.AliveInterval)
	defer alive.Stop()
	var buf []byte
	send := func() bool {
		if len(buf) == 0 {
			return true
		}
		c.out = buf
		ok := c.write(c.s.opts.WriteTimeout)
		buf = buf[:0]
		if cap(buf) > 1<<20 {
			buf = nil
		}
		return ok
	}
	for {
		select {
		case <-qc.Wake():
			buf = qc.Take(buf)
			if !send() {
				_ = c.nc.SetReadDeadline(time.Now()) // end the reader
				return false
			}
			alive.Reset(c.s.opts.AliveInterval) // Go 1.23 timers: no stale fire after Reset
		case <-alive.C:
			buf = protocol.AppendReplyAlive(buf)
			if !send() {
				_ = c.nc.SetReadDeadline(time.Now())
				return false
			}
			alive.Reset(c.s.opts.AliveInterval)
		case <-qc.Done():
			buf = qc.Take(buf)
			err := qc.Err()
			if err != nil {
				buf = protocol.AppendReplyError(buf, err.Error())
			} else {
				buf = protocol.AppendReplySubEnd(buf)
			}
			ok := send()
			// A stop the client sent: the reader waits for this and the
			// stream is in step. Otherwise the reader is blocked mid-read
			// and the client may still be writing outcomes: close.
			_ = c.nc.SetReadDeadline(time.Now())
			return ok && err == nil
		}
	}
}
