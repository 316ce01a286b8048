package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/smssmq/smss/client"
)

// GroupConfig configures a GroupSubscriber.
type GroupConfig struct {
	// Store holds the group's lock and progress.
	Store GroupStore
	// ServerProgress keeps the group's progress on the smss server (its
	// stored position of (Sub.Topic, Sub.Who), docs/durability-and-failover.md,
	// "Stored consumer positions") instead of in Store: each holder subscribes with
	// Sub.Resume, nothing is saved per batch, and the lock store holds only
	// the lease. Lock is then enough (Store may be nil). The server's
	// position is not fenced by the lease: a holder that lost the lease
	// can still acknowledge a batch it was handling, which moves the
	// position past messages it did handle (never past unhandled ones);
	// after a server crash or failover the position may be up to
	// cursor.flushMs old, and the new holder gets those messages again.
	ServerProgress bool
	// Lock is the lease-only lock used with ServerProgress when Store is
	// nil.
	Lock Locker
	// Sub configures the subscription each holder runs. Topic, Who and
	// Handler are required. Sub.From is where the group starts when no
	// progress is stored; Sub.AfterAck is called after each batch is
	// saved and acknowledged.
	Sub client.SubscriberConfig
	// RetryInterval is how often a standby instance tries to take the
	// lock, and how often a failed progress save or load is retried.
	// Default 1 s.
	RetryInterval time.Duration
	// OnLockChange, if set, is called with true when this instance starts
	// consuming and false when it stops.
	OnLockChange func(held bool)
	Logger       *slog.Logger
}

// GroupSubscriber runs one member of a consumer group: it waits for the
// group's lock, consumes while it holds it, and stops consuming as soon as
// the lease is lost. See the package documentation for the guarantees.
type GroupSubscriber struct {
	c   *client.Client
	cfg GroupConfig

	mu sync.Mutex
	// saved is the last progress this instance saved. It is a floor for
	// the stored progress, which can only be lower if the store lost data.
	saved int64
}

// NewGroupSubscriber returns a group member subscribing through c's server.
func NewGroupSubscriber(c *client.Client, cfg GroupConfig) (*GroupSubscriber, error) {
	switch {
	case cfg.ServerProgress && cfg.Store == nil && cfg.Lock == nil:
		return nil, errors.New("dlock: GroupConfig.Lock (or Store) is required")
	case !cfg.ServerProgress && cfg.Store == nil:
		return nil, errors.New("dlock: GroupConfig.Store is required")
	case cfg.Sub.Topic == "" || cfg.Sub.Handler == nil:
		return nil, errors.New("dlock: GroupConfig.Sub needs Topic and Handler")
	case cfg.Sub.From < 0:
		return nil, fmt.Errorf("dlock: Sub.From %d is negative", cfg.Sub.From)
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	if cfg.Lock == nil && cfg.Store != nil {
		cfg.Lock = cfg.Store
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &GroupSubscriber{c: c, cfg: cfg, saved: -1}, nil
}

// Run takes part in the group until ctx ends (returns ctx's error), the
// handler stops the subscription (nil), the topic is deleted (an error
// wrapping client.ErrTopicDeleted) or the server refuses the subscription
// for good (the *client.ServerError). Lost leases and store outages are
// waited out.
func (g *GroupSubscriber) Run(ctx context.Context) error {
	log := g.cfg.Logger.With("topic", g.cfg.Sub.Topic, "who", g.cfg.Sub.Who)
	for {
		lease, err := g.acquire(ctx, log)
		if err != nil {
			return err
		}
		log.Info("dlock: group lock acquired, consuming")
		g.lockChange(true)
		lost, err := g.consume(ctx, lease, log)
		g.lockChange(false)
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if rerr := lease.Release(relCtx); rerr != nil {
			log.Warn("dlock: release failed; the lock will expire by itself", "err", rerr)
		}
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !lost {
			return err
		}
		log.Warn("dlock: group lock lost, consumption stopped", "err", err)
	}
}

func (g *GroupSubscriber) lockChange(held bool) {
	if g.cfg.OnLockChange != nil {
		g.cfg.OnLockChange(held)
	}
}

// acquire tries to take the lock every RetryInterval until it succeeds or
// ctx ends.
func (g *GroupSubscriber) acquire(ctx context.Context, log *slog.Logger) (Lease, error) {
	for {
		lease, err := g.cfg.Lock.TryAcquire(ctx)
		if err == nil {
			return lease, nil
		}
		if !errors.Is(err, ErrNotAcquired) {
			log.Warn("dlock: cannot reach the lock store", "err", err)
		}
		if err := sleep(ctx, g.cfg.RetryInterval); err != nil {
			return nil, err
		}
	}
}

// consume subscribes while lease holds. lost reports that it ended because
// the lease was lost (or the store failed), so the caller should compete
// for the lock again.
func (g *GroupSubscriber) consume(ctx context.Context, lease Lease, log *slog.Logger) (lost bool, err error) {
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-lease.Lost():
			cancel()
		case <-subCtx.Done():
		}
	}()

	cfg := g.cfg.Sub
	if g.cfg.ServerProgress {
		// The server keeps the progress: resume from its position.
		cfg.Resume = true
		sub, err := g.c.NewSubscriber(cfg)
		if err != nil {
			return false, err
		}
		log.Info("dlock: subscribing from the server's stored position")
		err = sub.Run(subCtx)
		select {
		case <-lease.Lost():
			return true, fmt.Errorf("%w (subscription: %v)", ErrLeaseLost, err)
		default:
		}
		return false, err
	}
	from, err := g.startFrom(subCtx, lease)
	if err != nil {
		return true, err
	}
	cfg.From = from
	ps, positions := g.cfg.Store.(PositionStore)
	if positions {
		// The epoch of the stored progress, to check it on the node.
		if p, known, ok, err := ps.Position(subCtx); err == nil && ok && known && p.EventID == from {
			cfg.FromPosition = &p
		}
	}
	user := cfg.Handler
	// handled is the last eventId this subscription saved: a batch whose
	// ack could not be sent after its save (the connection failed) comes
	// again from the subscriber, which resumes after the last eventId it
	// acknowledged; the group handled it, so it is skipped. A history
	// change moves it back to where the subscriber resumes.
	handled := from
	userChange := cfg.OnHistoryChange
	cfg.OnHistoryChange = func(ch client.HistoryChange) {
		handled = min(handled, ch.ResumeAfter)
		if userChange != nil {
			userChange(ch)
		}
	}
	var leaseStop bool
	var sub *client.Subscriber
	cfg.Handler = func(hctx context.Context, batch []client.Delivery) client.AckAction {
		for len(batch) > 0 && batch[0].EventID <= handled {
			batch = batch[1:]
		}
		if len(batch) == 0 {
			return client.Ack // saved already: acknowledge it again
		}
		action := user(hctx, batch)
		if action == client.StopWithoutAck {
			return action
		}
		last := batch[len(batch)-1].EventID
		var err error
		if p, ok := sub.PositionOf(last); positions && ok {
			err = g.savePosition(hctx, lease, ps, p)
		} else {
			err = g.save(hctx, lease, last)
		}
		if err != nil {
			log.Warn("dlock: progress not saved, batch not acknowledged", "err", err)
			leaseStop = true
			return client.StopWithoutAck
		}
		handled = last
		return action
	}
	sub, err = g.c.NewSubscriber(cfg)
	if err != nil {
		return false, err
	}
	log.Info("dlock: subscribing", "from", from)
	err = sub.Run(subCtx)
	select {
	case <-lease.Lost():
		return true, fmt.Errorf("%w (subscription: %v)", ErrLeaseLost, err)
	default:
	}
	if leaseStop {
		return true, ErrLeaseLost
	}
	return false, err
}

// startFrom is the group's stored progress, never below what this instance
// saved itself (a store that lost its data must not rewind the group) nor
// below Sub.From.
func (g *GroupSubscriber) startFrom(ctx context.Context, lease Lease) (int64, error) {
	for {
		p, ok, err := g.cfg.Store.Progress(ctx)
		if err == nil {
			from := g.cfg.Sub.From
			if ok && p > from {
				from = p
			}
			g.mu.Lock()
			if g.saved > from {
				from = g.saved
			}
			g.mu.Unlock()
			return from, nil
		}
		g.cfg.Logger.Warn("dlock: cannot load group progress", "topic", g.cfg.Sub.Topic, "err", err)
		if err := sleep(ctx, g.cfg.RetryInterval); err != nil {
			return 0, fmt.Errorf("load group progress: %w", err)
		}
	}
}

// save stores the progress, retrying store errors until it succeeds, the
// lease is lost or ctx ends.
func (g *GroupSubscriber) save(ctx context.Context, lease Lease, eventID int64) error {
	return g.retrySave(ctx, lease, func() error { return g.cfg.Store.SaveProgress(ctx, lease, eventID) }, func() {
		g.saved = max(g.saved, eventID)
	})
}

// savePosition is save with the epoch, for a PositionStore.
func (g *GroupSubscriber) savePosition(ctx context.Context, lease Lease, ps PositionStore, p client.Position) error {
	return g.retrySave(ctx, lease, func() error { return ps.SavePosition(ctx, lease, p) }, func() {
		// The floor follows the store: a position resumed before it
		// after a history change is the group's progress now.
		g.saved = p.EventID
	})
}

// retrySave runs store until it succeeds (then saved, under g.mu), the
// lease is lost or ctx ends, logging each failure and pausing
// RetryInterval between tries.
func (g *GroupSubscriber) retrySave(ctx context.Context, lease Lease, store func() error, saved func()) error {
	for {
		select {
		case <-lease.Lost():
			return ErrLeaseLost
		default:
		}
		err := store()
		if err == nil {
			g.mu.Lock()
			saved()
			g.mu.Unlock()
			return nil
		}
		if errors.Is(err, ErrLeaseLost) {
			return err
		}
		g.cfg.Logger.Warn("dlock: saving group progress failed, retrying", "topic", g.cfg.Sub.Topic, "err", err)
		if err := sleep(ctx, g.cfg.RetryInterval); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
