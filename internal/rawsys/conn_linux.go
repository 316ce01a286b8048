//go:build linux

package rawsys

import (
	"io"
	"os"
	"syscall"
)

func (c Conn) readRaw(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var (
		n    int
		rerr error
	)
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = ReadFd(int(fd), p)
			switch rerr {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait for readability, then again
			}
			return true
		}
	})
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case rerr != nil:
		return 0, c.opError("read", os.NewSyscallError("read", rerr))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c Conn) writeRaw(p []byte) (int, error) {
	var (
		done int
		werr error
	)
	err := c.rc.Write(func(fd uintptr) bool {
		for done < len(p) {
			k, e := WriteFd(int(fd), p[done:])
			done += k
			switch {
			case e == syscall.EINTR:
			case e == syscall.EAGAIN:
				return false // wait for writability, then the rest
			case e != nil:
				werr = e
				return true
			case k == 0:
				werr = io.ErrShortWrite
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return done, c.opError("write", err)
	case werr == io.ErrShortWrite:
		return done, c.opError("write", werr)
	case werr != nil:
		return done, c.opError("write", os.NewSyscallError("write", werr))
	}
	return done, nil
}
