package server

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketPending returns the bytes received on nc's socket and not read yet
// (SIOCINQ), 0 when unknown.
func socketPending(nc net.Conn) int {
	if tc, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = tc.NetConn() // TLS: the records are in the TCP socket
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil {
			n = v
		}
	})
	return n
}
