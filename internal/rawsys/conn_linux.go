//go:build linux

package rawsys

import (
	"io"
	"net"
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
			if again, stop := wrote(k, e, &werr); stop {
				return !again // again: wait for writability, then the rest
			}
		}
		return true
	})
	return done, c.writeError("write", err, werr)
}

func (c Conn) tryWriteRaw(p []byte) (int, error) {
	var (
		done int
		werr error
	)
	err := c.rc.Write(func(fd uintptr) bool {
		for done < len(p) {
			k, e := WriteFd(int(fd), p[done:])
			done += k
			if _, stop := wrote(k, e, &werr); stop {
				return true // full (again) or failed: no waiting either way
			}
		}
		return true
	})
	return done, c.writeError("write", err, werr)
}

// wrote judges one raw write call that wrote k bytes with errno e: stop
// the loop (and, with again, wait for writability before the rest), or go
// on; a failure goes to *werr.
func wrote(k int, e error, werr *error) (again, stop bool) {
	switch {
	case e == syscall.EINTR:
		return false, false
	case e == syscall.EAGAIN:
		return true, true
	case e != nil:
		*werr = e
		return false, true
	case k == 0:
		*werr = io.ErrShortWrite
		return false, true
	}
	return false, false
}

// writeError is the error of a write that ended with the poller's err or
// the call's werr, as net.Conn gives it.
func (c Conn) writeError(op string, err, werr error) error {
	switch {
	case err != nil:
		return c.opError(op, err)
	case werr == io.ErrShortWrite:
		return c.opError(op, werr)
	case werr != nil:
		return c.opError(op, os.NewSyscallError(op, werr))
	}
	return nil
}

// maxIovecs bounds one writev's buffers (the kernel's IOV_MAX).
const maxIovecs = 1024

func (c Conn) writeBuffersRaw(bufs *net.Buffers) (int64, error) {
	var (
		total int64
		werr  error
		iov   []syscall.Iovec
	)
	err := c.rc.Write(func(fd uintptr) bool {
		for len(*bufs) > 0 {
			iov = iov[:0]
			for _, b := range *bufs {
				if len(b) == 0 {
					continue
				}
				v := syscall.Iovec{Base: &b[0]}
				v.SetLen(len(b))
				if iov = append(iov, v); len(iov) == maxIovecs {
					break
				}
			}
			if len(iov) == 0 {
				*bufs = (*bufs)[:0]
				return true
			}
			k, e := writevFd(int(fd), iov)
			total += int64(k)
			consume(bufs, int64(k))
			if again, stop := wrote(k, e, &werr); stop {
				return !again // again: wait for writability, then the rest
			}
		}
		return true
	})
	return total, c.writeError("writev", err, werr)
}
