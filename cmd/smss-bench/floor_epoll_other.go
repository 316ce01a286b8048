//go:build !linux

package main

import (
	"errors"
	"io"
	"net"
)

// floorEpoll needs Linux's epoll; elsewhere --epoll is refused.
type floorEpoll struct{}

func (f *floorServer) startEpoll(io.Writer) error {
	return errors.New("--epoll needs Linux")
}

func (e *floorEpoll) add(c net.Conn) { c.Close() }
func (e *floorEpoll) stop()          {}
