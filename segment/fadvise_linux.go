//go:build linux

package segment

import (
	"os"

	"golang.org/x/sys/unix"
)

// fadviseDontNeed implements store.noCache. It is advisory: errors only mean
// the page cache keeps the data.
func fadviseDontNeed(f *os.File) { _ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED) }
