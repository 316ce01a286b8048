package smsstest

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes buffer that one goroutine may write (a process's
// output, a logger) while others read it. The zero value is ready to use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len returns how many bytes were written so far.
func (b *SyncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// Reset discards everything written so far.
func (b *SyncBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// WaitContains waits until the buffer contains s and fails the test, with
// the buffer's contents, if it does not within d.
func (b *SyncBuffer) WaitContains(t testing.TB, d time.Duration, s string) {
	t.Helper()
	if !Poll(d, func() bool { return strings.Contains(b.String(), s) }) {
		t.Fatalf("timed out after %v waiting for %q in:\n%s", d, s, b.String())
	}
}
