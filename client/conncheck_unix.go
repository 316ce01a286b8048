//go:build unix

package client

import (
	"errors"
	"io"
	"net"
	"syscall"
)

var errUnexpectedData = errors.New("unexpected data on idle connection")

// peekAlive looks at an idle socket without blocking: EOF (the server closed
// it, e.g. on restart or idle timeout), pending bytes or a socket error mean
// the connection must not be used.
func peekAlive(nc net.Conn) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var result error
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, e := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0:
			result = errUnexpectedData
		case e == syscall.EAGAIN || e == syscall.EWOULDBLOCK:
			result = nil
		case e != nil:
			result = e
		default:
			result = io.EOF
		}
		// true: never park in the poller, this is a one-shot probe.
		return true
	})
	if err != nil {
		return err
	}
	return result
}
