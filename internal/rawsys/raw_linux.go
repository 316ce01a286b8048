//go:build linux

package rawsys

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Enabled reports whether the calls of this package skip the scheduler.
const Enabled = true

// ReadFd is one raw read(2) of a non-blocking descriptor. A failed call
// returns 0 bytes (not -1) and the errno.
func ReadFd(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// WriteFd is one raw write(2) of a non-blocking descriptor.
func WriteFd(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// preadFd is one raw pread(2).
func preadFd(fd int, p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_PREAD64, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), uintptr(off), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// EpollWaitNow is one raw epoll_wait(2) with a zero timeout (it never
// blocks): the ready events of epfd, up to len(events).
func EpollWaitNow(epfd int, events []unix.EpollEvent) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	// epoll_pwait with no signal mask is epoll_wait, and exists on every
	// architecture (arm64 has no epoll_wait).
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// writevFd is one raw writev(2) of a non-blocking descriptor.
func writevFd(fd int, iov []syscall.Iovec) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
