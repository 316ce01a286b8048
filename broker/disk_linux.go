package broker

import (
	"fmt"
	"github.com/smssmq/smss/internal/fsmode"
	"os"
	"syscall"
)

// statfsFree returns the bytes available to unprivileged users on the
// filesystem of dir.
func statfsFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// allocate creates path with size bytes of real blocks.
func allocate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, fsmode.File())
	if err != nil {
		return err
	}
	err = syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
