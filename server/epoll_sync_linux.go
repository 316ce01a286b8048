//go:build linux

package server

import (
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// Semi-synchronous replies on the epoll loop (issue 36). With
// replication.syncSlaves (or a cluster's in-sync rule) a publish is answered
// only once enough slaves confirmed it. A goroutine parks in
// SyncTracker.Wait for that; the loop cannot park, so it holds the reply
// and goes on serving other connections:
//
//   - held replies wait in one FIFO, in the order the loop committed them
//     (eventIds only grow from turn to turn), so releasing from the head
//     keeps every connection's replies in its request order;
//   - once a connection has a held reply, each later reply of it (an
//     error, or a publish already confirmed) is held behind it, for the
//     same reason;
//   - each turn releases from the head every reply whose outcome is known
//     (SyncTracker.Settle) or whose syncTimeoutMs passed (Expire: exactly
//     Wait's outcome, counters and log line); for the first one still
//     waiting the tracker wakes the loop when the confirmation comes
//     (WakeAt, through the loop's eventfd), and the loop's own wait ends
//     at its deadline;
//   - a connection with held replies is never handed back or closed: when
//     it must be (another command, a full socket, its peer's end of
//     stream, a failed read or write) it leaves the epoll set (parked) and
//     is handed back or closed once its last held reply is written or
//     dropped, so nothing it sent later is served before it, and a client
//     that half-closes after its requests still gets every reply;
//   - a connection with maxHeldReplies held replies is not read until
//     half of them went (throttle): a goroutine answers one request at a
//     time, so a client pipelining faster than the slaves confirm meets
//     TCP back-pressure there; here it meets it a bounded number of
//     replies later, and the loop's memory stays bounded;
//   - Shutdown releases every held reply (waiting for the confirmations up
//     to their deadlines) before the connections go back to goroutines.
//
// The writer is never held up: it committed the group before any of this.

// maxHeldReplies bounds the held replies of one connection (throttle).
// 1024 keeps a pipelining client's window far above what one round trip to
// a slave confirms at full speed on the benchmark machine (a few hundred
// writes per connection at 64 connections), and its memory (about 100
// bytes each) small.
const maxHeldReplies = 1024

// epHeld is a held reply.
type epHeld struct {
	c        *conn
	start    time.Time // when the request was read, for its metric
	eventID  int64     // 0: no confirmation to wait for (err, or held for order)
	err      error     // the publish's own refusal
	deadline time.Time // syncTimeoutMs after the commit
	logged   bool      // err was logged when it was held
	attrs    []any     // the request's log attributes when it was sampled
}

// holdOrAnswer queues p's reply on its connection, or holds it; err is the
// publish's outcome, now the time the batch committed.
func (e *epollLoop) holdOrAnswer(p *epPub, err error, now time.Time) {
	ep := p.c.ep
	if e.sync == nil || (ep.held == 0 && (err != nil || p.eventID <= 0)) {
		e.answer(p, err)
		return
	}
	if ep.held == 0 {
		done, serr := e.sync.Settle(p.eventID)
		if done {
			e.answer(p, serr)
			return
		}
	}
	h := epHeld{c: p.c, start: p.start, err: err, deadline: now.Add(e.sync.Timeout())}
	if err != nil {
		e.logRefusal(p, err)
		h.logged = true
	} else {
		h.eventID = p.eventID
		if e.s.sampler.sample() {
			h.attrs = e.attrs(p, "")
		}
	}
	p.held = true
	ep.held++
	e.sync.Holding(1)
	e.held = append(e.held, h)
}

// answer queues the reply of p with outcome err on its connection.
func (e *epollLoop) answer(p *epPub, err error) {
	ep := p.c.ep
	if err != nil {
		ep.out = protocol.AppendReplyError(ep.out, err.Error())
		e.logRefusal(p, err)
	} else {
		ep.out = protocol.AppendReplyOK(ep.out)
		if e.s.sampler.sample() {
			p.c.log.Info("request served", append(e.attrs(p, ""), "eventId", p.eventID)...)
		}
	}
	p.observeOK = err == nil
}

func (e *epollLoop) logRefusal(p *epPub, err error) {
	if !protocol.IsBizError(err) {
		p.c.log.Warn("request failed", e.attrs(p, err.Error())...)
		return
	}
	e.s.opts.Metrics.Error(metrics.KindBusiness)
	if e.s.sampler.sample() {
		p.c.log.Info("request refused", e.attrs(p, err.Error())...)
	}
}

// release queues the replies of the held FIFO's head whose outcome is
// known at now, and arms the tracker's wake-up for the first one that is
// not.
func (e *epollLoop) release(now time.Time) {
	for e.hhead < len(e.held) {
		h := &e.held[e.hhead]
		err := h.err
		if err == nil && h.eventID > 0 {
			done, serr := e.sync.Settle(h.eventID)
			if !done {
				if now.Before(h.deadline) {
					if e.sync.WakeAt(h.eventID) {
						continue // confirmed since Settle: look again
					}
					break
				}
				serr = e.sync.Expire(h.eventID)
			}
			err = serr
		}
		e.emit(h, err)
		e.held[e.hhead] = epHeld{}
		e.hhead++
	}
	switch {
	case e.hhead == len(e.held):
		e.held, e.hhead = e.held[:0], 0
	case e.hhead >= 1024 && 2*e.hhead >= len(e.held):
		n := copy(e.held, e.held[e.hhead:])
		clear(e.held[n:])
		e.held, e.hhead = e.held[:n], 0
	}
}

// emit queues a released reply on its connection.
func (e *epollLoop) emit(h *epHeld, err error) {
	c := h.c
	ep := e.mark(c)
	ep.held--
	e.sync.Holding(-1)
	if err != nil {
		ep.out = protocol.AppendReplyError(ep.out, err.Error())
		if !h.logged {
			// Settle's and Expire's refusals are business errors (not
			// confirmed, fenced).
			e.s.opts.Metrics.Error(metrics.KindBusiness)
			if h.attrs != nil || e.s.sampler.sample() {
				c.log.Info("request refused", e.heldAttrs(h, err.Error())...)
			}
		}
	} else {
		ep.out = protocol.AppendReplyOK(ep.out)
		if h.attrs != nil {
			c.log.Info("request served", e.heldAttrs(h, "")...)
		}
	}
	e.s.opts.Metrics.ObserveRequest(protocol.CmdPub, time.Since(h.start), err == nil)
	if ep.dead || ep.back || ep.eof {
		return
	}
	if err == nil {
		e.answeredHeld++
	}
	if ep.throttled && ep.held <= maxHeldReplies/2 {
		e.unthrottle(c)
	}
}

// throttle parks a connection that has maxHeldReplies held replies: it is
// not read until half of them went (emit).
func (e *epollLoop) throttle(c *conn) {
	if c.ep.parked {
		return
	}
	e.park(c)
	c.ep.throttled = true
	e.throttles.Add(1)
}

// unthrottle puts a throttled connection back in the epoll set; what it
// sent meanwhile is read at the next wait (the set is level-triggered).
func (e *epollLoop) unthrottle(c *conn) {
	ep := c.ep
	ep.parked, ep.throttled = false, false
	if err := e.epollAdd(c); err != nil {
		c.log.Warn("closing connection: epoll loop cannot read it again", "err", err)
		ep.dead = true // closed by reply once its held replies went
		ep.parked = true
	}
}

func (e *epollLoop) heldAttrs(h *epHeld, errText string) []any {
	a := h.attrs
	if a == nil {
		a = []any{"cmd", protocol.CmdPub.String()}
	}
	a = append(a, "eventId", h.eventID, "waited", time.Since(h.start))
	if errText != "" {
		a = append(a, "err", errText)
	}
	return a
}

// heldDeadline is the deadline of the held FIFO's head; ok false when
// nothing is held.
func (e *epollLoop) heldDeadline() (time.Time, bool) {
	if e.hhead == len(e.held) {
		return time.Time{}, false
	}
	return e.held[e.hhead].deadline, true
}

// park takes a connection with held replies out of the epoll set until they
// are written: it is not read meanwhile (reply hands it back or closes it
// once the last one went).
func (e *epollLoop) park(c *conn) {
	if !c.ep.parked {
		e.epollDel(c)
		c.ep.parked = true
	}
}

// drainHeld releases every held reply at Shutdown: the connections stop
// being read, and the loop waits for the confirmations (woken by the
// tracker) up to each reply's deadline, writing the replies as they come.
func (e *epollLoop) drainHeld() {
	if _, ok := e.heldDeadline(); !ok {
		return
	}
	for _, c := range e.conns {
		e.park(c)
	}
	for {
		e.release(time.Now())
		e.reply()
		d, ok := e.heldDeadline()
		if !ok {
			return
		}
		// Only the eventfd is left in the set: the tracker's wake-up, or
		// the deadline, ends the wait.
		if _, err := e.waitUntil(d); err != nil {
			panic(err.Error()) // as run
		}
		e.takePending()
	}
}

// dropHeld forgets every held reply (the loop's state is in doubt after a
// panic, and its connections are being closed).
func (e *epollLoop) dropHeld() {
	if n := len(e.held) - e.hhead; n > 0 {
		e.sync.Holding(-n)
	}
	clear(e.held)
	e.held, e.hhead = e.held[:0], 0
}
