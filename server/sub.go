package server

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// errShuttingDown is the refusal of a subscription that arrives while the
// server shuts down.
const errShuttingDown = "server shutting down"

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

// subStream is one subscription being served on a connection. Once its
// watcher runs, c.out and the counters below belong to whichever of the two
// goroutines holds the stream (subwatch.go).
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

	w  watch       // subwatch.go
	in inlineState // subinline.go
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
		// A subscription drained by Shutdown: a clear refusal, not EOF.
		c.out = protocol.AppendReplyError(c.out[:0], errShuttingDown)
		c.write(c.s.opts.WriteTimeout)
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
	if c.req.EventID == protocol.SubResumeEventID && c.s.opts.Cursors != nil {
		return c.s.opts.Cursors.SubscribeResume(c.req.Topic, c.req.Who, c.req.Header.ResumeDefault())
	}
	return c.s.opts.Backend.Subscribe(c.req.Topic, c.req.Who, c.req.EventID)
}

// outcome is where a stretch of a stream left it: idle (a poll found nothing
// and no ack is pending) or ended, with why and whether the connection
// stays in the command loop.
type outcome struct {
	idle   bool
	reason string
	keep   bool
}

var ackEndOutcome = outcome{reason: "ack 1 (end)", keep: true}

// run streams until the subscription ends and says why; keep reports
// whether the connection stays in the command loop. When run returns, no
// goroutine is reading the socket.
//
// While every poll finds data this goroutine alone serves the stream: frame,
// ack, frame. The first time a poll finds nothing it starts the stream's
// watcher, which from then on does every read of the socket (subwatch.go).
func (st *subStream) run() (reason string, keep bool) {
	// Ack reads use absolute deadlines, set on the socket directly
	// (subwatch.go); the command loop re-arms its own afterwards.
	st.c.dr.timeout = 0
	st.w.init()
	defer st.w.cancel()
	defer st.stopInline()
	o := st.deliver()
	if o.idle {
		go st.watch()
		st.startInline()
		o = st.serveIdle()
	}
	return o.reason, o.keep
}

// deliver serves the stream while polls find data: frame, ack, frame, ...
// Its caller holds the stream and reads the socket: the stream goroutine
// before the watcher starts, the watcher when the stream was handed to it.
// It returns idle when a poll finds nothing (no ack is pending then).
func (st *subStream) deliver() outcome {
	c := st.c
	for {
		out, n, err := st.sub.Next(st.w.ctx, frameStart(c.out), st.batch, 0)
		c.out = out
		if n == 0 {
			if err == nil {
				return outcome{idle: true}
			}
			return st.end(err)
		}
		last, o, ok := st.prepareFrame(n, err)
		if !ok {
			return o
		}
		if o, ok := st.frameAndAck(n, last); !ok {
			return o
		}
	}
}

// frameAndAck sends the frame prepared in c.out and reads its ack; ok false
// ends the stream (o says why). The caller holds the stream and reads the
// socket.
func (st *subStream) frameAndAck(n int, last int64) (o outcome, ok bool) {
	st.awaitAck(last)
	if o, ok := st.sendFrame(n, last); !ok {
		return o, false
	}
	code, err := st.readAck()
	if err != nil {
		return st.readFailed(err), false
	}
	if ended, _, _ := st.acked(code); ended {
		return ackEndOutcome, false
	}
	return outcome{}, true
}

// serveIdle runs on the connection's goroutine once the watcher reads the
// socket. It waits in Next (sending alives) and writes the frame that ends
// the wait, then waits in Next again at once: the watcher reads the ack on
// its own. If data (or an error) comes while a frame still awaits its ack,
// it hands the stream to the watcher with that result and waits; the
// watcher sends it after the ack and delivers on while polls find data,
// then hands the stream back. Every return leaves the watcher stopped.
func (st *subStream) serveIdle() outcome {
	c, w := st.c, &st.w
	for {
		r := st.next()
		if r.fail != nil {
			return st.closeWatcher(*r.fail)
		}
		if r.written >= 0 {
			// A commit hook marked the frame in c.out as awaiting its ack
			// and wrote only part of it (subinline.go): finish it.
			w.mu.Lock()
			end := w.end
			w.mu.Unlock()
			if end != nil {
				<-w.done
				return *end
			}
			if o, ok := st.sendRest(r.n, r.written); !ok {
				return st.closeWatcher(o)
			}
			continue
		}
		out, n, last, err := c.out, r.n, r.last, r.err
		w.mu.Lock()
		if w.end != nil {
			// The watcher ended the stream (ack 1, the client went away,
			// an ack failure); it cancelled the wait and reads no more.
			o := *w.end
			w.mu.Unlock()
			<-w.done
			return o
		}
		if w.due != dueNone {
			// The last frame is not acknowledged yet.
			if n == 0 && err == nil {
				w.mu.Unlock() // no alive is due while a frame awaits its ack
				continue
			}
			w.handed, w.held = true, heldResult{n: n, last: last, err: err}
			w.mu.Unlock()
			select {
			case <-w.handoff:
				continue
			case <-w.ctx.Done():
				<-w.done
				return st.watcherEnd()
			}
		}
		switch {
		case n > 0:
			w.due, w.ackEvent = dueWriting, last
			w.mu.Unlock()
			if o, ok := st.sendFrame(n, last); !ok {
				return st.closeWatcher(o)
			}
		case err == nil:
			w.mu.Unlock()
			c.out = protocol.AppendReplyAlive(out[:0])
			if !c.write(c.s.opts.WriteTimeout) {
				return st.closeWatcher(outcome{reason: "alive write failed"})
			}
		default:
			w.mu.Unlock()
			// The watcher must stop before a 255 or 400 is sent, so that
			// the command loop reads what follows; if it saw the client go
			// away (or talk out of turn) first, that closes the connection.
			if o, ended := st.haltWatcher(); ended {
				return o
			}
			return st.end(err)
		}
	}
}

// frameStart returns buf emptied but for room for a frame header.
func frameStart(buf []byte) []byte {
	return append(buf[:0], make([]byte, protocol.RespHeaderSize)...)
}

// prepareFrame fills in the header of the n messages in c.out and returns
// the last one's eventId; readErr is an error Next returned with them. ok
// false ends the stream (o says why).
func (st *subStream) prepareFrame(n int, readErr error) (last int64, o outcome, ok bool) {
	c := st.c
	if readErr != nil {
		// Deliver what was read; the error (if lasting) recurs on the next
		// call, after these messages are acknowledged.
		c.log.Debug("subscription read stopped early", "topic", st.topic, "who", st.who, "err", readErr)
	}
	area := c.out[protocol.RespHeaderSize:]
	if uint64(len(area)) > math.MaxUint32 {
		return 0, outcome{reason: "batch larger than a frame can carry"}, false
	}
	protocol.AppendSubFrameHeader(c.out[:0], uint8(n), uint32(len(area)))
	return lastEventID(area, n), outcome{}, true
}

// sendFrame writes the frame prepared in c.out; ok false ends the stream.
// The frame must already be marked as awaiting its ack (awaitAck), since
// the ack may arrive before the write returns.
func (st *subStream) sendFrame(n int, last int64) (o outcome, ok bool) {
	st.countFrame(n, last)
	return st.sendRest(n, 0)
}

// countFrame counts the frame of n messages prepared in c.out as sent.
func (st *subStream) countFrame(n int, last int64) {
	c := st.c
	st.lastEvent = last
	st.frames++
	st.messages += n
	if c.s.sampler.sample() {
		c.log.Info("subscription batch", "topic", st.topic, "who", st.who, "messages", n,
			"bytes", len(c.out)-protocol.RespHeaderSize, "lastEventId", last)
	}
}

// sendRest writes the frame of n messages in c.out from byte off on (a
// commit hook may have written the first off bytes), then starts its ack
// timeout; ok false ends the stream.
func (st *subStream) sendRest(n, off int) (o outcome, ok bool) {
	c := st.c
	area := len(c.out) - protocol.RespHeaderSize
	if !c.writeFrom(off, c.s.opts.WriteTimeout) {
		return outcome{reason: "frame write failed"}, false
	}
	st.frameOut(n, area)
	return outcome{}, true
}

// frameOut starts the ack timeout of the frame of n messages (area bytes)
// just written and records its delivery.
func (st *subStream) frameOut(n, area int) {
	st.ackTimerStart()
	// Record bytes as published: each message less its fixed §2.4 fields.
	st.c.s.opts.Metrics.Delivered(st.topic, n, area-n*protocol.SubMessageFixedSize)
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

// end answers a Next that ended the stream without messages.
func (st *subStream) end(err error) outcome {
	c := st.c
	switch {
	case errors.Is(err, protocol.ErrTopicDeleted):
		c.out = protocol.AppendReplySubEnd(c.out[:0])
		if !c.write(c.s.opts.WriteTimeout) {
			return outcome{reason: "topic deleted; 255 write failed"}
		}
		return outcome{reason: "topic deleted", keep: true}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcome{reason: errShuttingDown}
	}
	if !protocol.IsBizError(err) {
		c.log.Warn("subscription read failed", "topic", st.topic, "who", st.who, "err", err)
	}
	c.out = protocol.AppendReplyError(c.out[:0], err.Error())
	if !c.write(c.s.opts.WriteTimeout) {
		return outcome{reason: "error reply write failed"}
	}
	return outcome{reason: "error: " + err.Error(), keep: true}
}

// readFailed says how a failed ack read (or watch) ends the stream; each
// closes the connection.
func (st *subStream) readFailed(err error) outcome {
	var bad *invalidAckError
	switch {
	case errors.Is(err, errAckTimeout):
		st.c.s.opts.Metrics.Error(metrics.KindTimeout)
		return outcome{reason: "ack timeout after " + st.ackTimeout.String()}
	case errors.Is(err, errOutOfTurn), errors.As(err, &bad):
		return outcome{reason: err.Error()}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return outcome{reason: "client closed the connection"}
	case errors.Is(err, net.ErrClosed):
		return outcome{reason: "connection closed by shutdown"}
	default:
		return outcome{reason: "read ack: " + err.Error()}
	}
}
