//go:build unix && !linux

package rawsys

import "syscall"

// Enabled reports whether the calls of this package skip the scheduler:
// not here, where they are the ordinary calls.
const Enabled = false

// ReadFd is read(2) of a non-blocking descriptor, the ordinary call here.
func ReadFd(fd int, p []byte) (int, error) {
	n, err := syscall.Read(fd, p)
	return max(n, 0), err
}

// WriteFd is write(2) of a non-blocking descriptor, the ordinary call here.
func WriteFd(fd int, p []byte) (int, error) {
	n, err := syscall.Write(fd, p)
	return max(n, 0), err
}
