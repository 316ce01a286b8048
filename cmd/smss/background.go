package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/delay"
	"github.com/smssmq/smss/lifecycle"
	"github.com/smssmq/smss/queue"
)

// backgroundStopTimeout bounds how long shutdown waits for a background
// job's current step (one delay apply, one topic delete, one file removal).
const backgroundStopTimeout = 10 * time.Second

// background holds the time-based jobs of docs/protocol.md §7: the delay scheduler and
// the topic expiry reaper on a master, file retention on every role.
type background struct {
	cfg *config.Config
	b   *broker.Broker

	mu      sync.Mutex        // guards delay, reaper and stopped (startMaster runs on promotion)
	delay   *delay.Scheduler  // nil on a slave
	reaper  *lifecycle.Reaper // nil on a slave
	queues  *queue.Manager    // nil with queue.enabled false; serving while delay runs
	stopped bool

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
	bg := &background{log: logger, cfg: cfg, b: b}
	if err := b.ReadOnly(); err != nil {
		// Every job writes (applies delays, deletes expired topics, removes
		// files, compacts badger): none runs until a restart.
		logger.Warn("started read-only: the delay scheduler, topic expiry, retention and meta GC are off until a restart", "cause", err)
		bg.stopped = true
		return bg, nil
	}
	if !b.IsSlave() {
		if err := bg.startMaster(); err != nil {
			return nil, err
		}
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
		b.RunMetaGC(ctx, metaGCInterval)
	}()
	return bg, nil
}

// startMaster starts the jobs only a master runs, the delay scheduler and
// the expiry reaper, and installs the hooks that arm them: at start-up on a
// master, and when a slave is promoted (their first scan then finds the
// delays and lifetimes replicated so far). It is a no-op once they run.
func (bg *background) startMaster() error {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if bg.delay != nil {
		return nil
	}
	if bg.stopped {
		return errors.New("background jobs already stopped")
	}
	s, err := delay.New(bg.b, delay.Options{
		FirstRun: bg.cfg.FirstExec(),
		Rescan:   bg.cfg.DefaultScan(),
		Logger:   bg.log.With("component", "delay"),
	})
	if err != nil {
		return err
	}
	r, err := lifecycle.NewReaper(bg.b, lifecycle.ReaperOptions{
		FirstRun: bg.cfg.FirstExec(),
		Rescan:   bg.cfg.DefaultScan(),
		Logger:   bg.log.With("component", "expiry"),
	})
	if err != nil {
		return err
	}
	bg.b.SetHooks(broker.Hooks{DelayStored: s.Notify, TopicExpiry: r.Notify})
	s.Start()
	r.Start()
	bg.delay, bg.reaper = s, r
	bg.startQueuesLocked()
	return nil
}

// setQueues hands over the run's queue manager; it serves at once on a
// master, else from the promotion on.
func (bg *background) setQueues(m *queue.Manager) {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	bg.queues = m
	if bg.delay != nil && !bg.stopped {
		bg.startQueuesLocked()
	}
}

// queueGroups is how many queue groups this node serves.
func (bg *background) queueGroups() int {
	bg.mu.Lock()
	m := bg.queues
	bg.mu.Unlock()
	if m == nil {
		return 0
	}
	return m.Count()
}

// startQueuesLocked starts the queue manager, if any. A failure (the
// state in __queues cannot be read) is logged and leaves the queue
// commands refused; publishing and the rest serve on.
func (bg *background) startQueuesLocked() {
	if bg.queues == nil {
		return
	}
	if err := bg.queues.Start(); err != nil {
		bg.log.Error("queue groups not served: their state could not be rebuilt", "err", err)
	}
}

// stop ends every job, each after its current step.
func (bg *background) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), backgroundStopTimeout)
	defer cancel()
	type job struct {
		name string
		stop func(context.Context) error
	}
	if bg.retention == nil {
		return // read-only start: nothing runs
	}
	jobs := []job{{"retention", bg.retention.Stop}}
	bg.mu.Lock()
	bg.stopped = true
	if bg.queues != nil {
		bg.queues.Stop() // its loops write through the broker
	}
	if bg.delay != nil {
		jobs = append(jobs, job{"delay", bg.delay.Stop}, job{"expiry", bg.reaper.Stop})
	}
	bg.mu.Unlock()
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
