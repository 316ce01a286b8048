package replication

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

func newTestTracker(t testing.TB, need int, degrade bool) *SyncTracker {
	return newTestTrackerLast(t, need, degrade, time.Second, func() int64 { return 0 })
}

func newTestTrackerLast(t testing.TB, need int, degrade bool, timeout time.Duration, last func() int64) *SyncTracker {
	t.Helper()
	tr, err := NewSyncTracker(SyncOptions{Slaves: need, Timeout: timeout, Degrade: degrade, LastEventID: last, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// waitAsync starts tr.Wait(id) and returns its result channel.
func waitAsync(tr *SyncTracker, ctx context.Context, id int64) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- tr.Wait(ctx, id) }()
	return ch
}

func hello(id byte, pos int64) Confirm {
	return Confirm{Kind: ConfirmHello, Instance: [6]byte{id}, EventID: pos}
}

func expectPending(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned early: %v", what, err)
	case <-time.After(30 * time.Millisecond):
	}
}

func expectDone(t *testing.T, ch <-chan error, want error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

func waitWaiting(t *testing.T, tr *SyncTracker, n int64) {
	t.Helper()
	smsstest.WaitFor(t, 10*time.Second, "waiters", func() bool { in, _ := tr.Info(); return in.Waiting == n })
}

// TestSyncWaitCounts: a write is released exactly when syncSlaves distinct
// slaves have confirmed it, in eventId order.
func TestSyncWaitCounts(t *testing.T) {
	ctx := context.Background()
	tr := newTestTracker(t, 2, false)
	w5, w9 := waitAsync(tr, ctx, 5), waitAsync(tr, ctx, 9)
	waitWaiting(t, tr, 2)
	a := tr.register("a", tr.streams.Add(1), hello(1, 9), nil)
	expectPending(t, w5, "one slave of two")
	b := tr.register("b", tr.streams.Add(1), hello(2, 4), nil)
	expectPending(t, w5, "second slave below")
	b.confirm(7, false, 0, false)
	expectDone(t, w5, nil, "5 with both slaves at >= 7")
	expectPending(t, w9, "9 with one slave at 7")
	// The same instance reconnecting does not count twice.
	tr.register("a2", tr.streams.Add(1), hello(1, 9), nil)
	expectPending(t, w9, "9 with one slave counted twice")
	if in, _ := tr.Info(); in.Confirming != 2 || in.Confirmed != 7 {
		t.Fatalf("info %+v", in)
	}
	a.confirm(12, false, 0, false) // superseded: ignored
	if in, _ := tr.Info(); in.Confirmed != 7 {
		t.Fatalf("a superseded connection moved the position: %+v", in)
	}
	b.confirm(9, true, 0, false)
	expectDone(t, w9, nil, "9")
	if err := tr.Wait(ctx, 9); err != nil {
		t.Fatalf("already confirmed: %v", err)
	}
	b.remove()
	if in, _ := tr.Info(); in.Confirming != 1 || in.Confirmed != 0 {
		t.Fatalf("after a slave left: %+v", in)
	}
}

// TestSyncFailTimeout: too few confirmations in time answer the C4 text as
// a business error, within the timeout.
func TestSyncFailTimeout(t *testing.T) {
	tr := newTestTrackerLast(t, 1, false, 150*time.Millisecond, func() int64 { return 3 })
	tr.register("silent", tr.streams.Add(1), hello(1, 2), nil)
	start := time.Now()
	err := tr.Wait(context.Background(), 3)
	took := time.Since(start)
	if !errors.Is(err, ErrNotConfirmed) || !protocol.IsBizError(err) {
		t.Fatalf("error %v (%T)", err, err)
	}
	const want = "write not confirmed by 1 slave(s) within 150 ms; it is stored on the master and may still be replicated"
	if err.Error() != want {
		t.Fatalf("text %q, want %q", err, want)
	}
	if took < 150*time.Millisecond || took > 5*time.Second {
		t.Fatalf("answered after %v", took)
	}
	if in, _ := tr.Info(); in.TimeoutsFail != 1 || in.Waiting != 0 || in.Degraded {
		t.Fatalf("info %+v", in)
	}
}

func TestSyncContextAndTrivialCases(t *testing.T) {
	var nilTracker *SyncTracker
	if err := nilTracker.Wait(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	if err := newTestTracker(t, 0, false).Wait(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	tr := newTestTracker(t, 1, false)
	if err := tr.Wait(context.Background(), 0); err != nil {
		t.Fatalf("eventId 0: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := waitAsync(tr, ctx, 4)
	waitWaiting(t, tr, 1)
	cancel()
	expectDone(t, ch, context.Canceled, "cancelled wait")
	if in, _ := tr.Info(); in.Waiting != 0 || in.TimeoutsFail != 0 {
		t.Fatalf("info %+v", in)
	}
	// The cancelled waiter is gone from the heap: a confirmation is fine.
	tr.register("a", tr.streams.Add(1), hello(1, 4), nil)
}

// TestSyncDegrade: a timeout answers 200, releases the other waiters,
// answers later writes at once, and synchronous mode comes back once the
// slave confirmed the master's last eventId.
func TestSyncDegrade(t *testing.T) {
	var last atomic.Int64
	last.Store(10)
	tr := newTestTrackerLast(t, 1, true, 100*time.Millisecond, last.Load)
	ctx := context.Background()
	s := tr.register("a", tr.streams.Add(1), hello(1, 2), nil)
	w10 := waitAsync(tr, ctx, 10)
	waitWaiting(t, tr, 1)
	w8 := waitAsync(tr, ctx, 8) // released with w10's timeout
	expectDone(t, w10, nil, "degrade timeout")
	expectDone(t, w8, nil, "released by the degrade")
	in, _ := tr.Info()
	if !in.Degraded || in.TimeoutsDegrade < 1 || in.Unconfirmed != 2 || in.Degradations != 1 {
		t.Fatalf("info %+v", in)
	}
	start := time.Now()
	if err := tr.Wait(ctx, 11); err != nil || time.Since(start) > 50*time.Millisecond {
		t.Fatalf("degraded wait: %v after %v", err, time.Since(start))
	}
	s.confirm(9, false, 0, false)
	if !tr.Degraded() {
		t.Fatal("recovered before catching up")
	}
	s.confirm(10, false, 0, false)
	if tr.Degraded() {
		t.Fatal("still degraded after the slave confirmed the master's last eventId")
	}
	last.Store(12)
	w12 := waitAsync(tr, ctx, 12)
	expectPending(t, w12, "synchronous again")
	s.confirm(12, false, 0, false)
	expectDone(t, w12, nil, "12")
}

// TestStreamUrgency: a confirming slave's stream sends at once on a
// semi-synchronous master (no linger), lingers again while degraded, and
// never matters without semi-sync or for a non-confirming slave.
func TestStreamUrgency(t *testing.T) {
	var nilState *confirmState
	if nilState.urgent() {
		t.Fatal("no semi-sync: urgent")
	}
	feedHello := func(tr *SyncTracker) *confirmState {
		c := newConfirmState(tr, "s", func() int64 { return 10 }, nil, quiet)
		c.feed(AppendConfirm(nil, hello(1, 10)))
		return c
	}
	async := newTestTracker(t, 0, false)
	if feedHello(async).urgent() {
		t.Fatal("syncSlaves 0: urgent")
	}
	tr := newTestTrackerLast(t, 2, true, 50*time.Millisecond, func() int64 { return 20 })
	foreign := newConfirmState(tr, "f", func() int64 { return 10 }, nil, quiet)
	foreign.feed([]byte{0, 0})
	if foreign.urgent() {
		t.Fatal("non-confirming slave: urgent")
	}
	c := feedHello(tr)
	if !c.urgent() {
		t.Fatal("confirming slave on a semi-sync master: not urgent")
	}
	if err := tr.Wait(context.Background(), 20); err != nil { // times out: degraded
		t.Fatal(err)
	}
	if c.urgent() {
		t.Fatal("degraded: still urgent")
	}
}
