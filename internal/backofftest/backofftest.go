// Package backofftest checks retry backoff in tests by the gaps between
// attempts rather than by counting attempts in a window of wall time: a
// stalled machine can only lengthen gaps, so the check cannot flake, while
// a job that spins (gaps near zero) still fails it.
package backofftest

import (
	"sync"
	"testing"
	"time"
)

// Recorder notes when each attempt ran. Safe for concurrent use.
type Recorder struct {
	mu sync.Mutex
	at []time.Time
}

// Attempt records an attempt now; call it from the failing job.
func (r *Recorder) Attempt() {
	r.mu.Lock()
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
}

// Count is the number of attempts so far.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
}

// Expect waits (up to a minute) for n attempts, calling poke between
// checks when it is not nil (hooks that must not cut backoffs short), and
// then requires the gap after the i-th attempt to be at least the doubling
// backoff min·2^i capped at max, less a millisecond: timers never fire
// early, but schedulers that plan on a millisecond clock can round a wait
// down by up to that much.
func (r *Recorder) Expect(t *testing.T, n int, min, max time.Duration, poke func()) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for r.Count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d attempts within a minute", r.Count(), n)
		}
		if poke != nil {
			poke()
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.mu.Lock()
	at := append([]time.Time(nil), r.at[:n]...)
	r.mu.Unlock()
	want := min
	for i := 1; i < n; i++ {
		if gap := at[i].Sub(at[i-1]); gap < want-time.Millisecond {
			t.Fatalf("attempt %d came %v after the one before, want at least %v (doubling from %v, capped at %v)", i+1, gap, want, min, max)
		}
		want = minDuration(2*want, max)
	}
}

func minDuration(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}
