package delay

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/backofftest"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/meta"
)

var ctx = context.Background()

func create(t testing.TB, b *broker.Broker, name string) {
	t.Helper()
	if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

func delayPub(t testing.TB, b *broker.Broker, topic, body string, delayMs int64) int64 {
	t.Helper()
	id, err := b.PublishDelay(ctx, []byte(topic), rec(body), 1, delayMs)
	if err != nil {
		t.Fatalf("delay %s: %v", body, err)
	}
	return id
}

func TestOrder(t *testing.T) {
	e := func(trigger, id int64) meta.DelayEntry {
		return meta.DelayEntry{TriggerTime: trigger, DelayEventID: id}
	}
	ids := func(es []meta.DelayEntry) (out [][2]int64) {
		for _, x := range es {
			out = append(out, [2]int64{x.TriggerTime, x.DelayEventID})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []meta.DelayEntry
		full bool
		want [][2]int64
	}{
		// Key order puts id 256 (LE 00 01 ...) before 255 (LE ff 00 ...).
		{"ties by id, not key bytes", []meta.DelayEntry{e(5, 256), e(5, 255), e(6, 1)}, false, [][2]int64{{5, 255}, {5, 256}, {6, 1}}},
		{"full batch holds back the last ms", []meta.DelayEntry{e(5, 2), e(6, 512), e(6, 3)}, true, [][2]int64{{5, 2}}},
		{"full batch of one ms fires all", []meta.DelayEntry{e(6, 512), e(6, 3)}, true, [][2]int64{{6, 3}, {6, 512}}},
		{"empty", nil, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(order(tc.in, tc.full)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v want %v", got, tc.want)
			}
		})
	}
}

// TestFiresOnTimeAndInOrder: delays published in shuffled order with a
// far-future one pending fire at their times (the hook re-arms the timer
// early), in trigger order, each once.
func TestFiresOnTimeAndInOrder(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, nil)
	defer b.Close()
	create(t, b, "t")
	create(t, b, "u")
	var log fireLog
	s := startScheduler(t, b, Options{OnFire: log.OnFire})
	delayPub(t, b, "t", "later", 3600_000)
	smsstest.WaitFor(t, 5*time.Second, "first scan", func() bool { return s.alarm.Runs() >= 1 })

	var want []string
	for i := 0; i < 40; i++ {
		topic := []string{"t", "u"}[i%2]
		delayPub(t, b, topic, body(i), int64(1000+(i*7%40)*10))
		want = append(want, body(i))
	}
	smsstest.WaitFor(t, 10*time.Second, "40 delays fired", func() bool { return s.Fired() == 40 })
	fires := log.snapshot()
	for _, f := range fires {
		if late := f.at - f.e.TriggerTime; late < 0 || late > 500 {
			t.Errorf("delay %d fired %d ms after its trigger time", f.e.DelayEventID, late)
		}
	}
	p50, p99, worst, _ := lateness(fires)
	t.Logf("lateness p50 %d ms, p99 %d ms, max %d ms", p50, p99, worst)
	for i := 1; i < len(fires); i++ {
		a, c := fires[i-1].e, fires[i].e
		if a.TriggerTime > c.TriggerTime || (a.TriggerTime == c.TriggerTime && a.DelayEventID > c.DelayEventID) {
			t.Errorf("fire %d (%d@%d) after (%d@%d)", i, c.DelayEventID, c.TriggerTime, a.DelayEventID, a.TriggerTime)
		}
	}
	if n := pending(t, b); n != 1 {
		t.Errorf("%d delays pending, want the far-future one", n)
	}
	got := append(readTopic(t, dir, "t"), readTopic(t, dir, "u")...)
	exactlyOnce(t, got, want)
}

// TestOrderAcrossBatches: 5 trigger times × 60 delays each (delay eventIds
// cross 256, where key order and id order differ), fired in batches of 100:
// each topic receives them in (trigger, publish) order.
func TestOrderAcrossBatches(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	clk.Set(1_700_000_000_000)
	b := openBroker(t, dir, clk)
	defer b.Close()
	create(t, b, "t")
	var want []string
	for g := 4; g >= 0; g-- { // later triggers published first
		for i := 0; i < 60; i++ {
			n := g*60 + i
			delayPub(t, b, "t", body(n), int64(1000+g))
		}
	}
	for n := 0; n < 300; n++ {
		want = append(want, body(n))
	}
	clk.Set(1_700_000_002_000)
	s := startScheduler(t, b, Options{Now: clk.Now})
	smsstest.WaitFor(t, 10*time.Second, "300 delays fired", func() bool { return s.Fired() == 300 })
	got := readTopic(t, dir, "t")
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, m.Body)
	}
	if !slices.Equal(bodies, want) {
		t.Fatalf("topic order:\n%v\nwant\n%v", bodies, want)
	}
}

// TestDueWhileDownFiresAtStart: delays that fell due while no broker ran
// fire right after start, once.
func TestDueWhileDownFiresAtStart(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	clk.Set(1_700_000_000_000)
	b := openBroker(t, dir, clk)
	create(t, b, "t")
	var want []string
	for i := 0; i < 250; i++ {
		delayPub(t, b, "t", body(i), int64(1000+i))
		want = append(want, body(i))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Set(1_700_000_100_000)
	b = openBroker(t, dir, clk)
	defer b.Close()
	if n := pending(t, b); n != 250 {
		t.Fatalf("%d pending after reopen, want 250", n)
	}
	start := time.Now()
	s := startScheduler(t, b, Options{Now: clk.Now})
	smsstest.WaitFor(t, 10*time.Second, "backlog fired", func() bool { return s.Fired() == 250 })
	t.Logf("250 overdue delays fired %v after start", time.Since(start))
	exactlyOnce(t, readTopic(t, dir, "t"), want)
	if n := pending(t, b); n != 0 {
		t.Fatalf("%d pending", n)
	}
}

// TestExactlyOnceAcrossRestarts stops and reopens at the points a test can
// reach: after part of the queue fired (scheduler stopped cleanly), and
// with the broker closed under a running scheduler in the middle of a
// backlog. Every delayed message ends up published exactly once, and the
// binlog names each delay in exactly one delay-apply.
func TestExactlyOnceAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	const t0 = 1_700_000_000_000
	clk.Set(t0)
	b := openBroker(t, dir, clk)
	create(t, b, "t")
	create(t, b, "u")
	var want []string
	var ids []int64
	for i := 0; i < 1200; i++ {
		ids = append(ids, delayPub(t, b, []string{"t", "u"}[i%2], body(i), int64(1000+i)))
		want = append(want, body(i))
	}

	// 1. Fire the first 400 (due at t0+1000..t0+1399), stop, close.
	clk.Set(t0 + 1399)
	s, err := New(b, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	smsstest.WaitFor(t, 10*time.Second, "400 fired", func() bool { return s.Fired() == 400 })
	stopScheduler(t, s)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// 2. Reopen: the 400 are not fired again. Make everything due and close
	// the broker while the scheduler is in the middle of the backlog.
	b = openBroker(t, dir, clk)
	if n := pending(t, b); n != 800 {
		t.Fatalf("%d pending after the first restart, want 800", n)
	}
	clk.Set(t0 + 10_000)
	s, err = New(b, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	smsstest.WaitFor(t, 10*time.Second, "some of the backlog fired", func() bool { return s.Fired() >= 100 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	firedBefore := s.Fired()
	if firedBefore >= 800 {
		// Nothing is left to apply, so nothing can fail: a fast machine
		// fired the whole backlog between the check above and the close.
		t.Logf("the whole backlog fired before the close; the mid-backlog close was not exercised")
	} else {
		smsstest.WaitFor(t, 5*time.Second, "scheduler failing on the closed broker", func() bool { return s.Failures() >= 1 })
	}
	stopScheduler(t, s)

	// 3. Reopen and finish.
	b = openBroker(t, dir, clk)
	defer b.Close()
	if n := pending(t, b); n != 800-int(s.Fired()) {
		t.Errorf("%d pending after the second restart, want %d", n, 800-s.Fired())
	}
	s = startScheduler(t, b, Options{Now: clk.Now})
	smsstest.WaitFor(t, 10*time.Second, "queue empty", func() bool { return pending(t, b) == 0 })
	stopScheduler(t, s)

	got := append(readTopic(t, dir, "t"), readTopic(t, dir, "u")...)
	exactlyOnce(t, got, want)
	applies := binlogApplies(t, dir)
	slices.Sort(applies)
	if !slices.Equal(applies, ids) {
		t.Errorf("binlog delay-applies name %d delays (want each of %d once)", len(applies), len(ids))
	}
}

// countingBackend wraps the broker and can make ApplyDelay fail.
type countingBackend struct {
	backend
	dues, applies atomic.Int64
	failApply     atomic.Bool
	// scanTimes and applyTimes record when each call came, for backoff
	// checks.
	scanTimes, applyTimes backofftest.Recorder
}

func (c *countingBackend) ScanDelays(from, now int64, limit int) (meta.DelayPage, error) {
	c.dues.Add(1)
	c.scanTimes.Attempt()
	return c.backend.ScanDelays(from, now, limit)
}

func (c *countingBackend) ApplyDelay(ctx context.Context, topic string, value []byte) (int64, error) {
	c.applies.Add(1)
	c.applyTimes.Attempt()
	if c.failApply.Load() {
		return 0, errors.New("injected: no space left on device")
	}
	return c.backend.ApplyDelay(ctx, topic, value)
}

// TestBackoffOnApplyFailure: a failing writer makes the scheduler back off
// exponentially instead of spinning; once it recovers, every message is
// published once.
func TestBackoffOnApplyFailure(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, nil)
	defer b.Close()
	create(t, b, "t")
	var want []string
	for i := 0; i < 20; i++ {
		delayPub(t, b, "t", body(i), 1000)
		want = append(want, body(i))
	}
	be := &countingBackend{backend: brokerBackend{b}}
	be.failApply.Store(true)
	s := newScheduler(be, Options{MinBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond})
	b.SetHooks(broker.Hooks{DelayStored: s.Notify})
	s.Start()
	defer stopScheduler(t, s)
	// Hooks keep arriving during the outage; they must not cut backoffs
	// short: failures at +0, 100, 300, 700, 1100 ms at the earliest
	// (capped at 400 ms).
	be.applyTimes.Expect(t, 5, 100*time.Millisecond, 400*time.Millisecond, func() { s.Notify(time.Now().UnixMilli()) })
	be.failApply.Store(false)
	smsstest.WaitFor(t, 5*time.Second, "recovery", func() bool { return s.Fired() == 20 })
	exactlyOnce(t, readTopic(t, dir, "t"), want)
}

// TestBackoffOnClosedBroker: a scheduler left running on a closed broker
// (a shutdown in the wrong order) backs off on its failing scans.
func TestBackoffOnClosedBroker(t *testing.T) {
	b := openBroker(t, t.TempDir(), nil)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	be := &countingBackend{backend: brokerBackend{b}}
	s := newScheduler(be, Options{})
	s.Start()
	defer stopScheduler(t, s)
	be.scanTimes.Expect(t, 4, 100*time.Millisecond, 30*time.Second, nil)
}

// stuckBackend reports a due entry that no scan returns.
type stuckBackend struct{ scans backofftest.Recorder }

func (s *stuckBackend) ScanDelays(int64, int64, int) (meta.DelayPage, error) {
	s.scans.Attempt()
	return meta.DelayPage{Next: 1, HasNext: true}, nil
}
func (s *stuckBackend) ApplyDelay(context.Context, string, []byte) (int64, error) {
	return 0, errors.New("not reached")
}

func TestNoSpinOnInconsistentQueue(t *testing.T) {
	be := &stuckBackend{}
	s := newScheduler(be, Options{})
	s.Start()
	defer stopScheduler(t, s)
	be.scans.Expect(t, 4, 100*time.Millisecond, 30*time.Second, nil)
}

func TestDroppedWhenTopicGone(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	clk.Set(1_700_000_000_000)
	b := openBroker(t, dir, clk)
	defer b.Close()
	create(t, b, "t")
	delayPub(t, b, "t", "x", 1000)
	if _, err := b.DeleteTopic(ctx, []byte("t")); err != nil {
		t.Fatal(err)
	}
	clk.Set(1_700_000_005_000)
	var log fireLog
	s := startScheduler(t, b, Options{Now: clk.Now, OnFire: log.OnFire})
	smsstest.WaitFor(t, 5*time.Second, "key dropped", func() bool { return pending(t, b) == 0 })
	if s.Fired() != 0 {
		t.Fatalf("fired %d messages for a deleted topic", s.Fired())
	}
	if f := log.snapshot(); len(f) != 1 || f[0].eventID != 0 {
		t.Fatalf("fires %+v, want one with eventId 0", f)
	}
}

func TestRefusesSlave(t *testing.T) {
	b, err := broker.Open(broker.Options{Dir: t.TempDir(), Slave: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := New(b, Options{}); !errors.Is(err, ErrSlave) {
		t.Fatalf("New on a slave: %v, want ErrSlave", err)
	}
}

// TestEntryBelowTheFloor: scans start after the entries already fired
// (meta.ScanDelays), so an entry stored with an earlier trigger time (the
// clock stepped back) must still be found: through the hook at once, or
// without a hook by the periodic full rescan.
func TestEntryBelowTheFloor(t *testing.T) {
	for _, hooked := range []bool{true, false} {
		name := map[bool]string{true: "hook", false: "rescan"}[hooked]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			clk := &clock{}
			b := openBroker(t, dir, clk)
			defer b.Close()
			create(t, b, "t")
			opts := Options{Now: clk.Now}
			if !hooked {
				opts.Rescan = 300 * time.Millisecond
			}
			s := startScheduler(t, b, opts)
			delayPub(t, b, "t", "first", 1000)
			smsstest.WaitFor(t, 5*time.Second, "first fired", func() bool { return s.Fired() == 1 })
			if !hooked {
				b.SetHooks(broker.Hooks{})
			}
			clk.off.Store(-60_000) // the clock steps back a minute
			start := time.Now()    // before the publish: a late start would shorten d
			delayPub(t, b, "t", "second", 1000)
			smsstest.WaitFor(t, 5*time.Second, "second fired", func() bool { return s.Fired() == 2 })
			if d := time.Since(start); d < 900*time.Millisecond {
				t.Errorf("fired %v after publishing a 1 s delay", d)
			}
			exactlyOnce(t, readTopic(t, dir, "t"), []string{"first", "second"})
		})
	}
}
