package server

// Inline delivery: the goroutine that commits a group writes the frame to
// an idle, caught-up subscriber itself (issue 24; worker.inlineDeliveries;
// docs/benchmarks-history.md "Issue 24: the low-rate path").
//
// At a low rate every message used to start from idle threads twice: the
// netpoll wake of the publisher's goroutine (which runs the writer group,
// broker/lead.go), then, when the group committed, a wake of this stream's
// goroutine waiting in Next, on another thread, to write the frame. Now,
// once the watcher reads the socket (subwatch.go), the stream goroutine
// parks the stream instead of waiting in Next, and the broker calls the
// stream's commit hook on the committing goroutine right after each commit
// of the topic (broker/subinline.go). The hook claims the parked stream,
// polls Next, writes the frame with one non-blocking write and parks the
// stream again: a message then costs the publisher's wake-up and the
// watcher's (the ack), and no hand-off.
//
// The stream goroutine takes the stream back, and the hook hands it back
// with what it got (a wake-up, as before inline delivery), whenever the
// hook cannot finish on its own:
//
//   - the frame would block (the subscriber stopped reading, or the frame
//     is larger than the socket buffer takes): the hook hands back how much
//     it wrote, and the stream goroutine writes the rest with the write
//     timeout, as any frame; so a slow subscriber never blocks a publisher,
//     and backpressure stays per subscriber;
//   - the previous frame still awaits its ack (the subscriber is not caught
//     up): the hook hands back the frame it prepared, and the stream
//     goroutine hands it to the watcher as before;
//   - Next ended the stream (an error, a deleted topic), or a panic;
//   - the commit is beyond the broker's inline budget (at most
//     worker.inlineDeliveries subscribers are served per commit).
//
// And the stream goroutine wakes on its own for the alive interval (armed
// once per interval, not per message: it is pushed back by the frames the
// hook writes), the topic's deletion and the end of the stream (ctx).
//
// Who holds the stream (c.out, the counters, the write side): w.owner,
// under w.mu. ownStream: the stream goroutine (or the watcher it handed
// the stream to, subwatch.go). ownParked: nobody; the stream goroutine
// sleeps and a hook may claim it. ownInline: a hook, on a committing
// goroutine. Only the stream goroutine parks; a hook only claims a parked
// stream, and either parks it again or hands it back (ownStream, with a
// kick). A stream goroutine that wants the stream while a hook holds it
// sets giveBack and waits for that kick. Frames keep their order because
// one holder at a time writes, and every frame is marked as awaiting its
// ack before any byte of it is written, as before.
//
// No commit is missed: a stream is parked only after a poll found nothing,
// and the hooks of a commit run after it closed the Changed channel taken
// before that poll; whoever parks (the stream goroutine or a hook) checks
// that channel after parking and polls again if it closed.

import (
	"errors"
	"net"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// parker is implemented by a Subscription whose commits can be delivered
// on the committing goroutine (*broker.Subscription).
type parker interface {
	// SetCommitHook registers fn, called after every commit of the topic;
	// false means inline delivery is off.
	SetCommitHook(fn func(inline bool) bool) bool
	// Changed returns the channel the topic's next commit closes.
	Changed() <-chan struct{}
	// Deleted is closed when the topic is deleted.
	Deleted() <-chan struct{}
	// Rest closes the subscription's file while it is idle.
	Rest()
}

// Holders of a stream (watch.owner).
const (
	ownStream uint32 = iota
	ownParked
	ownInline
)

// inlineResult is what the stream goroutine serves next (next): what Next
// returned (n messages prepared in c.out, the last one's eventId last, or
// err), with written >= 0 when a commit hook already marked that frame as
// awaiting its ack and wrote its first written bytes, or fail when the
// stream must end with the connection closed.
type inlineResult struct {
	set     bool // a hook handed this back (takeBack)
	n       int
	last    int64
	err     error
	written int
	fail    *outcome
}

// inlineState is a stream's inline delivery state, used by the stream
// goroutine and by the hook while it holds the stream.
type inlineState struct {
	p       parker          // nil: inline delivery is off for this stream
	raw     syscall.RawConn // the socket, for non-blocking writes
	kick    chan struct{}   // a hook handed the stream back
	alive   *time.Timer
	armed   bool // alive is set and has not fired yet
	deleted <-chan struct{}

	// The non-blocking write (tryWrite); rawWrite is bound once so that
	// a write allocates nothing.
	rawWrite func(fd uintptr)
	wn       int
	werr     error
}

// startInline turns inline delivery on for the stream when the
// subscription and the connection allow it: a plain socket (a TLS stream
// keeps waiting in Next) and a backend that has it on.
func (st *subStream) startInline() {
	p, ok := st.sub.(parker)
	if !ok || !inlineSupported {
		return
	}
	// Only a plain socket: a wrapper (TLS, or anything that counts or
	// transforms what is written) must see every byte.
	var sc syscall.Conn
	switch nc := st.c.nc.(type) {
	case *net.TCPConn:
		sc = nc
	case *net.UnixConn:
		sc = nc
	default:
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	in := &st.in
	in.raw, in.kick, in.deleted = raw, make(chan struct{}, 1), p.Deleted()
	in.rawWrite = st.rawWrite
	st.w.mu.Lock()
	st.w.lastOut = int64(time.Since(st.w.base))
	st.w.mu.Unlock()
	if !p.SetCommitHook(st.onCommit) {
		return
	}
	in.p = p
}

// stopInline releases the alive timer once the stream ends.
func (st *subStream) stopInline() {
	if st.in.alive != nil {
		st.in.alive.Stop()
	}
}

// next returns what the stream goroutine serves next (serveIdle): from
// Next, waiting, as before; or, with inline delivery, what a hook handed
// back, or n 0 and no error once the alive interval passed.
func (st *subStream) next() inlineResult {
	if st.in.p == nil {
		c := st.c
		out, n, err := st.sub.Next(st.w.ctx, frameStart(c.out), st.batch, c.s.opts.AliveInterval)
		c.out = out
		return st.result(n, err)
	}
	for {
		changed := st.in.p.Changed()
		r, ok := st.poll()
		if ok {
			return r
		}
		w := &st.w
		w.mu.Lock()
		w.owner.Store(ownParked)
		w.mu.Unlock()
		select {
		case <-changed:
			// A commit between the poll and the park, whose hooks may
			// have found the stream not parked yet.
			if st.reclaim(false) {
				continue
			}
			// A hook claimed it: it parks it again or hands it back.
		default:
		}
		if r, ok := st.parked(); ok {
			return r
		}
	}
}

// poll polls Next into c.out; ok false means there was nothing.
func (st *subStream) poll() (inlineResult, bool) {
	c := st.c
	out, n, err := st.sub.Next(st.w.ctx, frameStart(c.out), st.batch, 0)
	c.out = out
	if n == 0 && err == nil {
		return inlineResult{}, false
	}
	return st.result(n, err), true
}

// result prepares the frame of the n messages Next put in c.out.
func (st *subStream) result(n int, err error) inlineResult {
	r := inlineResult{n: n, err: err, written: -1}
	if n > 0 {
		last, o, ok := st.prepareFrame(n, err)
		if !ok {
			r.fail = &o
			return r
		}
		r.last = last
	}
	return r
}

// parked waits, on the stream goroutine, while the stream is parked or a
// hook holds it. ok false: the stream is the caller's again, nothing in
// hand; poll again.
func (st *subStream) parked() (r inlineResult, ok bool) {
	in, w := &st.in, &st.w
	alive := st.c.s.opts.AliveInterval
	for {
		if !in.armed {
			w.mu.Lock()
			wait := alive - (time.Since(w.base) - time.Duration(w.lastOut))
			w.mu.Unlock()
			wait = max(wait, 0)
			if in.alive == nil {
				in.alive = time.NewTimer(wait)
			} else {
				in.alive.Reset(wait)
			}
			in.armed = true
		}
		select {
		case <-in.kick:
			return st.takeBack()
		case <-in.alive.C:
			in.armed = false
			w.mu.Lock()
			now := time.Since(w.base)
			if now-time.Duration(w.lastOut) < alive {
				// Frames went out meanwhile: the interval runs from the
				// last one.
				w.mu.Unlock()
				continue
			}
			w.mu.Unlock()
			if !st.reclaim(true) {
				// If the hook sends no frame, the next park finds the
				// alive due at once.
				return st.awaitBack()
			}
			// Whether the alive goes out or is skipped (a frame awaits
			// its ack), the next one is an interval away.
			w.mu.Lock()
			w.lastOut = int64(time.Since(w.base))
			w.mu.Unlock()
			in.p.Rest() // hold no descriptor while idle, as Next does
			return inlineResult{written: -1}, true
		case <-in.deleted:
			if !st.reclaim(true) {
				return st.awaitBack()
			}
			return inlineResult{}, false // the poll reports the deletion
		case <-w.ctx.Done():
			if !st.reclaim(true) {
				return st.awaitBack()
			}
			return inlineResult{err: w.ctx.Err(), written: -1}, true
		}
	}
}

// reclaim takes a parked stream back for the stream goroutine; false
// means a hook holds it. With want, that hook then hands it back as soon
// as it can (giveBack); without, it may park it again.
func (st *subStream) reclaim(want bool) bool {
	w := &st.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.owner.Load() == ownParked {
		w.owner.Store(ownStream)
		return true
	}
	w.giveBack = want
	return false
}

// awaitBack waits for the hook that holds the stream to hand it back.
func (st *subStream) awaitBack() (inlineResult, bool) {
	<-st.in.kick
	return st.takeBack()
}

// takeBack returns what the hook handed back with the stream.
func (st *subStream) takeBack() (inlineResult, bool) {
	w := &st.w
	w.mu.Lock()
	r := w.ret
	w.ret = inlineResult{}
	w.mu.Unlock()
	return r, r.set
}

// onCommit is the stream's commit hook (broker/subinline.go), called on a
// committing goroutine. It claims a parked stream and serves it (inline)
// or hands it to the stream goroutine; it reports whether it served.
func (st *subStream) onCommit(inline bool) bool {
	w := &st.w
	if w.owner.Load() != ownParked {
		// Not parked (busy, or ended): every commit of the topic calls
		// the hook, so skip the lock.
		return false
	}
	w.mu.Lock()
	if w.owner.Load() != ownParked {
		w.mu.Unlock()
		return false
	}
	w.owner.Store(ownInline)
	w.mu.Unlock()
	if !inline {
		st.handBack(inlineResult{})
		return false
	}
	defer func() {
		// This runs on a publisher's goroutine: a panic here must end this
		// stream, not that connection or the server.
		if r := recover(); r != nil {
			c := st.c
			c.s.opts.Metrics.Error(metrics.KindPanic)
			c.log.Error("panic in a subscription's inline delivery; closing the connection", "panic", r,
				"topic", st.topic, "who", st.who, "stack", string(debug.Stack()))
			st.handBack(inlineResult{fail: &outcome{reason: "panic in the subscription's inline delivery"}, written: -1})
		}
	}()
	st.serveInline()
	return true
}

// serveInline serves the claimed stream on the committing goroutine while
// its frames go out whole and at once, then parks it again or hands it
// back.
func (st *subStream) serveInline() {
	c, w := st.c, &st.w
	for {
		changed := st.in.p.Changed()
		r, ok := st.poll()
		if !ok {
			if st.repark(changed) {
				return
			}
			continue
		}
		if r.fail != nil || r.n == 0 {
			st.handBack(r)
			return
		}
		w.mu.Lock()
		if w.end != nil || w.due != dueNone || w.giveBack {
			// The watcher ended the stream, or the last frame awaits its
			// ack (the stream goroutine hands this one to the watcher),
			// or the stream goroutine asked for the stream.
			w.mu.Unlock()
			st.handBack(r)
			return
		}
		w.due, w.ackEvent = dueWriting, r.last
		w.mu.Unlock()
		st.countFrame(r.n, r.last)
		area := len(c.out) - protocol.RespHeaderSize
		if k, err := st.tryWrite(); err != nil || k < len(c.out) {
			// Would block, or failed: the stream goroutine writes the rest
			// with the write timeout (and reports a failure).
			r.written = k
			c.s.inlinePartial.Add(1)
			st.handBack(r)
			return
		}
		if cap(c.out) > 1<<20 {
			c.out = nil // as write does: do not pin a large frame's buffer
		}
		st.frameOut(r.n, area)
		c.s.inlineFrames.Add(1)
	}
}

// repark parks the stream the hook holds again, after a poll that found
// nothing; false means a commit came meanwhile and the hook holds the
// stream again, to poll.
func (st *subStream) repark(changed <-chan struct{}) bool {
	w := &st.w
	w.mu.Lock()
	if w.giveBack {
		w.mu.Unlock()
		st.handBack(inlineResult{})
		return true
	}
	w.owner.Store(ownParked)
	w.mu.Unlock()
	select {
	case <-changed:
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.owner.Load() == ownParked {
			w.owner.Store(ownInline)
			return false
		}
		return true // someone else holds it now
	default:
		return true
	}
}

// handBack gives the stream the hook holds to the stream goroutine, with
// r, and wakes it.
func (st *subStream) handBack(r inlineResult) {
	w := &st.w
	w.mu.Lock()
	if w.owner.Load() != ownInline {
		w.mu.Unlock()
		return // already handed back (a panic after handBack)
	}
	r.set = r.n > 0 || r.err != nil || r.fail != nil
	w.owner.Store(ownStream)
	w.giveBack, w.ret = false, r
	w.mu.Unlock()
	// One kick per hand-back, taken before the stream can be parked and
	// claimed again: the slot is always free.
	st.in.kick <- struct{}{}
}

// errNoProgress: a non-blocking write that took nothing and said nothing.
var errNoProgress = errors.New("socket write made no progress")

// tryWrite writes c.out to the socket without blocking (the socket is
// non-blocking; Control does not wait for it to be writable, and ignores
// the write deadline) and returns how much went out: all of it, or less
// when it would block or failed (err).
func (st *subStream) tryWrite() (int, error) {
	in := &st.in
	in.wn, in.werr = 0, nil
	if err := in.raw.Control(in.rawWrite); err != nil {
		return 0, err
	}
	return in.wn, in.werr
}
