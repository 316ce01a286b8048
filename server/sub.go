package server

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// Ack codes a subscriber sends after each data frame (§2.5).
const (
	ackContinue = 0
	ackEnd      = 1
)

// acker is implemented by a Subscription that tracks the subscriber's
// acknowledged position for operators (*broker.Subscription).
type acker interface{ Acked(eventID int64) }

// remoteNamer is implemented by a Subscription or replica stream that
// reports the peer's address to operators.
type remoteNamer interface{ SetRemoteAddr(addr string) }

// subStream is one subscription being served on a connection.
type subStream struct {
	c          *conn
	sub        Subscription
	acker      acker // nil when sub does not track acks
	topic      string
	who        string
	from       int64
	batch      int
	ackTimeout time.Duration

	frames    int
	messages  int
	lastEvent int64 // eventId of the last message delivered, 0 before any
}

// sub serves a subscribe request (§1.5.1, §2.4–2.7, §3): a stream of data
// frames, each acknowledged, alives while idle, and a 255 or a 400 at the
// end. It returns false when the connection must be closed.
func (c *conn) sub(start time.Time) bool {
	req := &c.req
	batch := int(req.Header.BatchSize())
	if batch == 0 {
		batch = 1
	}
	ackTimeout := time.Duration(req.AckTimeout)
	switch {
	case ackTimeout <= 0:
		ackTimeout = c.s.opts.DefaultAckTimeout
	case ackTimeout > c.s.opts.MaxAckTimeout:
		ackTimeout = c.s.opts.MaxAckTimeout
	}
	sub, err := c.subscribe()
	// The request ends where the stream starts.
	c.s.opts.Metrics.ObserveRequest(protocol.CmdSub, time.Since(start), err == nil)
	if err != nil {
		if protocol.IsBizError(err) {
			c.s.opts.Metrics.Error(metrics.KindBusiness)
			if c.s.sampler.sample() {
				c.log.Info("request refused", c.attrs(err.Error(), start)...)
			}
		} else {
			c.log.Warn("request failed", c.attrs(err.Error(), start)...)
		}
		c.out = protocol.AppendReplyError(c.out[:0], err.Error())
		return c.write(c.s.opts.WriteTimeout)
	}
	defer sub.Close()
	if !c.s.setState(c, stateStream) {
		return false
	}
	if rn, ok := sub.(remoteNamer); ok {
		rn.SetRemoteAddr(c.nc.RemoteAddr().String())
	}
	st := &subStream{c: c, sub: sub, topic: string(req.Topic), who: string(req.Who), from: req.EventID,
		batch: batch, ackTimeout: ackTimeout}
	st.acker, _ = sub.(acker)
	c.log.Info("subscription started", "topic", st.topic, "who", st.who, "from", st.from,
		"batch", batch, "ackTimeout", ackTimeout, "traceId", string(req.TraceID))

	reason, keep := st.run()

	// Back to per-request deadlines for the command loop.
	c.dr.timeout = c.s.opts.ReadTimeout
	if cap(c.out) > 1<<20 {
		c.out = nil // do not pin a large batch's buffer for the connection's life
	}
	c.log.Info("subscription ended", "topic", st.topic, "who", st.who, "from", st.from, "reason", reason,
		"frames", st.frames, "messages", st.messages, "lastEventId", st.lastEvent,
		"keepConnection", keep, "elapsed", time.Since(start))
	return keep
}

func (c *conn) subscribe() (Subscription, error) {
	if err := protocol.ValidateTopicName(c.req.Topic); err != nil {
		return nil, err
	}
	return c.s.opts.Backend.Subscribe(c.req.Topic, c.req.Who, c.req.EventID)
}

// run streams until the subscription ends and says why; keep reports
// whether the connection stays in the command loop. When run returns, no
// goroutine is reading the socket.
//
// While data is available the loop is read batch, write frame, read ack, on
// this goroutine alone. Only when Next would block does a watcher read the
// socket, because the client sends nothing then and a read is the only way
// to notice that it went away (its who slot must be freed at once).
func (st *subStream) run() (reason string, keep bool) {
	c := st.c
	// Stream reads use absolute deadlines (ack timeout) or none (watcher).
	c.dr.timeout = 0
	var w *watcher
	defer func() {
		if w != nil {
			w.stop()
		}
	}()
	for {
		out := append(c.out[:0], make([]byte, protocol.RespHeaderSize)...)
		var (
			n   int
			err error
		)
		if w == nil {
			// Poll without waiting first: the common case has data, and
			// then no goroutine or timer is involved.
			out, n, err = st.sub.Next(c.s.ctx, out, st.batch, 0)
			if n == 0 && err == nil {
				c.out = out
				if w, err = startWatcher(c); err != nil {
					return "watch socket: " + err.Error(), false
				}
				continue
			}
		} else {
			out, n, err = st.sub.Next(w.ctx, out, st.batch, c.s.opts.AliveInterval)
			if n == 0 && err == nil {
				c.out = protocol.AppendReplyAlive(out[:0])
				if !c.write(c.s.opts.WriteTimeout) {
					return "alive write failed", false
				}
				continue
			}
		}
		c.out = out
		if n > 0 {
			if err != nil {
				// Deliver what was read; the error (if lasting) recurs on
				// the next call, after these messages are acknowledged.
				c.log.Debug("subscription read stopped early", "topic", st.topic, "who", st.who, "err", err)
			}
			if reason, ok := st.writeFrame(n); !ok {
				return reason, false
			}
		}
		if w != nil {
			// Written first, stopped second: the watcher's wake-up stays off
			// the delivery latency. Bytes it saw after a frame are the ack.
			werr := w.stop()
			w = nil
			switch {
			case werr == nil && n == 0:
				return "protocol violation: client sent data while no frame awaited an ack", false
			case werr == nil, errors.Is(werr, os.ErrDeadlineExceeded):
			case errors.Is(werr, io.EOF):
				return "client closed the connection", false
			default:
				return "connection failed: " + werr.Error(), false
			}
		}
		if n == 0 {
			return st.end(err)
		}
		if reason, ok := st.readAck(); !ok {
			return reason, false
		} else if reason != "" {
			return reason, true
		}
	}
}

// writeFrame fills in the header of the n messages in c.out and sends them
// in one write.
func (st *subStream) writeFrame(n int) (string, bool) {
	c := st.c
	area := c.out[protocol.RespHeaderSize:]
	if uint64(len(area)) > math.MaxUint32 {
		return "batch larger than a frame can carry", false
	}
	protocol.AppendSubFrameHeader(c.out[:0], uint8(n), uint32(len(area)))
	st.lastEvent = lastEventID(area, n)
	st.frames++
	st.messages += n
	if c.s.sampler.sample() {
		c.log.Info("subscription batch", "topic", st.topic, "who", st.who, "messages", n,
			"bytes", len(area), "lastEventId", st.lastEvent)
	}
	if !c.write(c.s.opts.WriteTimeout) {
		return "frame write failed", false
	}
	// Record bytes as published: each message less its fixed §2.4 fields.
	c.s.opts.Metrics.Delivered(st.topic, n, len(area)-n*protocol.SubMessageFixedSize)
	return "", true
}

// lastEventID returns the eventId of the last of the n messages in a frame's
// message area (the area was built by the backend, so it is well formed).
func lastEventID(area []byte, n int) int64 {
	off := 0
	for i := 1; i < n; i++ {
		off += protocol.SubMessageFixedSize + protocol.RecordPrefixSize +
			int(binary.LittleEndian.Uint32(area[off+protocol.SubMessageFixedSize:]))
	}
	return int64(binary.LittleEndian.Uint64(area[off+8:]))
}

// readAck waits for the 2-byte ack of the frame just sent. ok false closes
// the connection; a non-empty reason with ok true ends the subscription and
// keeps it.
func (st *subStream) readAck() (reason string, ok bool) {
	c := st.c
	if err := c.nc.SetReadDeadline(time.Now().Add(st.ackTimeout)); err != nil {
		return "set ack deadline: " + err.Error(), false
	}
	if _, err := io.ReadFull(c.br, c.ack[:]); err != nil {
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.s.opts.Metrics.Error(metrics.KindTimeout)
			return "ack timeout after " + st.ackTimeout.String(), false
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return "client closed the connection", false
		case errors.Is(err, net.ErrClosed):
			return "connection closed by shutdown", false
		default:
			return "read ack: " + err.Error(), false
		}
	}
	switch code := binary.LittleEndian.Uint16(c.ack[:]); code {
	case ackContinue:
		st.acked()
		return "", true
	case ackEnd:
		st.acked()
		return "ack 1 (end)", true
	default:
		return "invalid ack " + strconv.Itoa(int(code)), false
	}
}

// acked tells the subscription that the frame just sent was acknowledged.
func (st *subStream) acked() {
	if st.acker != nil {
		st.acker.Acked(st.lastEvent)
	}
}

// end answers a Next that ended the stream without messages.
func (st *subStream) end(err error) (string, bool) {
	c := st.c
	switch {
	case errors.Is(err, protocol.ErrTopicDeleted):
		c.out = protocol.AppendReplySubEnd(c.out[:0])
		if !c.write(c.s.opts.WriteTimeout) {
			return "topic deleted; 255 write failed", false
		}
		return "topic deleted", true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "server shutting down", false
	}
	if !protocol.IsBizError(err) {
		c.log.Warn("subscription read failed", "topic", st.topic, "who", st.who, "err", err)
	}
	c.out = protocol.AppendReplyError(c.out[:0], err.Error())
	if !c.write(c.s.opts.WriteTimeout) {
		return "error reply write failed", false
	}
	return "error: " + err.Error(), true
}

// watcher reads the socket while a stream waits for data, so that a
// subscriber's EOF (or a byte it should not have sent) ends the wait.
type watcher struct {
	c      *conn
	ctx    context.Context // cancelled when the watcher's read returns
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the read's result; nil means bytes arrived
}

// startWatcher begins a blocking read through the connection's buffered
// reader, so that nothing it reads is lost to the command loop.
func startWatcher(c *conn) (*watcher, error) {
	if err := c.nc.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	w := &watcher{c: c, done: make(chan struct{})}
	// Not derived from the server's context: that would register every
	// wait under one shared lock. Shutdown closes stream connections, which
	// ends the read and so the wait.
	w.ctx, w.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(w.done)
		_, w.err = c.br.Peek(1)
		w.cancel()
	}()
	return w, nil
}

// stop unblocks the watcher's read with a deadline in the past and waits
// for it to return (§10 item 7: no helper may read the socket after this).
// A deadline error means it was stopped with nothing seen.
func (w *watcher) stop() error {
	// An error here means the connection is closed, which ends the read too.
	_ = w.c.nc.SetReadDeadline(time.Now())
	<-w.done
	w.cancel()
	return w.err
}
