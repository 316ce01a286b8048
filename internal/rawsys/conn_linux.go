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
		return total, c.opError("writev", err)
	case werr == io.ErrShortWrite:
		return total, c.opError("writev", werr)
	case werr != nil:
		return total, c.opError("writev", os.NewSyscallError("writev", werr))
	}
	return total, nil
}
