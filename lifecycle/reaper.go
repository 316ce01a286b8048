package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/lifecycle/alarm"
	"github.com/smssmq/smss/protocol"
)

// ErrSlave is returned by NewReaper for a slave broker: topic expiry on a
// slave follows the master's replicated deletes.
var ErrSlave = errors.New("lifecycle: the expiry reaper runs on a master only")

// reaperBackend is what the reaper needs from the broker; tests wrap it.
type reaperBackend interface {
	ExpiredTopics(nowMs int64) ([]string, error)
	Topic(name string) (protocol.TopicInfo, bool, error)
	NextExpiry() (int64, bool, error)
	ExpireTopic(ctx context.Context, name string, expireAt int64) (bool, error)
}

type brokerReaper struct{ b *broker.Broker }

func (r brokerReaper) ExpiredTopics(now int64) ([]string, error) {
	return r.b.ExpiredTopics(now)
}
func (r brokerReaper) Topic(name string) (protocol.TopicInfo, bool, error) {
	return r.b.StoredTopic(name)
}
func (r brokerReaper) NextExpiry() (int64, bool, error) { return r.b.NextExpiry() }
func (r brokerReaper) ExpireTopic(ctx context.Context, name string, expireAt int64) (bool, error) {
	return r.b.ExpireTopic(ctx, name, expireAt)
}

// ReaperOptions configure a Reaper. Zero values take the documented
// defaults.
type ReaperOptions struct {
	// FirstRun is the time from Start to the first pass, which reaps what
	// expired while the server was down (background.firstExecSecond);
	// 0 means at once.
	FirstRun time.Duration
	// Rescan bounds how long the reaper sleeps when it knows of no expiry
	// (background.defaultScanSecond), default 2 h; the TopicExpiry hook
	// makes it unnecessary except for a missed hook.
	Rescan time.Duration
	// MinBackoff and MaxBackoff bound the wait after an error, default
	// 100 ms and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// Now is the clock in ms; it must agree with the broker's, which
	// decides whether a topic has expired.
	Now    func() int64
	Logger *slog.Logger
}

// Reaper deletes topics whose lifetime has ended.
type Reaper struct {
	be     reaperBackend
	log    *slog.Logger
	now    func() int64
	alarm  *alarm.Alarm
	reaped atomic.Int64
}

// NewReaper returns a reaper for b that is not yet running; it refuses a
// slave broker.
func NewReaper(b *broker.Broker, opts ReaperOptions) (*Reaper, error) {
	if b.IsSlave() {
		return nil, ErrSlave
	}
	return newReaper(brokerReaper{b}, opts), nil
}

func newReaper(be reaperBackend, opts ReaperOptions) *Reaper {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = func() int64 { return time.Now().UnixMilli() }
	}
	r := &Reaper{be: be, log: opts.Logger, now: opts.Now}
	r.alarm = alarm.New(alarm.Options{
		Name: "topic expiry", Job: r.reap, Now: opts.Now, MaxSleep: opts.Rescan, FirstDelay: opts.FirstRun,
		MinBackoff: opts.MinBackoff, MaxBackoff: opts.MaxBackoff, Logger: opts.Logger,
	})
	return r
}

// Start begins reaping; topics that expired while the server was down go
// at the first pass, Options.FirstRun later.
func (r *Reaper) Start() { r.alarm.Start() }

// Stop ends the reaper after the delete in progress, waiting until ctx
// ends. Call it before closing the broker.
func (r *Reaper) Stop(ctx context.Context) error { return r.alarm.Stop(ctx) }

// Notify tells the reaper that a topic expires at expireAtMs (the broker's
// TopicExpiry hook). It never blocks.
func (r *Reaper) Notify(expireAtMs int64) { r.alarm.Set(expireAtMs) }

// Reaped returns how many topics this reaper deleted.
func (r *Reaper) Reaped() int64 { return r.reaped.Load() }

// Failures returns how many passes failed (each followed by a backoff).
func (r *Reaper) Failures() int64 { return r.alarm.Failures() }

var errStuck = errors.New("lifecycle: a topic is due for expiry but cannot be reaped")

func (r *Reaper) reap(ctx context.Context, now int64) (int64, error) {
	names, err := r.be.ExpiredTopics(now)
	if err != nil {
		return 0, err
	}
	progress := false
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		// The expiry read now is the one the delete is conditioned on: a
		// topic re-created since the scan keeps its own lifetime.
		t, ok, err := r.be.Topic(name)
		if err != nil {
			return 0, err
		}
		if !ok || !t.Expired(now) {
			progress = true // gone or re-created since the scan
			continue
		}
		deleted, err := r.be.ExpireTopic(ctx, name, t.ExpireAt)
		if errors.Is(err, protocol.ErrTopicNotExist) {
			progress = true // deleted by a client meanwhile
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("expire topic %q (expireAt %d): %w", name, t.ExpireAt, err)
		}
		if deleted {
			progress = true
			r.reaped.Add(1)
			r.log.Info("expired topic deleted", "topic", name, "expireAt", t.ExpireAt, "lateMs", r.now()-t.ExpireAt)
		}
	}
	next, ok, err := r.be.NextExpiry()
	if err != nil {
		return 0, err
	}
	if !ok {
		return alarm.Never, nil
	}
	if next <= now && !progress {
		return 0, fmt.Errorf("%w (expireAt %d, now %d)", errStuck, next, now)
	}
	return next, nil
}
