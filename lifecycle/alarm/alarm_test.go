package alarm

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/backofftest"
	"github.com/smssmq/smss/internal/smsstest"
)

func nowMs() int64 { return time.Now().UnixMilli() }

func stop(t *testing.T, a *Alarm) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRunsAtRequestedTimes(t *testing.T) {
	var times []int64
	var n atomic.Int64
	start := nowMs()
	a := New(Options{Name: "t", Job: func(_ context.Context, now int64) (int64, error) {
		times = append(times, now)
		n.Add(1)
		if len(times) < 3 {
			return now + 60, nil
		}
		return Never, nil
	}})
	a.Start()
	defer stop(t, a)
	smsstest.WaitFor(t, 5*time.Second, "3 runs", func() bool { return n.Load() >= 3 })
	stop(t, a)
	// The upper bounds only allow for a loaded machine (a second); the
	// bug they catch is sleeping until MaxSleep (2 h).
	if times[0]-start > 1000 {
		t.Errorf("first run %d ms after start, want at once", times[0]-start)
	}
	for i := 1; i < 3; i++ {
		if gap := times[i] - times[i-1]; gap < 60 || gap > 1000 {
			t.Errorf("run %d came %d ms after the previous one, want 60..1000", i, gap)
		}
	}
}

func TestSetWakesEarlyAndIsKeptDuringARun(t *testing.T) {
	inRun := make(chan struct{})
	release := make(chan struct{})
	var runs, ranAt atomic.Int64
	a := New(Options{Name: "t", Job: func(_ context.Context, now int64) (int64, error) {
		ranAt.Store(now)
		if runs.Add(1) == 1 {
			close(inRun)
			<-release
		}
		return Never, nil
	}})
	a.Start()
	defer stop(t, a)
	<-inRun
	// A due time reported while the job runs must not be lost, although
	// the job itself returns Never.
	a.Set(nowMs())
	close(release)
	smsstest.WaitFor(t, 2*time.Second, "second run", func() bool { return runs.Load() >= 2 })

	// A later Set wakes the sleeping alarm at that time, not earlier.
	at := nowMs() + 80
	a.Set(at)
	a.Set(at + 1000) // a later time does not postpone it
	smsstest.WaitFor(t, 5*time.Second, "third run", func() bool { return runs.Load() >= 3 })
	// Timed by the run itself, not when this goroutine notices it. The
	// later Set winning would give 1000; up to 600 is a loaded machine's
	// delay.
	if d := ranAt.Load() - at; d < 0 || d > 600 {
		t.Errorf("third run %d ms from the requested time", d)
	}
}

func TestBackoffDoesNotSpin(t *testing.T) {
	var rec backofftest.Recorder
	a := New(Options{Name: "t", Job: func(_ context.Context, now int64) (int64, error) {
		rec.Attempt()
		return 0, errors.New("disk on fire")
	}})
	a.Start()
	defer stop(t, a)
	// Hooks keep reporting due work; they must not cut the backoff short:
	// runs at 0, 100, 300, 700 ms at the earliest.
	rec.Expect(t, 4, 100*time.Millisecond, 30*time.Second, func() { a.Set(nowMs()) })
	stop(t, a)
	if got := int64(rec.Count()); a.Failures() != got {
		t.Errorf("failures %d, runs %d", a.Failures(), got)
	}
}

// backoffLog keeps the backoff of each "retrying after backoff" record: the
// wait the alarm chose, which wall-clock gaps on a loaded machine only
// bound from below.
type backoffLog struct {
	mu  sync.Mutex
	got []time.Duration
}

func (l *backoffLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *backoffLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "backoff" && a.Value.Kind() == slog.KindDuration {
			l.mu.Lock()
			l.got = append(l.got, a.Value.Duration())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *backoffLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *backoffLog) WithGroup(string) slog.Handler      { return l }

func (l *backoffLog) backoffs() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

func TestBackoffResetsAfterSuccessAndCapsAtMax(t *testing.T) {
	var runs atomic.Int64
	var stamps [20]int64
	var log backoffLog
	a := New(Options{Name: "t", MinBackoff: 100 * time.Millisecond, MaxBackoff: 800 * time.Millisecond, Logger: slog.New(&log),
		Job: func(_ context.Context, now int64) (int64, error) {
			i := runs.Add(1) - 1
			if i < int64(len(stamps)) {
				stamps[i] = now
			}
			if i == 5 {
				return now, nil // success: the next failure starts from MinBackoff again
			}
			if i >= 9 {
				return Never, nil
			}
			return 0, errors.New("fail")
		}})
	a.Start()
	defer stop(t, a)
	// 3 s of backoffs in all; the deadline is for a loaded machine.
	smsstest.WaitFor(t, 20*time.Second, "10 runs", func() bool { return runs.Load() >= 10 })
	stop(t, a)
	// Failures at runs 0..4 wait 100, 200, 400, 800, 800 ms (capped). Run 5
	// succeeds and asks for an immediate re-run; failures 6..8 start from
	// MinBackoff again.
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 800 * ms, 100 * ms, 200 * ms, 400 * ms}
	if got := log.backoffs(); !slices.Equal(got, want) {
		t.Errorf("backoffs %v, want %v", got, want)
	}
	// And each wait was served: the gap before a run is at least the wait
	// after the one before (0 after the success). Scheduling delays only
	// lengthen gaps, so there is no upper bound to flake.
	gaps := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 800 * ms, 0, 100 * ms, 200 * ms, 400 * ms}
	for i, w := range gaps {
		if g := stamps[i+1] - stamps[i]; g < w.Milliseconds() {
			t.Errorf("gap before run %d: %d ms, want at least %d", i+1, g, w.Milliseconds())
		}
	}
}

func TestPanicIsAFailure(t *testing.T) {
	var runs atomic.Int64
	a := New(Options{Name: "t", MinBackoff: 5 * time.Millisecond, Job: func(_ context.Context, now int64) (int64, error) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		return Never, nil
	}})
	a.Start()
	defer stop(t, a)
	smsstest.WaitFor(t, 2*time.Second, "run after the panic", func() bool { return runs.Load() >= 2 })
	if a.Failures() != 1 {
		t.Errorf("failures %d, want 1", a.Failures())
	}
}

func TestMaxSleepRescans(t *testing.T) {
	var runs atomic.Int64
	a := New(Options{Name: "t", MaxSleep: 30 * time.Millisecond, Job: func(_ context.Context, now int64) (int64, error) {
		runs.Add(1)
		return Never, nil
	}})
	a.Start()
	defer stop(t, a)
	smsstest.WaitFor(t, 2*time.Second, "rescans", func() bool { return runs.Load() >= 4 })
}

func TestFirstRunAndFakeClock(t *testing.T) {
	var clock atomic.Int64
	clock.Store(1_000_000)
	var ranAt atomic.Int64
	a := New(Options{Name: "t", Now: clock.Load, FirstDelay: 500 * time.Millisecond, Job: func(_ context.Context, now int64) (int64, error) {
		ranAt.Store(now)
		return Never, nil
	}})
	a.Start()
	defer stop(t, a)
	// The fake clock stands still: nothing runs although real time passes
	// (the alarm sleeps up to 500 real ms, then looks again).
	time.Sleep(20 * time.Millisecond)
	if ranAt.Load() != 0 {
		t.Fatal("ran before its first due time")
	}
	clock.Store(1_000_500)
	a.Set(1_000_500) // a test moving the clock tells the alarm to look
	smsstest.WaitFor(t, 2*time.Second, "run at the fake due time", func() bool { return ranAt.Load() == 1_000_500 })
}

func TestStop(t *testing.T) {
	t.Run("before start", func(t *testing.T) {
		a := New(Options{Name: "t", Job: func(context.Context, int64) (int64, error) { return Never, nil }})
		stop(t, a)
		a.Start() // no effect after Stop
		stop(t, a)
	})
	t.Run("cancels a running job", func(t *testing.T) {
		inRun := make(chan struct{})
		var sawCancel atomic.Bool
		a := New(Options{Name: "t", Job: func(ctx context.Context, _ int64) (int64, error) {
			close(inRun)
			<-ctx.Done()
			sawCancel.Store(true)
			return 0, ctx.Err()
		}})
		a.Start()
		<-inRun
		stop(t, a)
		if !sawCancel.Load() {
			t.Fatal("job context not cancelled")
		}
		if a.Failures() != 0 {
			t.Errorf("a run cancelled by Stop counted as failure")
		}
	})
	t.Run("deadline", func(t *testing.T) {
		inRun := make(chan struct{})
		release := make(chan struct{})
		a := New(Options{Name: "t", Job: func(ctx context.Context, _ int64) (int64, error) {
			close(inRun)
			<-release // ignores ctx
			return Never, nil
		}})
		a.Start()
		<-inRun
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := a.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop with a stuck job: %v, want deadline exceeded", err)
		}
		close(release)
		stop(t, a)
	})
}
