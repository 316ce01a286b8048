package server

// The watcher: who reads a subscriber's socket, and why it costs few
// wake-ups.
//
// A caught-up subscriber sends nothing until the next frame, yet its EOF
// must end the subscription at once (its who slot is freed), so a goroutine
// must be blocked reading the socket while the stream waits for data. Every
// goroutine hand-off, started goroutine and re-armed timer costs a thread
// wake-up, and on small or virtualised machines those dominate the server's
// CPU per message. So:
//
//   - Until a poll first finds nothing to send, the connection's goroutine
//     (the stream goroutine) writes frames and reads their acks itself: one
//     wake-up per frame, the ack's.
//   - Then it starts the stream's watcher, one goroutine that does every
//     read of the socket until the stream ends. The stream goroutine waits
//     in Next, writes the frame that ends the wait and goes straight back to
//     waiting in Next; the watcher reads the ack and just records it. A
//     message at a low rate thus costs two wake-ups (the stream goroutine on
//     the publish, the watcher on the ack), with no hand-off between them.
//   - If Next returns data (or an error) while a frame still awaits its ack,
//     the stream is busy: the stream goroutine hands the stream, with that
//     result, to the watcher and waits. The watcher sends the result once
//     the ack is in, then serves frame, ack, frame on its own, as the stream
//     goroutine did at the start (one wake-up per frame), until a poll finds
//     nothing; then it hands the stream back. There is no mode to switch or
//     heuristic to tune: hand-offs happen only when the stream turns from
//     idle to busy and back, and each costs one wake-up.
//
// Holding the stream. c.out, the counters and the write side belong to one
// goroutine at a time: the stream goroutine, except from the moment it
// hands the stream over (handed, under mu) until the watcher hands it back
// on handoff. The watcher, when it reads an ack the stream goroutine did
// not hand over, only records it (mu). A client that sends "acks" before it
// has the whole frame can therefore not make the two goroutines touch the
// stream at once; its bytes are taken as the ack, or rejected.
//
// A frame is marked as awaiting its ack before it is written (the ack may
// be read before the write returns); its ack timeout runs from the end of
// the write, as before a watcher existed. No alive is sent while a frame
// awaits its ack. Ack deadlines are lazy, not re-armed per frame: due (when
// the pending ack must have arrived) is kept in memory, the socket's read
// deadline is armed only when none is set, and when it fires early the
// reader moves it on to the pending ack's due time, or clears it. The
// deadline therefore moves at most about once per ack timeout however many
// frames pass.
//
// docs/protocol.md §10 item 7: the watcher never reads more than a 2-byte ack (it peeks,
// and discards only a complete ack), stops reading after ack 1 or any error,
// and run returns only after it has exited; so after ack 1, a 255 or a 400
// the command loop reads the next request intact, even one pipelined behind
// the ack.

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/metrics"
)

var (
	// errOutOfTurn: bytes arrived while no frame awaited an ack.
	errOutOfTurn = errors.New("protocol violation: client sent data while no frame awaited an ack")
	// errAckTimeout: the pending ack did not arrive within the ack timeout.
	errAckTimeout = errors.New("ack timeout")
	// errStopped: the stream goroutine stopped the watcher.
	errStopped = errors.New("watcher stopped")
)

// invalidAckError is an ack code other than 0 and 1.
type invalidAckError struct{ code uint16 }

func (e *invalidAckError) Error() string { return "invalid ack " + strconv.Itoa(int(e.code)) }

// Values of watch.due besides a due time.
const (
	dueNone    = 0  // no frame awaits an ack
	dueWriting = -1 // a frame is being written; its due time is set once it is out
)

// aLongTimeAgo is a read deadline that ends a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// heldResult is a Next result the stream goroutine got while a frame
// awaited its ack: n messages prepared in c.out (the last one's eventId is
// last), or, with n 0, the error that ends the stream.
type heldResult struct {
	n    int
	last int64
	err  error
}

// watch is a stream's watcher state (see the top of this file).
type watch struct {
	// ctx is the stream's: the watcher cancels it when it ends the stream,
	// to end a wait in Next or for the stream to come back. Not derived
	// from the server's context, which would register every stream under
	// one shared lock: Shutdown closes stream connections, which ends the
	// watcher's read and so the wait.
	ctx    context.Context
	cancel context.CancelFunc
	base   time.Time // origin of due, for monotonic deadlines

	mu       sync.Mutex
	due      int64 // dueNone, dueWriting, or time since base by which the pending ack must arrive
	ackEvent int64 // last eventId of the frame awaiting its ack
	armed    bool  // a read deadline is set, no later than due when an ack is pending
	stopping bool  // haltWatcher asked the watcher to exit
	handed   bool  // the stream goroutine handed the stream over, with held
	held     heldResult
	end      *outcome // how the watcher ended the stream; set before ctx is cancelled

	handoff chan struct{} // the watcher hands the stream back, idle
	done    chan struct{} // closed when the watcher has exited

	// Inline delivery (subinline.go).
	owner    atomic.Uint32 // ownStream, ownParked or ownInline; written under mu
	giveBack bool          // the stream goroutine waits for a commit hook to hand the stream back
	ret      inlineResult  // what the hook handed back
	lastOut  int64         // time since base when the last frame (or alive) went out
}

func (w *watch) init() {
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.base = time.Now()
	// One slot (there is one hand-back per hand-over), so that the watcher
	// goes back to reading without waiting for the stream goroutine.
	w.handoff = make(chan struct{}, 1)
	w.done = make(chan struct{})
}

// watch is the watcher goroutine: it reads acks (and notices a client that
// goes away or talks out of turn) until the stream ends.
func (st *subStream) watch() {
	w := &st.w
	defer close(w.done)
	defer func() {
		// The watcher serves the stream too (Next, frames, acks): a panic
		// must not take the server down, as on the connection's goroutine.
		if r := recover(); r != nil {
			c := st.c
			c.s.opts.Metrics.Error(metrics.KindPanic)
			c.log.Error("panic in a subscription's watcher; closing the connection", "panic", r,
				"topic", st.topic, "who", st.who, "stack", string(debug.Stack()))
			st.finish(outcome{reason: "panic in the subscription's watcher"})
		}
	}()
	for {
		code, err := st.readAck()
		if err != nil {
			if !errors.Is(err, errStopped) {
				st.finish(st.readFailed(err))
			}
			return
		}
		ended, took, h := st.acked(code)
		if ended {
			st.finish(ackEndOutcome)
			return
		}
		if !took {
			continue // the stream goroutine holds the stream
		}
		// It handed the stream over and waits for it.
		if o := st.serveHeld(h); !o.idle {
			st.finish(o)
			return
		}
		w.handoff <- struct{}{}
	}
}

// serveHeld runs on the watcher once the stream was handed to it: it sends
// what the stream goroutine held, then delivers on while polls find data.
func (st *subStream) serveHeld(h heldResult) outcome {
	if h.n == 0 {
		return st.end(h.err)
	}
	if o, ok := st.frameAndAck(h.n, h.last); !ok {
		return o
	}
	return st.deliver()
}

// finish records how the watcher ended the stream and ends the stream
// goroutine's wait. The watcher reads nothing more.
func (st *subStream) finish(o outcome) {
	w := &st.w
	w.mu.Lock()
	if w.end == nil {
		w.end = &o
	}
	w.mu.Unlock()
	w.cancel()
}

// watcherEnd returns how the watcher ended the stream, once it has.
func (st *subStream) watcherEnd() outcome {
	w := &st.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.end == nil {
		return outcome{reason: "watcher stopped"}
	}
	return *w.end
}

// readAck returns the next ack code, 0 or 1. With no frame awaiting an ack
// it just waits: then any byte is a protocol violation, and EOF means the
// client went away. It consumes the 2 bytes of an ack and nothing else.
func (st *subStream) readAck() (uint16, error) {
	br, w := st.c.br, &st.w
	for {
		_, err := br.Peek(1)
		if err == nil {
			w.mu.Lock()
			pending := w.due != dueNone
			w.mu.Unlock()
			if !pending {
				return 0, errOutOfTurn
			}
			var b []byte
			if b, err = br.Peek(2); err == nil {
				code := binary.LittleEndian.Uint16(b)
				_, _ = br.Discard(2)
				if code != ackContinue && code != ackEnd {
					return code, &invalidAckError{code}
				}
				return code, nil
			}
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, err
		}
		if err := st.deadlinePassed(); err != nil {
			return 0, err
		}
	}
}

// acked records an ack just read: the frame awaiting it is done. ended
// reports ack 1. took reports that the stream goroutine had handed the
// stream over with h; the caller now holds the stream.
func (st *subStream) acked(code uint16) (ended, took bool, h heldResult) {
	w := &st.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if st.acker != nil {
		st.acker.Acked(w.ackEvent)
	}
	w.due = dueNone
	if code == ackEnd {
		return true, false, heldResult{}
	}
	if !w.handed {
		return false, false, heldResult{}
	}
	h, w.handed, w.held = w.held, false, heldResult{}
	return false, true, h
}

// awaitAck marks the frame about to be sent as awaiting its ack; its
// ack timeout starts once it is out (ackTimerStart).
func (st *subStream) awaitAck(last int64) {
	w := &st.w
	w.mu.Lock()
	w.due, w.ackEvent = dueWriting, last
	w.mu.Unlock()
}

// ackTimerStart starts the ack timeout of the frame just written. The ack
// may already have been read; then there is nothing to do.
func (st *subStream) ackTimerStart() {
	w := &st.w
	now := time.Since(w.base)
	due := int64(now + st.ackTimeout)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastOut = int64(now)
	if w.due != dueWriting {
		return
	}
	w.due = due
	if w.armed {
		// Set for an earlier due time: when it fires, the reader moves it on.
		return
	}
	w.armed = true
	// An error means the connection is closed, which the reader sees.
	_ = st.c.nc.SetReadDeadline(w.base.Add(time.Duration(due)))
}

// deadlinePassed handles a read deadline that fired: an ack timeout, a
// stop, or a lazy deadline to move on to the pending ack's due time or to
// clear.
func (st *subStream) deadlinePassed() error {
	w := &st.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return errStopped
	}
	if w.due > 0 {
		if time.Since(w.base) >= time.Duration(w.due) {
			return errAckTimeout
		}
		w.armed = true
		return st.c.nc.SetReadDeadline(w.base.Add(time.Duration(w.due)))
	}
	// No ack pending, or the frame is still being written: its writer arms
	// the deadline once it is out.
	w.armed = false
	return st.c.nc.SetReadDeadline(time.Time{})
}

// haltWatcher stops the watcher while the stream goroutine holds the stream
// and no frame awaits an ack, and waits for it to exit. ended reports that
// the watcher had ended the stream first (the client went away or sent
// bytes out of turn), as o.
func (st *subStream) haltWatcher() (o outcome, ended bool) {
	w := &st.w
	w.mu.Lock()
	w.stopping = true
	// A deadline in the past ends the read at once. The watcher only peeks
	// while no ack is pending, so nothing buffered is lost; the command loop
	// re-arms its own deadline.
	_ = st.c.nc.SetReadDeadline(aLongTimeAgo)
	w.mu.Unlock()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.end != nil {
		return *w.end, true
	}
	return outcome{}, false
}

// closeWatcher ends, with o, a stream whose connection must close while the
// watcher may still run: closing wakes the watcher whatever it is blocked
// in.
func (st *subStream) closeWatcher(o outcome) outcome {
	_ = st.c.nc.Close()
	<-st.w.done
	return o
}
