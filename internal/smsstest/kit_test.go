package smsstest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeT records a failure instead of failing the real test; Fatal ends
// the goroutine, as testing's does.
type fakeT struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeT) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// failure runs fn with a fake test and returns its failure message, or ""
// if fn did not fail.
func failure(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

func TestWaitFor(t *testing.T) {
	start := time.Now()
	if msg := failure(t, func(tb testing.TB) {
		WaitFor(tb, 5*time.Second, "the clock", func() bool { return time.Since(start) > 30*time.Millisecond })
	}); msg != "" {
		t.Fatalf("a condition that comes true failed: %s", msg)
	}
	calls := 0
	msg := failure(t, func(tb testing.TB) {
		WaitFor(tb, 50*time.Millisecond, "the impossible", func() bool { calls++; return false })
	})
	if !strings.Contains(msg, "the impossible") || !strings.Contains(msg, "50ms") {
		t.Errorf("timeout message %q does not name what and how long", msg)
	}
	if calls < 3 {
		t.Errorf("cond polled %d times in 50 ms", calls)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("WaitFor took %v", took)
	}
}

func TestPollSeesLastChance(t *testing.T) {
	// A condition that comes true while the deadline passes still counts.
	n := 0
	if !Poll(0, func() bool { n++; return n > 1 }) {
		t.Error("Poll did not look again after the deadline")
	}
}

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				fmt.Fprintf(&b, "w%d;", i)
				_ = b.String()
			}
		}()
	}
	go func() {
		wg.Wait()
		b.Write([]byte("end"))
	}()
	b.WaitContains(t, 10*time.Second, "end")
	if got := strings.Count(b.String(), ";"); got != 800 {
		t.Errorf("%d writes kept, want 800", got)
	}
	if b.Len() != len(b.String()) {
		t.Errorf("Len %d, String has %d bytes", b.Len(), len(b.String()))
	}
	msg := failure(t, func(tb testing.TB) { b.WaitContains(tb, 20*time.Millisecond, "never") })
	if !strings.Contains(msg, `"never"`) || !strings.Contains(msg, "end") {
		t.Errorf("timeout message %q lacks the awaited text or the buffer", msg)
	}
	b.Reset()
	if b.String() != "" {
		t.Errorf("after Reset: %q", b.String())
	}
}
