package admin

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
)

// capListener closes connections accepted beyond max open ones at once:
// the admin port's share of the process's file descriptors stays bounded
// however many clients connect, and the client port keeps the rest.
type capListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	log     *slog.Logger
	refused atomic.Uint64
}

func newCapListener(ln net.Listener, max int, log *slog.Logger) *capListener {
	return &capListener{Listener: ln, max: int64(max), log: log}
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &cappedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		c.Close()
		// Logged for the first refusal and then every 1000th: a flood must
		// not become a log flood.
		if n := l.refused.Add(1); n%1000 == 1 {
			l.log.Warn("admin connection refused: admin.maxConns open", "maxConns", l.max, "refused", n)
		}
	}
}

// Open is the number of open connections.
func (l *capListener) Open() int { return int(l.open.Load()) }

type cappedConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
