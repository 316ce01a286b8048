package smsstest

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, and fails the test if it does not
// within d; what names the condition in the failure ("the slave to catch
// up"). cond runs on the calling goroutine, so it may use t.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Poll polls cond until it holds or d passes and reports whether it held;
// it is WaitFor for callers that handle the timeout themselves. The pause
// between polls starts at a millisecond and grows to 20 ms, so a quick
// condition is seen quickly and a slow one is not polled in a busy loop.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for !cond() {
		if !time.Now().Before(deadline) {
			return cond() // one last look: the deadline may have passed while cond ran
		}
		time.Sleep(min(pause, time.Until(deadline)+time.Millisecond))
		pause = min(2*pause, 20*time.Millisecond)
	}
	return true
}
