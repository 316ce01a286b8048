package alarm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Never is the due time of a job that has nothing scheduled.
const Never int64 = math.MaxInt64

// Job does the work due at nowMs and returns when it wants to run next
// (an absolute ms time, Never for "only when Set says so"). A next <= the
// current time asks for an immediate re-run, which the job must only do
// after making progress. An error makes the alarm back off.
type Job func(ctx context.Context, nowMs int64) (next int64, err error)

// Options configure an Alarm. Zero values take the documented defaults.
type Options struct {
	Name string // for logs
	Job  Job    // required
	// Now is the clock in ms; tests replace it. A test that moves a fake
	// clock calls Set to make the alarm look at it again.
	Now func() int64
	// FirstDelay is the time from Start to the first run; 0 means at once.
	FirstDelay time.Duration
	// MaxSleep bounds one sleep, so that a due time nobody reported is
	// still found (background.defaultScanSecond). Default 2 h.
	MaxSleep time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failed run.
	// Defaults 100 ms and 30 s.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
}

// Alarm runs one Job at the times it asks for.
type Alarm struct {
	opts  Options
	log   *slog.Logger
	armed atomic.Int64 // earliest due time known, ms
	wake  chan struct{}

	startOnce sync.Once
	stopOnce  sync.Once
	stop      chan struct{}
	done      chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc

	runs     atomic.Int64
	failures atomic.Int64
}

// New returns an alarm that is not yet running.
func New(opts Options) *Alarm {
	if opts.Now == nil {
		opts.Now = func() int64 { return time.Now().UnixMilli() }
	}
	if opts.MaxSleep <= 0 {
		opts.MaxSleep = 2 * time.Hour
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(30*time.Second, opts.MinBackoff)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Alarm{
		opts:   opts,
		log:    opts.Logger.With("job", opts.Name),
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
	a.armed.Store(Never)
	return a
}

// Start launches the goroutine, due FirstDelay from now (or earlier if Set
// says so); further calls do nothing.
func (a *Alarm) Start() {
	a.startOnce.Do(func() {
		a.Set(a.opts.Now() + a.opts.FirstDelay.Milliseconds())
		go a.loop()
	})
}

// Set asks for a run no later than atMs. It never blocks. Setting the time
// the alarm is already armed on makes it look at the clock again, which a
// test that moves a fake clock needs.
func (a *Alarm) Set(atMs int64) {
	for {
		cur := a.armed.Load()
		if atMs > cur {
			return
		}
		if atMs == cur || a.armed.CompareAndSwap(cur, atMs) {
			break
		}
	}
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Stop ends the goroutine after the run in progress, if any, and waits for
// it until ctx ends. The job's context is cancelled at once.
func (a *Alarm) Stop(ctx context.Context) error {
	a.stopOnce.Do(func() {
		close(a.stop)
		a.cancel()
		a.startOnce.Do(func() { close(a.done) }) // never started
	})
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", a.opts.Name, ctx.Err())
	}
}

// Runs returns how many times the job ran (failed runs included).
func (a *Alarm) Runs() int64 { return a.runs.Load() }

// Failures returns how many runs failed.
func (a *Alarm) Failures() int64 { return a.failures.Load() }

func (a *Alarm) loop() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	backoff := time.Duration(0)
	notBefore := int64(math.MinInt64) // end of the current backoff
	for {
		// Sleep until the earliest due time (never before the backoff ends).
		for {
			at := max(a.armed.Load(), notBefore)
			now := a.opts.Now()
			if at <= now {
				break
			}
			maxMs := max(a.opts.MaxSleep.Milliseconds(), 1)
			capped := at-now > maxMs
			timer.Reset(time.Duration(min(at-now, maxMs)) * time.Millisecond)
			select {
			case <-timer.C:
				if capped {
					a.Set(a.opts.Now()) // rescan even if nothing is known to be due
				}
			case <-a.wake:
				timer.Stop()
			case <-a.stop:
				return
			}
		}
		select {
		case <-a.stop:
			return
		default:
		}
		// From here on every Set lowers armed below Never and is kept for
		// after the run.
		a.armed.Store(Never)
		now := a.opts.Now()
		next, err := a.run(now)
		a.runs.Add(1)
		if err != nil {
			if errors.Is(err, context.Canceled) && a.ctx.Err() != nil {
				return
			}
			a.failures.Add(1)
			backoff = min(max(2*backoff, a.opts.MinBackoff), a.opts.MaxBackoff)
			notBefore = a.opts.Now() + backoff.Milliseconds()
			a.log.Warn("background job failed; retrying after backoff", "err", err, "backoff", backoff, "failures", a.failures.Load())
			a.Set(notBefore)
			continue
		}
		backoff, notBefore = 0, math.MinInt64
		a.Set(next)
	}
}

// run calls the job, turning a panic into an error (docs/protocol.md §11: a background
// goroutine never takes the process down).
func (a *Alarm) run(now int64) (next int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("background job panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("job %s panicked: %v", a.opts.Name, r)
		}
	}()
	return a.opts.Job(a.ctx, now)
}
