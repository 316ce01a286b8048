package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/delay"
	"github.com/smssmq/smss/lifecycle"
)

// backgroundStopTimeout bounds how long shutdown waits for a background
// job's current step (one delay apply, one topic delete, one file removal).
const backgroundStopTimeout = 10 * time.Second

// background holds the time-based jobs of spec §7: the delay scheduler and
// the topic expiry reaper on a master, file retention on every role.
type background struct {
	delay     *delay.Scheduler  // nil on a slave
	reaper    *lifecycle.Reaper // nil on a slave
	retention *lifecycle.Retention
	log       *slog.Logger
	gcStop    context.CancelFunc // ends the meta value-log GC
	gcDone    chan struct{}
}

// metaGCInterval is how often badger's value log (large delayed messages
// only) is compacted.
const metaGCInterval = 10 * time.Minute

// startBackground starts the background jobs on b. On a master it installs
// the broker's commit hooks that arm the delay and expiry timers. Call
// stop before closing the broker.
func startBackground(cfg *config.Config, b *broker.Broker, logger *slog.Logger) (*background, error) {
	bg := &background{log: logger}
	if !b.IsSlave() {
		s, err := delay.New(b, delay.Options{
			FirstRun: cfg.FirstExec(),
			Rescan:   cfg.DefaultScan(),
			Logger:   logger.With("component", "delay"),
		})
		if err != nil {
			return nil, err
		}
		r, err := lifecycle.NewReaper(b, lifecycle.ReaperOptions{
			FirstRun: cfg.FirstExec(),
			Rescan:   cfg.DefaultScan(),
			Logger:   logger.With("component", "expiry"),
		})
		if err != nil {
			return nil, err
		}
		b.SetHooks(broker.Hooks{DelayStored: s.Notify, TopicExpiry: r.Notify})
		s.Start()
		r.Start()
		bg.delay, bg.reaper = s, r
	}
	keep := cfg.Store.MaxSlaveKeepFiles
	if keep == 0 {
		keep = -1 // the option's "none"; 0 there means the default
	}
	bg.retention = lifecycle.NewRetention(b, lifecycle.RetentionOptions{
		MaxDays:           cfg.Store.MaxDays,
		Interval:          cfg.ClearInterval(),
		MaxSlaveKeepFiles: keep,
		Logger:            logger.With("component", "retention"),
	})
	bg.retention.Start()
	ctx, cancel := context.WithCancel(context.Background())
	bg.gcStop, bg.gcDone = cancel, make(chan struct{})
	go func() {
		defer close(bg.gcDone)
		b.Meta().RunGC(ctx, metaGCInterval)
	}()
	return bg, nil
}

// stop ends every job, each after its current step.
func (bg *background) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), backgroundStopTimeout)
	defer cancel()
	type job struct {
		name string
		stop func(context.Context) error
	}
	jobs := []job{{"retention", bg.retention.Stop}}
	if bg.delay != nil {
		jobs = append(jobs, job{"delay", bg.delay.Stop}, job{"expiry", bg.reaper.Stop})
	}
	for _, j := range jobs {
		if err := j.stop(ctx); err != nil {
			bg.log.Warn("background job did not stop in time", "job", j.name, "err", err)
		}
	}
	bg.gcStop()
	select {
	case <-bg.gcDone:
	case <-ctx.Done():
		bg.log.Warn("meta GC did not stop in time")
	}
}
