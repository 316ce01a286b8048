//go:build linux

package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/smssmq/smss/internal/rawsys"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
)

// The epoll front-end (server.epoll, issue 24; docs/benchmarks-history.md "Issue 24:
// the epoll front-end"). Redis's shape for the publishing connections: one
// goroutine runs an epoll loop over their sockets.
// Each turn it reads every ready socket once, parses every whole request,
// submits the turn's publishes to the broker as one batch (the broker runs
// its writer on this thread when the token is free, lead.go), then writes
// the replies. No goroutine is woken per message.
//
// The loop serves only what is cheap and common: whole pub requests. A
// connection enters it when its goroutine waits for a request with nothing
// buffered (conn.run). Anything else goes back to a goroutine, with the
// bytes already read, where the usual path serves it exactly as before: any
// other command, a request that fails to parse (the reader refuses it the
// same way there), a request longer than maxHeld, a reply the socket does
// not take at once (the goroutine writes it with the write timeout), and every
// connection at Shutdown (the goroutine drains it). A request split across
// reads is kept until its rest comes (up to maxHeld bytes), under the same
// read and request timeouts as on the goroutine path. The loop owns a
// duplicate of the socket's descriptor; Go's copy is closed so that Go's
// poller does not wake for its bytes, and a new net.Conn is made from the
// descriptor when the connection goes back.

// testSendBuffer, set by tests before any connection, shrinks the send
// buffer of the sockets the loop takes, so that a client that does not
// read fills it quickly.
var testSendBuffer int

// testTurnStart, set by tests before the loop starts, is called at the
// start of every turn, after the wait and before the reads: a test holds
// the loop there to make events arrive together.
var testTurnStart func()

// maxHeld bounds the bytes of a request the loop keeps while the rest of
// it arrives (a batch publish spans reads); a longer request goes back to
// the goroutine, whose reader takes any size up to the limits.
const maxHeld = 64 << 10

// loopReadSize is the loop's one read buffer (one per loop, not per
// connection). It holds several whole batch requests of up to maxHeld, so
// that a batch publish is read in one system call and served in the turn it
// arrived in, instead of being held across turns and copied again as each
// piece comes (with a 16 KiB buffer, 100-record batches of 200 bytes took
// two turns each). A variable for tests, which make requests cross reads.
var loopReadSize = 4 * maxHeld

// epollSupported: the loop exists on Linux (epoll_other.go elsewhere).
const epollSupported = true

// defaultTurnBytes is Options.EpollTurnBytes' default, worker.maxGroupBytes'
// own: one group's worth.
const defaultTurnBytes = 4 << 20

// epConn is a connection's state in the loop; only the loop touches it.
type epConn struct {
	fd   int
	out  []byte    // this turn's replies, in request order
	last time.Time // when bytes last came: IdleTimeout, ReadTimeout
	// in holds the start of a request whose rest has not come yet, since
	// partSince (RequestTimeout).
	in        []byte
	partSince time.Time
	// rest: bytes read that the loop does not serve; non-nil hands the
	// connection back after the turn's replies.
	rest   []byte
	back   bool
	dead   bool // close after the turn
	inTurn bool
	// Semi-sync (epoll_sync_linux.go): replies held for confirmations;
	// parked: out of the epoll set until they are written; eof: the peer
	// ended its stream while replies were held (close once written).
	held   int
	parked bool
	eof    bool
	// throttled: parked because held reached maxHeldReplies; back in the
	// epoll set once half of them went (epoll_sync_linux.go).
	throttled bool
}

// epPub is one publish of the turn: topic, trace id and records are
// spans of the loop's arena.
type epPub struct {
	c                      *conn
	start                  time.Time
	topic, trace, recs     [2]int
	count                  int
	eventID                int64
	err                    error
	loggedPanic, observeOK bool
	held                   bool // its reply waits for confirmations (epoll_sync_linux.go)
}

type epollLoop struct {
	s     *Server
	epfd  int
	epf   *os.File // epfd, registered in Go's poller
	epraw syscall.RawConn
	evfd  int // eventfd: wakes the loop for adopted connections and stop

	mu       sync.Mutex
	pending  []*conn
	stopping bool

	// For tests: publishes the loop served, connections it handed back,
	// connections it holds, replies the socket did not take at once, group
	// waits (gatherExpected), the most bytes of publishes one turn held.
	served, handed, owned, stalls, gathers, turnPeak atomic.Int64
	// Ends of stream read while replies were held, and connections left
	// unread for a while because they had maxHeldReplies held
	// (epoll_sync_linux.go).
	heldEOF, throttles atomic.Int64

	// Loop only.
	conns  map[int32]*conn
	events []unix.EpollEvent
	rbuf   []byte
	rd     sliceReader
	rr     *protocol.RequestReader
	req    protocol.Request
	arena  []byte
	pubs   []epPub
	batch  []Pub
	turn   []*conn
	scanAt time.Time
	// flushLevel 2 group wait (gatherExpected): publishes the last batch
	// answered on connections still in the loop, when, and how long the
	// batch took.
	expect    int
	expectAt  time.Time
	lastBatch time.Duration
	// Semi-sync (epoll_sync_linux.go): the tracker when replies wait for
	// slaves (nil otherwise), the held replies from held[hhead:], and the
	// confirmed replies of this turn released from them.
	sync         *replication.SyncTracker
	held         []epHeld
	hhead        int
	answeredHeld int
	// turnBytes bounds what one turn reads (Options.EpollTurnBytes): once
	// the turn's publishes hold this many bytes, the sockets still ready
	// wait for the next turn (epoll reports them again), so a burst on many
	// connections cannot make a turn hold loopReadSize for each of them
	// (10,000 connections × 256 KiB).
	turnBytes int
}

// sliceReader reads from b[off:] and then reports io.EOF, so that a request
// cut short by the end of what was read fails as incomplete.
type sliceReader struct {
	b   []byte
	off int
}

func (r *sliceReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func newEpollLoop(s *Server) (*epollLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd)}); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, fmt.Errorf("epoll_ctl eventfd: %w", err)
	}
	// The loop waits for the epoll descriptor in Go's poller (wait).
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, fmt.Errorf("epoll descriptor: %w", err)
	}
	epf := os.NewFile(uintptr(epfd), "epoll")
	epraw, err := epf.SyscallConn()
	if err != nil {
		epf.Close()
		unix.Close(evfd)
		return nil, fmt.Errorf("epoll descriptor: %w", err)
	}
	e := &epollLoop{s: s, epfd: epfd, epf: epf, epraw: epraw, evfd: evfd, conns: map[int32]*conn{},
		events: make([]unix.EpollEvent, 256), rbuf: make([]byte, loopReadSize), turnBytes: s.opts.EpollTurnBytes}
	if e.turnBytes <= 0 {
		e.turnBytes = defaultTurnBytes
	}
	e.rr = protocol.NewRequestReader(&e.rd, s.opts.Limits)
	if s.opts.Sync.Enabled() {
		e.sync = s.opts.Sync
		e.sync.SetWaker(e.wake)
	}
	return e, nil
}

// adopt hands c, a plain connection waiting for a request with nothing
// buffered, to the loop; false leaves it with its goroutine (TLS, Shutdown,
// or the descriptor could not be duplicated). It runs on c's goroutine,
// which must return at once when it reports true.
func (e *epollLoop) adopt(c *conn) bool {
	tc, ok := c.nc.(*net.TCPConn)
	if !ok || !c.s.setState(c, stateIdle) {
		return false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		return false
	}
	fd := -1
	if cerr := raw.Control(func(s uintptr) { fd, err = unix.Dup(int(s)) }); cerr != nil || err != nil {
		return false
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return false
	}
	if testSendBuffer > 0 {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, testSendBuffer)
	}
	// Closing Go's copy takes the socket out of Go's poller; the socket
	// itself lives on in fd (no FIN is sent while a descriptor is open).
	c.nc.Close()
	if c.ep == nil {
		c.ep = &epConn{}
	}
	c.ep.fd, c.ep.last = fd, time.Now()
	e.pending = append(e.pending, c)
	e.wake()
	return true
}

func (e *epollLoop) wake() {
	var one [8]byte // the eventfd counter is a native-endian uint64
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = rawsys.WriteFd(e.evfd, one[:])
}

// stop makes the loop answer what it has read, hand every connection back
// and return. It does not wait (Shutdown holds s.mu; the loop takes it).
func (e *epollLoop) stop() {
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	e.wake()
}

func (e *epollLoop) run() {
	defer e.s.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			// The loop's own state is in doubt: close its connections (as
			// a panicking goroutine closes its one) and serve from
			// goroutines from now on.
			e.s.opts.Metrics.Error(metrics.KindPanic)
			e.s.log.Error("panic in the epoll loop; closing its connections", "panic", r, "stack", string(debug.Stack()))
			e.mu.Lock()
			e.stopping = true
			pend := e.pending
			e.pending = nil
			e.mu.Unlock()
			e.dropHeld()
			for _, c := range e.conns {
				e.finish(c)
			}
			for _, c := range pend {
				e.register(c)
				e.finish(c)
			}
			e.closeFDs()
		}
	}()
	for {
		n, err := e.wait()
		if err != nil {
			panic(err.Error())
		}
		if testTurnStart != nil {
			testTurnStart()
		}
		now := time.Now()
		stopping := e.readEvents(n, now)
		if e.sync != nil && e.hhead < len(e.held) {
			// Replies confirmed since the last turn go out before this
			// turn's group commit, not after it: at flushLevel 2 that
			// commit includes the master's fsync, and a confirmation that
			// came between turns would wait for it (semi-synchronous
			// publishing at 64 connections: 1.08-1.15x the throughput,
			// BENCHMARKS.md). Their connections then send again while the
			// group is synced, in time for the next turn.
			e.release(now)
			e.writeReplies()
		}
		if len(e.pubs) > 0 {
			if !stopping && len(e.pubs) < e.expect {
				stopping = e.gatherExpected(now)
			}
			e.expect = 0
		}
		e.publish()
		if e.sync != nil {
			e.release(time.Now())
		}
		e.reply()
		if stopping {
			e.drainHeld()
			e.handBackAll()
			return
		}
		if !now.Before(e.scanAt) {
			e.scanIdle(now)
		}
	}
}

// readEvents reads the first n ready events: the connections' sockets, and
// the eventfd (adopted connections, stop). It reports whether the loop must
// stop.
func (e *epollLoop) readEvents(n int, now time.Time) (stopping bool) {
	for _, ev := range e.events[:max(n, 0)] {
		if ev.Fd == int32(e.evfd) {
			stopping = e.takePending() || stopping
			continue
		}
		if len(e.arena) >= e.turnBytes {
			continue // still ready next turn; the eventfd above is not skipped
		}
		if c := e.conns[ev.Fd]; c != nil {
			e.read(c, now)
		}
	}
	return stopping
}

// gatherExpected is flushLevel 2's group wait (the broker's
// waitForExpected, broker/group.go), done here because the broker cannot
// do it for the loop: the connections it would wait for send through the
// loop, which is the one running the group. After a batch's fsync the
// connections just answered come back one by one; a batch sent with the
// first few and the next with the rest would split them into two halves
// that alternate, each paying a device flush. So when this turn has fewer
// publishes than the last batch answered, the loop waits for more, up to
// Options.EpollGroupWait and at most half the last batch's time (a fast
// device is not held up for long), and not at all when the expectation is
// stale. A lone publisher is what is expected and never waits. A wait
// that brings no publish ends it.
func (e *epollLoop) gatherExpected(now time.Time) (stopping bool) {
	gw := e.s.opts.EpollGroupWait
	wait := min(gw, e.lastBatch/2)
	if wait <= 0 || now.Sub(e.expectAt) > 10*e.lastBatch+gw {
		return false
	}
	e.gathers.Add(1)
	deadline := now.Add(wait)
	for len(e.pubs) < e.expect {
		n, err := e.waitUntil(deadline)
		if err != nil {
			panic(err.Error()) // as run
		}
		had := len(e.pubs)
		if stopping = e.readEvents(n, time.Now()) || stopping; stopping {
			return true
		}
		if len(e.pubs) == had && (n > 0 || !time.Now().Before(deadline)) {
			return false
		}
	}
	return false
}

// wait returns the ready events, waiting for some until the next scan is
// due. It never blocks in epoll_wait itself: a goroutine blocked in a
// system call keeps its P, and the goroutines the last turn woke (a
// subscriber of what it wrote) would wait on that P's run queue until the
// runtime's monitor takes the P back, up to milliseconds later (measured:
// p99 of e2e in tens of ms with a blocking epoll_wait on a locked thread).
// So it polls, and with nothing ready it parks in Go's own poller on the
// epoll descriptor, which is readable while events are ready.
func (e *epollLoop) wait() (int, error) {
	if e.scanAt.IsZero() {
		e.scanAt = time.Now().Add(e.scanEvery())
	}
	if d, ok := e.heldDeadline(); ok && d.Before(e.scanAt) {
		return e.waitUntil(d)
	}
	return e.waitUntil(e.scanAt)
}

// waitUntil is wait with its own deadline.
func (e *epollLoop) waitUntil(deadline time.Time) (int, error) {
	n, err := rawsys.EpollWaitNow(e.epfd, e.events)
	if n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
		return max(n, 0), wrapEpoll(err)
	}
	if err := e.epf.SetReadDeadline(deadline); err != nil {
		return 0, fmt.Errorf("epoll descriptor deadline: %w", err)
	}
	err = nil
	rerr := e.epraw.Read(func(fd uintptr) bool {
		n, err = rawsys.EpollWaitNow(int(fd), e.events)
		return n > 0 || (err != nil && !errors.Is(err, unix.EINTR))
	})
	if rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) {
		return 0, fmt.Errorf("wait for the epoll descriptor: %w", rerr)
	}
	if errors.Is(err, unix.EINTR) {
		err = nil
	}
	return max(n, 0), wrapEpoll(err)
}

func wrapEpoll(err error) error {
	if err != nil {
		return fmt.Errorf("epoll_wait: %w", err)
	}
	return nil
}

// scanEvery is how often timeouts are checked: an eighth of the shorter of
// IdleTimeout and ReadTimeout (the slack the goroutine path's deadlines
// have), at most once a second.
func (e *epollLoop) scanEvery() time.Duration {
	o := e.s.opts
	return max(min(o.IdleTimeout/deadlineSlackDiv, o.ReadTimeout/deadlineSlackDiv, time.Second), time.Millisecond)
}

// scanIdle closes the connections that sent nothing for IdleTimeout
// between requests, or within a request nothing for ReadTimeout or not the
// whole request within RequestTimeout, with the goroutine path's log
// lines and metrics.
func (e *epollLoop) scanIdle(now time.Time) {
	e.scanAt = now.Add(e.scanEvery())
	o := e.s.opts
	for _, c := range e.conns {
		ep := c.ep
		if ep.held > 0 || ep.parked {
			continue // waiting for the server, not for its peer
		}
		switch {
		case len(ep.in) == 0:
			if now.Sub(ep.last) >= o.IdleTimeout {
				c.log.Debug("closing idle connection", "idle", o.IdleTimeout)
				e.finish(c)
			}
		case now.Sub(ep.last) >= o.ReadTimeout || now.Sub(ep.partSince) >= o.RequestTimeout:
			cmd := "?"
			if len(ep.in) >= protocol.HeaderSize {
				cmd = protocol.ParseHeader((*[protocol.HeaderSize]byte)(ep.in)).Cmd.String()
			}
			o.Metrics.Error(metrics.KindTimeout)
			c.log.Warn("closing connection: incomplete request", "cmd", cmd, "err", os.ErrDeadlineExceeded)
			e.finish(c)
		}
	}
}

// takePending registers the connections adopt queued; it reports whether
// the loop must stop (then the list is final: adopt refuses from then on).
func (e *epollLoop) takePending() bool {
	var cnt [8]byte
	_, _ = rawsys.ReadFd(e.evfd, cnt[:])
	e.mu.Lock()
	pend, stopping := e.pending, e.stopping
	e.pending = nil
	e.mu.Unlock()
	for _, c := range pend {
		if err := e.register(c); err != nil {
			c.log.Info("epoll loop cannot take the connection; serving it from a goroutine", "err", err)
			e.handBack(c)
		}
	}
	return stopping
}

func (e *epollLoop) register(c *conn) error {
	e.conns[int32(c.ep.fd)] = c
	e.owned.Add(1)
	return e.epollAdd(c)
}

func (e *epollLoop) epollAdd(c *conn) error {
	if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, c.ep.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.ep.fd)}); err != nil {
		return fmt.Errorf("epoll_ctl add: %w", err)
	}
	return nil
}

// read reads what c's socket has (once) and queues its whole pub requests.
func (e *epollLoop) read(c *conn, now time.Time) {
	ep := c.ep
	if ep.dead || ep.back || ep.eof || ep.parked {
		return
	}
	m, err := rawsys.ReadFd(ep.fd, e.rbuf)
	switch {
	case m > 0:
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
		return
	case len(ep.in) > 0:
		// The stream ended or failed inside a request: the goroutine
		// reads its start and meets the end, and closes as it does for
		// any incomplete request.
		ep.rest = append(ep.rest[:0], ep.in...)
		ep.in = ep.in[:0]
		e.mark(c).back = true
		return
	case err == nil: // end of stream, between requests
		c.log.Debug("connection closed by peer")
		if ep.held > 0 {
			e.mark(c).eof = true // its held replies are still written
			e.heldEOF.Add(1)
			return
		}
		e.mark(c).dead = true
		return
	default:
		c.log.Info("connection read failed", "err", err)
		e.mark(c).dead = true
		return
	}
	e.mark(c)
	ep.last = now
	data := e.rbuf[:m]
	held := len(ep.in) > 0
	if held {
		ep.in = append(ep.in, data...)
		data = ep.in
	}
	e.rd.b, e.rd.off = data, 0
	for e.rd.off < len(data) {
		start := e.rd.off
		err := e.rr.Read(&e.req)
		if (err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF)) && len(data)-start <= maxHeld {
			// Cut short by the end of what came so far: kept until the
			// rest comes (scanIdle applies the read timeouts meanwhile).
			if start > 0 || !held {
				ep.partSince = now
			}
			ep.in = append(ep.in[:0], data[start:]...) // copy: data may alias ep.in, start <= its offset
			return
		}
		if err != nil || e.req.Header.Cmd != protocol.CmdPub {
			// Not the loop's to serve (another command, a refusal, or
			// a request too long to hold): the goroutine reads it again
			// from these bytes.
			ep.rest = append(ep.rest[:0], data[start:]...)
			ep.in = ep.in[:0]
			ep.back = true
			return
		}
		c.notePublisher()
		p := epPub{c: c, start: now, count: e.req.RecordCount}
		p.topic = e.keep(e.req.Topic)
		p.trace = e.keep(e.req.TraceID)
		p.recs = e.keep(e.req.Payload)
		e.pubs = append(e.pubs, p)
	}
	ep.in = ep.in[:0]
	if cap(ep.in) > maxHeld {
		ep.in = nil // do not pin a long request's buffer
	}
}

// mark adds c to the turn's connections (once) and returns its state.
func (e *epollLoop) mark(c *conn) *epConn {
	if !c.ep.inTurn {
		c.ep.inTurn = true
		e.turn = append(e.turn, c)
	}
	return c.ep
}

// keep copies b into the turn's arena (the request reader reuses its
// buffers) and returns its span.
func (e *epollLoop) keep(b []byte) [2]int {
	off := len(e.arena)
	e.arena = append(e.arena, b...)
	return [2]int{off, len(e.arena)}
}

func (e *epollLoop) span(s [2]int) []byte { return e.arena[s[0]:s[1]:s[1]] }

// publish submits the turn's publishes as one batch and queues each reply
// on its connection, in request order.
func (e *epollLoop) publish() {
	if len(e.pubs) == 0 {
		return
	}
	if n := int64(len(e.arena)); n > e.turnPeak.Load() {
		e.turnPeak.Store(n) // only the loop stores
	}
	start := time.Now()
	e.runBatch()
	e.lastBatch = time.Since(start)
	e.served.Add(int64(len(e.pubs))) // before the replies: tests read it once answered
	now := time.Now()
	for i := range e.pubs {
		p := &e.pubs[i]
		if p.loggedPanic {
			p.c.ep.dead = true
			continue
		}
		e.holdOrAnswer(p, p.err, now)
	}
}

// runBatch publishes e.pubs through the Backend, one call when it takes
// batches. A panic is confined to the connections of the batch, which are
// closed, as a panicking goroutine closes its own.
func (e *epollLoop) runBatch() {
	defer func() {
		if r := recover(); r != nil {
			e.s.opts.Metrics.Error(metrics.KindPanic)
			stack := string(debug.Stack())
			for i := range e.pubs {
				p := &e.pubs[i]
				if !p.loggedPanic {
					p.c.log.Error("panic while serving connection; closing it", append(e.attrs(p, ""), "panic", r, "stack", stack)...)
				}
				p.loggedPanic = true
			}
		}
	}()
	be := e.s.opts.Backend
	if bp, ok := be.(BatchPublisher); ok {
		e.batch = e.batch[:0]
		for i := range e.pubs {
			p := &e.pubs[i]
			e.batch = append(e.batch, Pub{Topic: e.span(p.topic), Records: e.span(p.recs), Count: p.count})
		}
		bp.PublishBatch(e.s.ctx, e.batch)
		for i := range e.pubs {
			e.pubs[i].eventID, e.pubs[i].err = e.batch[i].EventID, e.batch[i].Err
		}
		clear(e.batch)
		return
	}
	for i := range e.pubs {
		p := &e.pubs[i]
		p.eventID, p.err = be.Publish(e.s.ctx, e.span(p.topic), e.span(p.recs), p.count)
	}
}

func (e *epollLoop) attrs(p *epPub, errText string) []any {
	a := []any{"cmd", protocol.CmdPub.String(), "topic", string(e.span(p.topic)),
		"traceId", string(e.span(p.trace)), "elapsed", time.Since(p.start)}
	if errText != "" {
		a = append(a, "err", errText)
	}
	return a
}

// reply writes every replied connection's replies without waiting, then
// closes, hands back or keeps each.
func (e *epollLoop) reply() {
	e.writeReplies()
	answered := e.answeredHeld
	e.answeredHeld = 0
	for i := range e.pubs {
		p := &e.pubs[i]
		if p.held {
			p.c = nil
			continue // observed when released (emit)
		}
		if !p.loggedPanic {
			e.s.opts.Metrics.ObserveRequest(protocol.CmdPub, time.Since(p.start), p.observeOK)
		}
		if p.observeOK && !p.c.ep.dead && !p.c.ep.back {
			answered++ // its connection stays and is about to send again
		}
		p.c = nil
	}
	if answered > 0 {
		e.expect, e.expectAt = answered, time.Now()
	}
	e.pubs, e.arena = e.pubs[:0], e.arena[:0]
	for _, c := range e.turn {
		ep := c.ep
		ep.inTurn = false
		switch {
		case ep.held > 0 && (ep.dead || ep.back || ep.eof):
			e.park(c) // handed back or closed once its replies went
		case ep.dead || ep.eof:
			e.finish(c)
		case ep.back:
			e.handBack(c)
		case ep.held >= maxHeldReplies:
			e.throttle(c)
		}
	}
	clear(e.turn)
	e.turn = e.turn[:0]
	if cap(e.arena) > 4<<20 {
		e.arena = nil // do not pin one large turn's buffer
	}
}

// writeReplies writes the queued replies of the turn's connections
// without waiting; a socket that does not take them all sends its
// connection back to a goroutine after the turn (reply).
func (e *epollLoop) writeReplies() {
	for _, c := range e.turn {
		ep := c.ep
		if len(ep.out) > 0 && !ep.dead {
			n, err := writeNow(ep.fd, ep.out)
			switch {
			case err != nil:
				e.s.opts.Metrics.Error(metrics.KindIO)
				c.log.Info("closing connection: reply write failed", "cmd", protocol.CmdPub.String(), "err", err)
				ep.dead = true
			case n < len(ep.out):
				// The socket is full: the goroutine writes the rest with
				// the write timeout, then serves what follows.
				ep.out = ep.out[:copy(ep.out, ep.out[n:])]
				ep.back = true
				e.stalls.Add(1)
			default:
				ep.out = ep.out[:0]
			}
		}
	}
}

// writeNow writes as much of b as the socket takes without blocking.
func writeNow(fd int, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := rawsys.WriteFd(fd, b[n:])
		if m > 0 {
			n += m
			continue
		}
		switch {
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			return n, nil
		case err != nil:
			return n, fmt.Errorf("write socket: %w", err)
		default:
			return n, io.ErrShortWrite
		}
	}
	return n, nil
}

// finish closes a connection the loop owns.
func (e *epollLoop) finish(c *conn) {
	e.unregister(c)
	unix.Close(c.ep.fd)
	c.ep.fd = -1
	e.s.removeConn(c)
	e.s.wg.Done()
}

func (e *epollLoop) unregister(c *conn) {
	e.epollDel(c)
	if e.conns[int32(c.ep.fd)] == c {
		delete(e.conns, int32(c.ep.fd))
		e.owned.Add(-1)
	}
}

func (e *epollLoop) epollDel(c *conn) {
	unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, c.ep.fd, nil)
}

// handBack returns c to a goroutine of its own, with the bytes read but
// not served and the replies not yet written.
func (e *epollLoop) handBack(c *conn) {
	ep := c.ep
	e.unregister(c)
	ep.parked, ep.throttled = false, false // adopt may take it again
	e.handed.Add(1)
	f := os.NewFile(uintptr(ep.fd), "")
	nc, err := net.FileConn(f) // a duplicate, in Go's poller
	f.Close()
	ep.fd = -1
	if err != nil {
		c.log.Warn("closing connection: cannot hand it back from the epoll loop", "err", err)
		e.s.removeConn(c)
		e.s.wg.Done()
		return
	}
	e.s.mu.Lock()
	c.nc, c.dr.nc, c.dr.sock = nc, nc, rawsys.NewConn(nc)
	e.s.mu.Unlock()
	c.dr.armed.forget()
	c.wdl.forget()
	if len(ep.in) > 0 { // Shutdown with a request partly read
		ep.rest = append(ep.rest, ep.in...)
		ep.in = ep.in[:0]
	}
	c.dr.pending = ep.rest
	ep.rest, ep.back = nil, false
	unsent := ep.out
	ep.out = nil
	go c.resume(unsent)
}

// handBackAll ends the loop at Shutdown: every connection goes back to a
// goroutine, which drains it as Shutdown does for any idle connection.
func (e *epollLoop) handBackAll() {
	for _, c := range e.conns {
		e.handBack(c)
	}
	e.closeFDs()
}

func (e *epollLoop) closeFDs() {
	if e.sync != nil {
		e.sync.SetWaker(nil) // the eventfd's number may be reused once closed
	}
	e.epf.Close() // closes epfd
	unix.Close(e.evfd)
}

// resume is the goroutine of a connection the epoll loop handed back:
// it writes the replies the loop could not, then serves as usual.
func (c *conn) resume(unsent []byte) {
	looped := false
	defer func() { c.end(recover(), looped) }()
	if len(unsent) > 0 {
		c.req = protocol.Request{Header: protocol.Header{Cmd: protocol.CmdPub}} // for write's log line
		c.out = append(c.out[:0], unsent...)
		if !c.write(c.s.opts.WriteTimeout) {
			return
		}
	}
	looped = c.run()
}
