// Package rchar lets tests bound what an operation costs in reads: the
// bytes this process has read through read syscalls (rchar in
// /proc/self/io), page cache included, so a deterministic limit catches
// read amplification that a timing threshold would only catch on a slow
// disk.
package rchar

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// Read returns the process's rchar; it skips the test where /proc/self/io
// is not available.
func Read(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("rchar %q: %v", v, err)
			}
			return n
		}
	}
	t.Skip("no rchar in /proc/self/io")
	return 0
}
