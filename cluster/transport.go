package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Bounds of the TLS listener's handshakes: a connection that has not
// completed its handshake within handshakeTimeout is closed, and beyond
// maxHandshakes pending ones a new connection is closed at once, so that
// a flood of idle connections neither holds raft's accept loop nor grows
// without bound.
const (
	handshakeTimeout = 10 * time.Second
	maxHandshakes    = 64
	// Refused handshakes are logged at most refusedBurst times per
	// refusedWindow; the first line of the next window counts the ones
	// left out.
	refusedBurst  = 5
	refusedWindow = 10 * time.Second
)

// streamLayer is raft's StreamLayer over TCP, optionally under TLS. It also
// keeps its connections so that cut can sever the node from the others, as
// a network partition would (used by the tests of the lease).
//
// Under TLS, Accept returns only connections whose handshake succeeded
// (with the server configuration's client verification): the handshakes
// run in their own goroutines, so raft never reads a byte from, nor logs
// as accepted, a peer the configuration does not admit; each refusal is
// logged here (rate-limited).
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr
	server    *tls.Config
	client    func() *tls.Config // nil: plain TCP
	log       *slog.Logger

	accepted chan net.Conn // TLS: handshaken connections
	acceptE  chan error    // TLS: the listener's final error
	closed   chan struct{}
	closeMu  sync.Once
	pending  atomic.Int64 // TLS handshakes in progress

	refusedMu     sync.Mutex
	refusedSince  time.Time // the start of the current log window
	refusedLogged int       // lines written in that window
	refusedQuiet  int       // refusals not logged since the last line

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// errCut is the Dial error of a severed node.
var errCut = errors.New("cluster: raft transport cut")

// newStreamLayer listens on bind. server and client, both set or both
// nil, put the transport under TLS; client is called at every dial (a
// reload takes effect on the next connection).
func newStreamLayer(bind string, server *tls.Config, client func() *tls.Config, logger *slog.Logger) (*streamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft listen: %w", err)
	}
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok || addr.IP.IsUnspecified() {
		// The address is what the others dial: 0.0.0.0 would not reach us.
		ln.Close()
		return nil, fmt.Errorf("cluster: raft address %s is not one the other nodes can dial", bind)
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &streamLayer{ln: ln, advertise: addr, server: server, client: client, log: logger,
		closed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	if server != nil {
		s.accepted = make(chan net.Conn)
		s.acceptE = make(chan error, 1)
		go s.acceptTLS()
	}
	return s, nil
}

func (s *streamLayer) Accept() (net.Conn, error) {
	for {
		var c net.Conn
		if s.server == nil {
			var err error
			if c, err = s.ln.Accept(); err != nil {
				return nil, err
			}
		} else {
			select {
			case c = <-s.accepted:
			case err := <-s.acceptE:
				s.acceptE <- err // every later Accept fails the same way
				return nil, err
			}
		}
		if tc, ok := s.track(c); ok {
			return tc, nil
		}
		c.Close() // cut: refuse the peer as a partition would
	}
}

// acceptTLS accepts TCP connections and hands each to a handshake.
func (s *streamLayer) acceptTLS() {
	var delay time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.closed:
			default:
				if !errors.Is(err, net.ErrClosed) {
					// A transient failure (out of descriptors): retry, as
					// raft's own accept loop does, rather than stop
					// accepting for good.
					delay = min(max(2*delay, 5*time.Millisecond), time.Second)
					s.log.Warn("cluster: raft transport accept failed; retrying", "err", err, "retryIn", delay)
					select {
					case <-time.After(delay):
						continue
					case <-s.closed:
					}
				}
			}
			s.acceptE <- err
			return
		}
		delay = 0
		if s.pending.Add(1) > maxHandshakes {
			s.pending.Add(-1)
			s.refuse(c, errors.New("too many TLS handshakes in progress"))
			continue
		}
		go s.handshake(c)
	}
}

func (s *streamLayer) handshake(c net.Conn) {
	defer s.pending.Add(-1)
	tc := tls.Server(c, s.server)
	tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		s.refuse(c, err)
		return
	}
	tc.SetDeadline(time.Time{})
	select {
	case s.accepted <- tc:
	case <-s.closed:
		tc.Close()
	}
}

// refuse closes c and logs why, at most refusedBurst times per
// refusedWindow.
func (s *streamLayer) refuse(c net.Conn, why error) {
	c.Close()
	s.refusedMu.Lock()
	now := time.Now()
	if now.Sub(s.refusedSince) >= refusedWindow {
		s.refusedSince, s.refusedLogged = now, 0
	}
	if s.refusedLogged >= refusedBurst {
		s.refusedQuiet++
		s.refusedMu.Unlock()
		return
	}
	s.refusedLogged++
	quiet := s.refusedQuiet
	s.refusedQuiet = 0
	s.refusedMu.Unlock()
	attrs := []any{"remote", c.RemoteAddr().String(), "err", why}
	if quiet > 0 {
		attrs = append(attrs, "notLogged", quiet)
	}
	s.log.Warn("cluster: refused a connection to the raft port: its TLS handshake failed (a peer without a certificate the cluster's CA signed, or not TLS at all)", attrs...)
}

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	s.mu.Lock()
	cut := s.cut
	s.mu.Unlock()
	if cut {
		return nil, errCut
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	if s.client != nil {
		cfg := s.client()
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(string(address))
		}
		tc := tls.Client(c, cfg)
		tc.SetDeadline(time.Now().Add(timeout))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("cluster: raft TLS handshake with %s: %w", address, err)
		}
		tc.SetDeadline(time.Time{})
		c = tc
	}
	if tc, ok := s.track(c); ok {
		return tc, nil
	}
	c.Close()
	return nil, errCut
}

func (s *streamLayer) track(c net.Conn) (net.Conn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return nil, false
	}
	s.conns[c] = struct{}{}
	return &trackedConn{Conn: c, s: s}, true
}

// setCut severs (true) or restores (false) every raft connection of this
// node, both ways.
func (s *streamLayer) setCut(cut bool) {
	s.mu.Lock()
	s.cut = cut
	var open []net.Conn
	if cut {
		for c := range s.conns {
			open = append(open, c)
		}
	}
	s.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

func (s *streamLayer) Close() error {
	s.closeMu.Do(func() { close(s.closed) })
	return s.ln.Close()
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }

type trackedConn struct {
	net.Conn
	s    *streamLayer
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c.Conn)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}

// peerAddrs makes raft dial each peer at the address this node's
// configuration gives for it, not at the one stored in the raft
// configuration: the stored one was written once, at bootstrap, by
// whichever node's configuration it came from (and a snapshot installed by
// the leader carries the leader's view), while how this node reaches
// another (a NAT, a proxy, a renamed host) is this node's own setting. A
// peer the configuration does not name is dialled at its stored address.
type peerAddrs struct{ o *Options }

func (p peerAddrs) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if peer, ok := p.o.peer(string(id)); ok {
		return raft.ServerAddress(peer.Raft), nil
	}
	return "", fmt.Errorf("cluster: no configured address for peer %q", id)
}
