package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/metrics"
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("server closed")

// Server is the TCP front end. Create it with New, then Listen, Serve, and
// finally Shutdown.
type Server struct {
	opts    Options
	log     *slog.Logger
	sampler sampler

	// ctx is handed to Backend calls; it is cancelled only when Shutdown
	// gives up waiting, so in-flight requests normally complete.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	ln       net.Listener
	tlsLn    net.Listener // Security.TLS only (tls.go)
	serving  bool
	shutting bool
	draining bool          // Shutdown's DrainGrace has not passed yet
	drainEnd time.Time     // when it passes
	done     chan struct{} // closed by Shutdown
	conns    map[*conn]struct{}
	perIP    map[string]int // open connections per conn.ipKey
	wg       sync.WaitGroup // Serve's accept loop and every connection
	// ep is the epoll loop (Options.Epoll, epoll_linux.go); nil when off.
	ep *epollLoop
	// publishers counts the open connections that have published
	// (conn.notePublisher, loopWanted).
	publishers atomic.Int64

	// inlineFrames counts the subscription frames that commit hooks wrote
	// whole, inlinePartial those they started and handed back because the
	// socket would block (subinline.go); for tests and profiling.
	inlineFrames, inlinePartial atomic.Int64
}

// New validates opts and returns an unstarted server.
func New(opts Options) (*Server, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		opts:    opts,
		log:     opts.Logger,
		sampler: sampler{every: uint64(opts.LogSample)},
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		conns:   make(map[*conn]struct{}),
		perIP:   make(map[string]int),
	}, nil
}

// Listen binds Host:Port, and Security.TLSListen when TLS is configured.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting {
		return ErrServerClosed
	}
	if s.ln != nil {
		return errors.New("server: already listening")
	}
	addr := net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	if err := s.listenTLSLocked(); err != nil {
		ln.Close()
		return err
	}
	s.ln = ln
	s.log.Info("listening", "addr", ln.Addr().String())
	return nil
}

// Addr is the bound address, nil before Listen.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Serve accepts connections until Shutdown, then returns ErrServerClosed.
// Any other return is a listener failure.
func (s *Server) Serve() error {
	s.mu.Lock()
	switch {
	case s.shutting:
		s.mu.Unlock()
		return ErrServerClosed
	case s.ln == nil:
		s.mu.Unlock()
		return errors.New("server: Serve called before Listen")
	case s.serving:
		s.mu.Unlock()
		return errors.New("server: already serving")
	}
	s.serving = true
	ln := s.ln
	s.startEpollLocked()
	s.wg.Add(1)
	s.serveTLS(s.tlsLn, ln)
	s.mu.Unlock()
	defer s.wg.Done()
	return s.acceptLoop(ln)
}

// acceptLoop accepts connections on ln until Shutdown (ErrServerClosed) or
// a listener failure.
func (s *Server) acceptLoop(ln net.Listener) error {
	var backoff time.Duration
	// spare holds one descriptor back so that, at the process's
	// descriptor limit, a waiting connection can still be accepted and
	// closed instead of hanging in the listen backlog until its client
	// times out (the "idle descriptor" trick of libev and nginx).
	spare := openSpare()
	defer func() {
		if spare != nil {
			spare.Close()
		}
	}()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isShutting() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept: %w", err)
			}
			if isFDLimit(err) && spare != nil {
				spare.Close()
				spare = nil
				if s.shedOne(ln) {
					spare = openSpare()
					backoff = 0
					continue
				}
				spare = openSpare()
			}
			if spare == nil {
				spare = openSpare()
			}
			// Transient failures (EMFILE, ECONNABORTED, ...): back off so
			// a resource shortage does not become a busy loop.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed, retrying", "err", err, "backoff", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return ErrServerClosed
			}
			continue
		}
		backoff = 0
		s.startConn(nc)
	}
}

// openSpare opens the descriptor acceptLoop keeps in reserve; nil when
// none is free (acceptLoop tries again after its next failure).
func openSpare() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil
	}
	return f
}

// isFDLimit reports whether an accept failed for want of a descriptor.
func isFDLimit(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// shedOne runs with acceptLoop's spare descriptor released: it accepts the
// connection waiting in the backlog with it. If a descriptor is still free
// afterwards the shortage has passed and the connection is served;
// otherwise it is closed at once, so its client sees the connection end
// (and the log says why) rather than waiting in the backlog. It returns
// false when nothing could be accepted (the caller backs off).
func (s *Server) shedOne(ln net.Listener) bool {
	// Accept must not block: the backlog may be empty when the limit was
	// hit by another goroutine's open.
	if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		d.SetDeadline(time.Now().Add(10 * time.Millisecond))
		defer d.SetDeadline(time.Time{})
	}
	nc, err := ln.Accept()
	if err != nil {
		return false
	}
	if f := openSpare(); f != nil {
		f.Close()
		s.startConn(nc)
		return true
	}
	s.opts.Metrics.Error(metrics.KindRefused)
	if s.sampler.sample() {
		s.log.Warn("connection refused: descriptor limit reached (too many open files)", "remote", nc.RemoteAddr().String())
	}
	nc.Close()
	return true
}

func (s *Server) startConn(nc net.Conn) {
	s.mu.Lock()
	if s.shutting {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if len(s.conns) >= s.opts.MaxConns {
		s.mu.Unlock()
		s.opts.Metrics.Error(metrics.KindRefused)
		if s.sampler.sample() {
			s.log.Warn("connection refused: too many open connections", "remote", nc.RemoteAddr().String(), "maxConns", s.opts.MaxConns)
		}
		nc.Close()
		return
	}
	// Per address too: one address must not take every slot, and its
	// connections are refused here, before they cost a goroutine or a
	// buffer.
	key := auth.Key(nc.RemoteAddr())
	if s.perIP[key] >= s.opts.MaxConnsPerIP {
		s.mu.Unlock()
		s.opts.Metrics.Error(metrics.KindRefused)
		if s.sampler.sample() {
			s.log.Warn("connection refused: too many open connections from this address", "remote", nc.RemoteAddr().String(), "maxConnsPerIP", s.opts.MaxConnsPerIP)
		}
		nc.Close()
		return
	}
	s.perIP[key]++
	c := newConn(s, nc, key)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.opts.Metrics.ConnOpened()
	go c.serve()
}

func (s *Server) isShutting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutting
}

// loopWanted reports whether enough publishing connections are open for
// the epoll loop to take one over (Options.EpollMinConns).
func (s *Server) loopWanted() bool {
	return s.publishers.Load() >= int64(s.opts.EpollMinConns)
}

// setState records a connection's phase. Moving to idle or active fails once
// Shutdown has begun, which tells the connection to close: a request that
// was already being served has been answered by then.
func (s *Server) setState(c *conn, st connState) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting {
		return false
	}
	c.state = st
	return true
}

// drainRequest marks c active during Shutdown for a request whose bytes
// the server has (they must get a reply, not a reset): one already in c's
// read buffer, or one whose first byte a read returned. Reads wait for a
// first byte until DrainGrace only (the deadline Shutdown sets), but a
// connection that found one is served however late its goroutine runs:
// the whole drain is bounded by Shutdown's context.
func (s *Server) drainRequest(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.shutting {
		return false
	}
	c.state = stateActive
	return true
}

// graceEnd is when Shutdown's wait for requests on idle connections ends.
func (s *Server) graceEnd() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drainEnd
}

// DrainGrace is how long Shutdown waits for the first byte of a request on
// an idle connection: bytes already received (sent before the shutdown,
// still in the socket buffer, or pipelined behind the last request) are
// read, served and answered; connections with nothing pending close once
// it has passed.
const DrainGrace = 500 * time.Millisecond

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if c.publisher {
		s.publishers.Add(-1)
	}
	if s.perIP[c.ipKey]--; s.perIP[c.ipKey] <= 0 {
		delete(s.perIP, c.ipKey)
	}
	s.mu.Unlock()
	s.opts.Metrics.ConnClosed()
}

// Shutdown stops accepting, lets requests being served finish and get their
// replies, serves the requests already received on idle connections (those
// whose first byte arrives within DrainGrace, and requests pipelined behind
// them in the read buffer), closes subscription streams and connections
// with nothing pending, and waits for every connection to end. If ctx ends
// first, Backend calls are cancelled, all connections are closed and ctx's
// error is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	first := !s.shutting
	if first {
		s.shutting = true
		s.draining = true
		close(s.done)
		if s.ln != nil {
			if err := s.ln.Close(); err != nil {
				s.log.Warn("close listener", "err", err)
			}
		}
		if s.tlsLn != nil {
			if err := s.tlsLn.Close(); err != nil {
				s.log.Warn("close TLS listener", "err", err)
			}
		}
	}
	graceEnd := time.Now().Add(DrainGrace)
	if first {
		s.drainEnd = graceEnd
		if s.ep != nil {
			// The loop answers what it has read, then hands every
			// connection back to a goroutine, which drains it as below.
			s.ep.stop()
		}
	}
	for c := range s.conns {
		switch {
		case c.state == stateIdle && s.draining:
			// Wakes the read waiting for a first byte at the end of the
			// grace, unless a request's bytes come first.
			c.nc.SetReadDeadline(graceEnd)
		case c.state != stateActive:
			c.nc.Close()
		}
	}
	s.mu.Unlock()

	finished := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(finished)
	}()
	grace := time.NewTimer(time.Until(graceEnd))
	defer grace.Stop()
	if !first {
		grace.Stop()
	}
	for {
		select {
		case <-grace.C:
			// The deadline normally ends the idle reads; set it again
			// (in the past) in case a read re-armed its own. A read that
			// has its bytes already still returns them; a connection
			// whose goroutine found them is served (drainRequest).
			s.mu.Lock()
			s.draining = false
			past := time.Now().Add(-time.Second)
			for c := range s.conns {
				switch c.state {
				case stateIdle:
					c.nc.SetReadDeadline(past)
				case stateActive:
				default:
					c.nc.Close()
				}
			}
			s.mu.Unlock()
			continue
		case <-finished:
		case <-ctx.Done():
		}
		break
	}
	select {
	case <-finished:
		s.cancel()
		return nil
	case <-ctx.Done():
		s.cancel()
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// sampler passes 1 in every events; every == 0 passes none.
type sampler struct {
	every uint64
	n     atomic.Uint64
}

func (s *sampler) sample() bool {
	if s.every == 0 {
		return false
	}
	return (s.n.Add(1)-1)%s.every == 0
}

// startEpollLocked starts the epoll loop when Options.Epoll asks for it and
// nothing rules it out; s.mu is held.
func (s *Server) startEpollLocked() {
	if !s.opts.Epoll {
		return
	}
	var why string
	switch {
	case s.opts.Security.Auth != nil:
		why = "authentication checks every request on the connection's goroutine"
	case !epollSupported:
		why = "the epoll front-end is Linux only"
	}
	// Info, not a warning: server.epoll is on by default, and these
	// servers are served correctly from goroutines, as with the key off.
	if why != "" {
		s.log.Info("epoll loop not used (server.epoll)", "reason", why)
		return
	}
	ep, err := newEpollLoop(s)
	if err != nil {
		// A real failure (descriptors, memory): the operator asked for
		// nothing unusual, so say it loudly; connections are served
		// from goroutines.
		s.log.Warn("epoll loop not used (server.epoll): cannot start it", "err", err)
		return
	}
	s.ep = ep
	s.wg.Add(1)
	go ep.run()
	s.log.Info("serving plain connections on an epoll loop (server.epoll)")
}
