package config

import (
	"fmt"
	"runtime"
)

// ServerSection is the server.* section: how the client listener serves
// connections (issue 24).
type ServerSection struct {
	// Epoll serves plain (non-TLS) publishing connections on one epoll loop
	// thread instead of a goroutine each while they publish (server/
	// epoll_linux.go); everything else the loop hands back to the usual
	// goroutine. Linux only.
	Epoll bool `yaml:"epoll"`
	// MaxProcs is the server's GOMAXPROCS (maxprocs.go); 0 keeps Go's
	// default (every core the process may use).
	MaxProcs int `yaml:"maxProcs"`
}

func (c *Config) validateServer(v *validator) {
	if c.Server.Epoll && runtime.GOOS != "linux" {
		v.add(fmt.Sprintf("server.epoll must be false on %s (the epoll front-end is Linux only)", runtime.GOOS))
	}
	c.validateMaxProcs(v)
}
