package delay

import (
	"cmp"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

// TestPrecision10k (opt-in: SMSS_LONG=1) stores 10,000 delays whose trigger
// times are spread over a window, with the scheduler running, and checks
// that they fire in order with p99 lateness within 50 ms (docs/protocol.md §11).
// Lateness is measured when ApplyDelay returned, i.e. when the message is
// committed and visible to subscribers.
func TestPrecision10k(t *testing.T) {
	if os.Getenv("SMSS_LONG") == "" {
		t.Skip("set SMSS_LONG=1 to run the 10,000-delay precision test")
	}
	for _, tc := range []struct {
		name   string
		window time.Duration
	}{
		{"spread over 10s", 10 * time.Second},
		{"burst over 2s", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { precision(t, 10_000, tc.window) })
	}
}

func precision(t *testing.T, n int, window time.Duration) {
	dir := t.TempDir()
	b := openBroker(t, dir, nil)
	defer b.Close()
	topics := []string{"p0", "p1", "p2", "p3"}
	for _, name := range topics {
		create(t, b, name)
	}
	var log fireLog
	s := startScheduler(t, b, Options{OnFire: log.OnFire})

	// Publish from 16 goroutines; triggers start 3 s from now so that the
	// whole queue is stored before the first fires.
	t0 := time.Now().UnixMilli() + 3000
	var next atomic.Int64
	var wg sync.WaitGroup
	pubStart := time.Now()
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				trigger := t0 + int64(i)*window.Milliseconds()/int64(n)
				d := max(trigger-time.Now().UnixMilli(), 1000)
				if _, err := b.PublishDelay(ctx, []byte(topics[i%len(topics)]), rec(body(i)), 1, d); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	stored := time.Since(pubStart)
	if time.Now().UnixMilli() >= t0 {
		t.Fatalf("storing %d delays took %v: the first were due before all were stored", n, stored)
	}
	smsstest.WaitFor(t, window+30*time.Second, "all fired", func() bool { return s.Fired() == int64(n) })
	fires := log.snapshot()
	p50, p99, worst, early := lateness(fires)
	t.Logf("%d delays over %v (stored in %v): lateness p50 %d ms, p99 %d ms, max %d ms, min %d ms",
		n, window, stored.Round(time.Millisecond), p50, p99, worst, early)
	if early < 0 {
		t.Errorf("a delay fired %d ms before its trigger time", -early)
	}
	if p99 > 50 {
		worst := slices.SortedFunc(slices.Values(fires), func(a, b fired) int {
			return cmp.Compare(b.at-b.e.TriggerTime, a.at-a.e.TriggerTime)
		})[:5]
		for _, f := range worst {
			t.Logf("late by %d ms: trigger t0%+d ms", f.at-f.e.TriggerTime, f.e.TriggerTime-t0)
		}
		if raceEnabled {
			t.Logf("p99 lateness %d ms over 50 ms not enforced under the race detector", p99)
		} else {
			t.Errorf("p99 lateness %d ms, want <= 50 (a loaded machine slows the writer: see the worst fires above)", p99)
		}
	}
	for i := 1; i < len(fires); i++ {
		a, c := fires[i-1].e, fires[i].e
		if a.TriggerTime > c.TriggerTime || (a.TriggerTime == c.TriggerTime && a.DelayEventID > c.DelayEventID) {
			t.Fatalf("fired out of order at %d: (%d@%d) after (%d@%d)", i, c.DelayEventID, c.TriggerTime, a.DelayEventID, a.TriggerTime)
		}
	}
	var want []string
	for i := 0; i < n; i++ {
		want = append(want, body(i))
	}
	var got []message
	for _, name := range topics {
		got = append(got, readTopic(t, dir, name)...)
	}
	exactlyOnce(t, got, want)
}
