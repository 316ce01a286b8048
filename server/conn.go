package server

import (
	"bufio"
	"errors"
	"github.com/smssmq/smss/internal/rawsys"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

type connState uint8

const (
	stateNew    connState = iota // accepted, not yet waiting
	stateIdle                    // waiting for a request's first byte
	stateActive                  // reading, serving or answering a request
	stateStream                  // serving a subscription: closed at once by Shutdown
)

const (
	readBufferSize = 16 << 10
	// After a refusal that closes the connection, unread request bytes are
	// drained for a moment so that the close is a FIN, not a RST that could
	// discard the 400 before the client reads it.
	lingerTimeout = time.Second
	lingerMax     = 256 << 10
)

// deadlineReader arms the read deadline before every read that reaches
// the socket, so a timeout means "no progress for that long" (docs/protocol.md §1.1),
// whatever the request size. A zero timeout leaves the deadline to the
// caller (subscription streams use absolute deadlines, and one set in the
// past to stop a blocked read).
// A non-zero until caps every deadline: the whole request must be read by
// then, so a client trickling bytes just inside the timeout cannot hold a
// connection and its request buffer forever.
type deadlineReader struct {
	nc      net.Conn
	sock    rawsys.Conn // nc's reads, and the connection's writes (writeFrom)
	timeout time.Duration
	until   time.Time
	armed   lazyDeadline
	// pending holds bytes the epoll loop read from the socket before it
	// handed the connection back (epoll_linux.go): they are read first.
	pending []byte
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	if len(d.pending) > 0 {
		n := copy(p, d.pending)
		if d.pending = d.pending[n:]; len(d.pending) == 0 {
			d.pending = nil
		}
		return n, nil
	}
	if d.timeout > 0 {
		now := time.Now()
		want, slack := now.Add(d.timeout), d.timeout/deadlineSlackDiv
		if !d.until.IsZero() && d.until.Before(want) {
			want, slack = d.until, 0
		}
		if err := d.armed.arm(d.nc.SetReadDeadline, want, slack); err != nil {
			return 0, err
		}
	}
	return d.sock.Read(p)
}

// deadlineSlackDiv sets how much later than asked a deadline may fire
// (timeout/8). Re-arming a deadline moves a runtime timer under a lock;
// with the slack, back-to-back requests keep the one already armed instead
// of moving it by microseconds three times per request.
const deadlineSlackDiv = 8

// lazyDeadline remembers the deadline last armed on one direction of a
// connection. Whoever sets that deadline directly must call forget.
type lazyDeadline struct{ at time.Time }

// arm makes the deadline fall in [want, want+slack]: it keeps the armed
// one when it already does, else arms want+slack.
func (l *lazyDeadline) arm(set func(time.Time) error, want time.Time, slack time.Duration) error {
	if !l.at.IsZero() && !l.at.Before(want) && !l.at.After(want.Add(slack)) {
		return nil
	}
	at := want.Add(slack)
	if err := set(at); err != nil {
		l.at = time.Time{}
		return err
	}
	l.at = at
	return nil
}

func (l *lazyDeadline) forget() { l.at = time.Time{} }

type conn struct {
	s     *Server
	nc    net.Conn
	log   *slog.Logger
	dr    deadlineReader
	br    *bufio.Reader
	rr    *protocol.RequestReader
	req   protocol.Request
	out   []byte
	wdl   lazyDeadline
	state connState // guarded by s.mu
	// drainUntil ends the connection's wait for a next request during
	// Shutdown (awaitDrain); zero until it first waits.
	drainUntil time.Time
	auth       connAuth // auth.go
	ipKey      string   // remote address as limit.maxConnsPerIP counts it
	// ep is the connection's state in the epoll loop (epoll_linux.go); nil
	// until the loop first takes it.
	ep *epConn
	// publisher: c has sent a pub (Server.publishers counts it once). Only
	// c's owner, its goroutine or the loop, touches it.
	publisher bool
}

// notePublisher counts c among the publishing connections the first time
// it publishes (Options.EpollMinConns).
func (c *conn) notePublisher() {
	if !c.publisher {
		c.publisher = true
		c.s.publishers.Add(1)
	}
}

func newConn(s *Server, nc net.Conn, ipKey string) *conn {
	c := &conn{s: s, nc: nc, ipKey: ipKey, log: s.log.With("remote", nc.RemoteAddr().String())}
	c.dr = deadlineReader{nc: nc, sock: rawsys.NewConn(nc), timeout: s.opts.ReadTimeout}
	size := readBufferSize
	if s.opts.Security.Auth != nil {
		size = preAuthBufferSize // grown at login (auth.go)
	}
	c.br = bufio.NewReaderSize(&c.dr, size)
	c.rr = protocol.NewRequestReader(c.br, s.opts.Limits)
	c.initAuth()
	return c
}

func (c *conn) serve() {
	looped := false
	defer func() { c.end(recover(), looped) }()
	c.log.Debug("connection opened")
	if !c.handshakeTLS() {
		return
	}
	looped = c.run()
}

// run serves requests until the connection ends (false) or the epoll loop
// takes it over (true), at a point where it waits for a request with
// nothing buffered. From then on the loop owns c: the caller must not
// touch it.
func (c *conn) run() (looped bool) {
	for {
		if c.s.ep != nil && c.br.Buffered() == 0 && len(c.dr.pending) == 0 && c.s.loopWanted() && c.s.ep.adopt(c) {
			return true
		}
		if !c.waitRequest() || !c.serveRequest() {
			return false
		}
	}
}

// end closes the connection when its goroutine returns (r is what it
// panicked with), unless the epoll loop owns it now.
func (c *conn) end(r any, looped bool) {
	if r != nil {
		c.s.opts.Metrics.Error(metrics.KindPanic)
		c.log.Error("panic while serving connection; closing it",
			"panic", r, "cmd", c.req.Header.Cmd.String(), "topic", string(c.req.Topic),
			"traceId", string(c.req.TraceID), "stack", string(debug.Stack()))
	} else if looped {
		return
	}
	c.nc.Close()
	c.s.removeConn(c)
	c.s.wg.Done()
}

// waitRequest blocks until a request's first byte is available (or the
// connection must end), then switches to the per-request read timeout.
func (c *conn) waitRequest() bool {
	if !c.s.setState(c, stateIdle) {
		// Shutdown: a request pipelined behind the one just answered (in
		// the read buffer, or arriving within the connection's drain
		// window) gets its reply too.
		if (c.br.Buffered() > 0 || c.awaitDrain()) && c.drain() {
			return true
		}
		// A FIN, not a reset: bytes the client sent after the last reply
		// must not make its kernel discard that reply.
		c.linger()
		return false
	}
	c.dr.timeout = c.s.opts.IdleTimeout
	if c.loginExpired() {
		return false
	}
	c.dr.until = c.readUntil()
	if _, err := c.br.Peek(1); err != nil && !c.peekReceived(err) {
		switch {
		case c.loginExpired():
		case errors.Is(err, io.EOF):
			c.log.Debug("connection closed by peer")
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.log.Debug("closing idle connection", "idle", c.s.opts.IdleTimeout)
		case errors.Is(err, net.ErrClosed):
			c.log.Debug("connection closed by shutdown")
		default:
			c.log.Info("connection read failed", "err", err)
		}
		return false
	}
	if !c.s.setState(c, stateActive) && !c.drain() {
		return false
	}
	c.dr.timeout = c.s.opts.ReadTimeout
	c.dr.until = time.Now().Add(c.s.opts.RequestTimeout)
	if login := c.readUntil(); !login.IsZero() && login.Before(c.dr.until) {
		c.dr.until = login
	}
	return true
}

// awaitDrain waits, during Shutdown, for the first byte of a request on a
// connection that was serving one when Shutdown began: as an idle one, for
// DrainGrace at most, counted once per connection (from the later of
// Shutdown's own grace and the first wait), so a client that keeps sending
// cannot hold the shutdown beyond it.
func (c *conn) awaitDrain() bool {
	now := time.Now()
	if c.drainUntil.IsZero() {
		c.drainUntil = now.Add(DrainGrace)
		if end := c.s.graceEnd(); end.After(c.drainUntil) {
			c.drainUntil = end
		}
	}
	if !now.Before(c.drainUntil) {
		return false
	}
	c.dr.timeout = 0 // the deadline below, not the per-read timeout
	c.dr.armed.forget()
	if err := c.nc.SetReadDeadline(c.drainUntil); err != nil {
		return false
	}
	_, err := c.br.Peek(1)
	return err == nil || c.peekReceived(err)
}

// peekReceived reads the first byte of a request that was in the socket
// when Shutdown's drain deadline ended the wait for it: the connection's
// goroutine ran too late (a starved process), not the client. The bytes
// were received; they get served.
func (c *conn) peekReceived(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) || !c.s.isShutting() || socketPending(c.nc) == 0 {
		return false
	}
	c.dr.armed.forget()
	c.dr.timeout = c.s.opts.ReadTimeout
	_, err = c.br.Peek(1)
	return err == nil
}

// drain serves one more request during Shutdown (its bytes are here
// already): the read deadline Shutdown set is replaced by the usual
// per-request ones.
func (c *conn) drain() bool {
	if !c.s.drainRequest(c) {
		return false
	}
	c.dr.armed.forget()
	return true
}

// serveRequest reads, handles and answers one request; false ends the
// connection.
func (c *conn) serveRequest() bool {
	start := time.Now()
	if handled, keep := c.preAuthGate(start); handled {
		return keep
	}
	err := c.rr.Read(&c.req)
	c.dr.until = time.Time{}
	if handled, keep := c.gate(err, start); handled {
		return keep
	}
	if err == nil {
		return c.dispatch(start)
	}
	var re *protocol.RequestError
	if !errors.As(err, &re) {
		// Mid-request EOF or timeout: the stream position is lost.
		c.s.opts.Metrics.Error(ioKind(err))
		c.log.Warn("closing connection: incomplete request", "cmd", c.req.Header.Cmd.String(), "err", err)
		return false
	}
	c.s.opts.Metrics.ObserveRequest(c.req.Header.Cmd, time.Since(start), false)
	if re.Close {
		c.s.opts.Metrics.Error(metrics.KindProtocol)
	} else {
		c.s.opts.Metrics.Error(metrics.KindBusiness)
	}
	msg := re.Error()
	if !re.Close && c.req.Header.Cmd == protocol.CmdDelay && c.s.opts.Backend.IsSlave() {
		// §1.5.5 checks the role before the delay's content.
		msg = protocol.ErrSlavePub.Msg
	}
	if re.Close {
		c.log.Warn("refusing request and closing connection", c.attrs(msg, start)...)
	} else if c.s.sampler.sample() {
		c.log.Info("request refused", c.attrs(msg, start)...)
	}
	c.out = protocol.AppendReplyError(c.out[:0], msg)
	if !c.write(c.s.opts.WriteTimeout) {
		return false
	}
	if re.Close {
		c.linger()
		return false
	}
	return true
}

func (c *conn) attrs(errText string, start time.Time) []any {
	a := []any{"cmd", c.req.Header.Cmd.String(), "topic", string(c.req.Topic),
		"traceId", string(c.req.TraceID), "elapsed", time.Since(start)}
	if errText != "" {
		a = append(a, "err", errText)
	}
	return a
}

func (c *conn) write(timeout time.Duration) bool { return c.writeFrom(0, timeout) }

// writeFrom is write of c.out[off:].
func (c *conn) writeFrom(off int, timeout time.Duration) bool {
	if err := c.wdl.arm(c.nc.SetWriteDeadline, time.Now().Add(timeout), timeout/deadlineSlackDiv); err != nil {
		c.log.Info("set write deadline", "err", err)
		return false
	}
	if _, err := c.dr.sock.Write(c.out[off:]); err != nil {
		c.s.opts.Metrics.Error(ioKind(err))
		c.log.Info("closing connection: reply write failed", "cmd", c.req.Header.Cmd.String(), "err", err)
		return false
	}
	if cap(c.out) > 1<<20 {
		// Do not pin a large list reply's buffer for the connection's life.
		c.out = nil
	}
	return true
}

// linger half-closes the connection and discards what the client is still
// sending, briefly and boundedly, before the caller closes it.
func (c *conn) linger() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.dr.armed.forget()
	if err := c.nc.SetReadDeadline(time.Now().Add(lingerTimeout)); err != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, c.nc, lingerMax)
}

// ioKind classifies a socket failure for the errors metric.
func ioKind(err error) string {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return metrics.KindTimeout
	}
	return metrics.KindIO
}
