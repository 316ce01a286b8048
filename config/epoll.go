package config

import "fmt"

// ServerSection is the server.* section: how the client listener serves
// connections (issue 24).
type ServerSection struct {
	// Epoll serves plain (non-TLS) publishing connections on one epoll loop
	// thread instead of a goroutine each while they publish (server/
	// epoll_linux.go); everything else the loop hands back to the usual
	// goroutine. Linux only: elsewhere the server logs that it is not used.
	Epoll bool `yaml:"epoll"`
	// EpollMinConns is how many open connections must have published before
	// the loop takes a connection over; below it every connection keeps its
	// goroutine (0: the loop takes them from the first).
	EpollMinConns int `yaml:"epollMinConns"`
	// MaxProcs is the server's GOMAXPROCS (maxprocs.go); 0 keeps Go's
	// default (every core the process may use).
	MaxProcs int `yaml:"maxProcs"`
}

func (c *Config) validateServer(v *validator) {
	if n := c.Server.EpollMinConns; n < 0 || n > EpollMinConnsLimit {
		v.add(fmt.Sprintf("server.epollMinConns must be between 0 and %d (got %d)", EpollMinConnsLimit, n))
	}
	c.validateMaxProcs(v)
}

// EpollMinConnsLimit bounds server.epollMinConns: limit.maxConns' own
// order of magnitude; a larger value would turn the loop off in effect,
// which server.epoll: false says plainly.
const EpollMinConnsLimit = 1000000
