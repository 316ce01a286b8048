//go:build linux

package rawsys

import (
	"io"
	"os"
	"syscall"
)

// writeFile is os.File.Write with raw calls: it loops until p is written
// or a call fails. The file's owner calls it, so the descriptor cannot be
// closed meanwhile (Fd: a regular file is in blocking mode already).
func writeFile(f *os.File, p []byte) (int, error) {
	fd := int(f.Fd())
	done := 0
	for done < len(p) {
		k, e := WriteFd(fd, p[done:])
		done += k
		switch {
		case e == syscall.EINTR:
		case e != nil:
			return done, &os.PathError{Op: "write", Path: f.Name(), Err: e}
		case k == 0:
			return done, io.ErrShortWrite
		}
	}
	return done, nil
}

// readFileAt is os.File.ReadAt with raw calls.
func readFileAt(f *os.File, p []byte, off int64) (int, error) {
	fd := int(f.Fd())
	done := 0
	for done < len(p) {
		k, e := preadFd(fd, p[done:], off+int64(done))
		done += k
		switch {
		case e == syscall.EINTR:
		case e != nil:
			return done, &os.PathError{Op: "read", Path: f.Name(), Err: e}
		case k == 0:
			return done, io.EOF
		}
	}
	return done, nil
}
