package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is raft's StreamLayer over TCP, optionally under TLS. It also
// keeps its connections so that cut can sever the node from the others, as
// a network partition would (used by the tests of the lease).
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr
	server    *tls.Config
	client    *tls.Config

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// errCut is the Dial error of a severed node.
var errCut = errors.New("cluster: raft transport cut")

func newStreamLayer(bind string, server, client *tls.Config) (*streamLayer, error) {
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
	return &streamLayer{ln: ln, advertise: addr, server: server, client: client, conns: map[net.Conn]struct{}{}}, nil
}

func (s *streamLayer) Accept() (net.Conn, error) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return nil, err
		}
		if s.server != nil {
			c = tls.Server(c, s.server)
		}
		if tc, ok := s.track(c); ok {
			return tc, nil
		}
		c.Close() // cut: refuse the peer as a partition would
	}
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
		cfg := s.client
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

func (s *streamLayer) Close() error { return s.ln.Close() }

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
