package delay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/lifecycle/alarm"
	"github.com/smssmq/smss/meta"
)

// DefaultBatch is how many due entries one scan reads.
const DefaultBatch = 100

// ErrSlave is returned by New for a broker that runs as a slave: delays are
// only fired by a master.
var ErrSlave = errors.New("delay: the scheduler runs on a master only")

// backend is what the scheduler needs from the broker; tests wrap it.
type backend interface {
	ScanDelays(fromMs, nowMs int64, limit int) (meta.DelayPage, error)
	ApplyDelay(ctx context.Context, topic string, value []byte) (int64, error)
}

type brokerBackend struct{ b *broker.Broker }

func (bb brokerBackend) ScanDelays(from, now int64, limit int) (meta.DelayPage, error) {
	return bb.b.ScanDelays(from, now, limit)
}

func (bb brokerBackend) ApplyDelay(ctx context.Context, topic string, value []byte) (int64, error) {
	return bb.b.ApplyDelay(ctx, topic, value)
}

// Options configure a Scheduler. Zero values take the documented defaults.
type Options struct {
	// Batch is the number of due entries read per scan, default 100.
	Batch int
	// FirstRun is the time from Start to the first scan, which fires what
	// fell due while the server was down (background.firstExecSecond);
	// 0 means at once. A delay due earlier than that still fires on time.
	FirstRun time.Duration
	// Rescan bounds how long the scheduler sleeps when it knows of nothing
	// due (background.defaultScanSecond), default 2 h. The DelayStored hook
	// makes it unnecessary; it only covers a missed hook.
	Rescan time.Duration
	// MinBackoff and MaxBackoff bound the wait after an error, default
	// 100 ms and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// Now is the clock in ms, default the wall clock. It must agree with the
	// broker's clock, which computed the trigger times.
	Now    func() int64
	Logger *slog.Logger
	// OnFire, if set, is called after each delayed message was published
	// (eventID is 0 when the key was already gone or its topic was). Tests
	// and benchmarks measure precision with it.
	OnFire func(e meta.DelayEntry, eventID, firedAtMs int64)
}

// Scheduler fires due delayed messages through the broker's writer.
type Scheduler struct {
	be    backend
	opts  Options
	log   *slog.Logger
	alarm *alarm.Alarm
	fired atomic.Int64

	// low is the earliest trigger time notified since the last scan began
	// (math.MaxInt64: none). floor and lastFull belong to the job: every
	// entry with a trigger time below floor has been fired, except those
	// notified through low, so scans start there (see meta.ScanDelays).
	low      atomic.Int64
	floor    int64
	lastFull int64
}

// New returns a scheduler for b that is not yet running. It refuses a
// slave broker.
func New(b *broker.Broker, opts Options) (*Scheduler, error) {
	if b.IsSlave() {
		return nil, ErrSlave
	}
	return newScheduler(brokerBackend{b}, opts), nil
}

func newScheduler(be backend, opts Options) *Scheduler {
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = func() int64 { return time.Now().UnixMilli() }
	}
	if opts.Rescan <= 0 {
		opts.Rescan = 2 * time.Hour
	}
	s := &Scheduler{be: be, opts: opts, log: opts.Logger}
	s.low.Store(math.MaxInt64)
	s.alarm = alarm.New(alarm.Options{
		Name: "delay", Job: s.fire, Now: opts.Now, MaxSleep: opts.Rescan, FirstDelay: opts.FirstRun,
		MinBackoff: opts.MinBackoff, MaxBackoff: opts.MaxBackoff, Logger: opts.Logger,
	})
	return s
}

// Start begins firing; entries already due fire after Options.FirstRun.
func (s *Scheduler) Start() { s.alarm.Start() }

// Stop ends the scheduler after the message being fired, waiting until ctx
// ends. Call it before closing the broker.
func (s *Scheduler) Stop(ctx context.Context) error { return s.alarm.Stop(ctx) }

// Notify tells the scheduler that a delayed message is due at triggerMs
// (the broker's DelayStored hook). It never blocks.
func (s *Scheduler) Notify(triggerMs int64) {
	for {
		cur := s.low.Load()
		if triggerMs >= cur || s.low.CompareAndSwap(cur, triggerMs) {
			break
		}
	}
	s.alarm.Set(triggerMs)
}

// Fired returns how many delayed messages this scheduler published.
func (s *Scheduler) Fired() int64 { return s.fired.Load() }

// Failures returns how many scans failed (each followed by a backoff).
func (s *Scheduler) Failures() int64 { return s.alarm.Failures() }

// errStuck reports a due time that no scan can clear; it makes the alarm
// back off instead of spinning.
var errStuck = errors.New("delay: an entry is due but the scan returns none")

// fire publishes every entry due at now and returns the next trigger time.
func (s *Scheduler) fire(ctx context.Context, now int64) (int64, error) {
	from := min(s.floor, s.low.Swap(math.MaxInt64))
	if now-s.lastFull >= s.opts.Rescan.Milliseconds() {
		from = 0 // now and then read the whole queue, in case a hook was missed
	}
	next, err := s.fireFrom(ctx, from, now)
	if err != nil {
		s.floor = 0 // distrust what this pass learnt
	}
	return next, err
}

func (s *Scheduler) fireFrom(ctx context.Context, from, now int64) (int64, error) {
	progress := false
	for {
		page, err := s.be.ScanDelays(from, now, s.opts.Batch)
		if err != nil {
			return 0, err
		}
		full := len(page.Due) >= s.opts.Batch
		due := order(page.Due, full)
		for _, e := range due {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			id, err := s.be.ApplyDelay(ctx, e.Topic, e.Value)
			if err != nil {
				return 0, fmt.Errorf("apply delayed message %d of topic %q due at %d: %w", e.DelayEventID, e.Topic, e.TriggerTime, err)
			}
			progress = true
			if id != 0 {
				s.fired.Add(1)
			}
			if s.opts.OnFire != nil {
				s.opts.OnFire(e, id, s.opts.Now())
			}
		}
		if full {
			// Everything before the last fired trigger time is gone.
			from = due[len(due)-1].TriggerTime
			now = s.opts.Now()
			continue
		}
		if from <= 0 {
			s.lastFull = now
		}
		s.floor = now + 1
		if !page.HasNext {
			return alarm.Never, nil
		}
		if page.Next <= now && !progress {
			return 0, fmt.Errorf("%w (trigger %d, now %d)", errStuck, page.Next, now)
		}
		return page.Next, nil
	}
}

// order sorts a batch by trigger time, then delay eventId: keys order ties
// on the trigger time by the little-endian bytes of the id (§5.8), which is
// not publish order. When the batch was cut at the limit, the entries
// sharing the last trigger time may continue in the next scan, so they
// wait for it to be ordered together, unless the whole batch is that one
// millisecond (then key order across the cut is accepted).
func order(batch []meta.DelayEntry, full bool) []meta.DelayEntry {
	slices.SortFunc(batch, func(a, b meta.DelayEntry) int {
		return cmp.Or(cmp.Compare(a.TriggerTime, b.TriggerTime), cmp.Compare(a.DelayEventID, b.DelayEventID))
	})
	if !full || len(batch) == 0 {
		return batch
	}
	last := batch[len(batch)-1].TriggerTime
	cut := len(batch)
	for cut > 0 && batch[cut-1].TriggerTime == last {
		cut--
	}
	if cut == 0 {
		return batch
	}
	return batch[:cut]
}
