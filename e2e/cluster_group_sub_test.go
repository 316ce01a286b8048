package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	smss "github.com/smssmq/smss/client"
	"github.com/smssmq/smss/client/dlock"
	"github.com/smssmq/smss/client/dlock/redislock"
	"github.com/smssmq/smss/internal/smsstest"
)

// groupSub is a consumer group whose lock and progress are in Redis
// (client/dlock with redislock.Group: the eventId and its epoch, saved
// before each batch is acknowledged), its members given every node's
// address. One member consumes at a time; on request (handOver) it stops
// after its next batch, which it saves and acknowledges, and the next
// member is started only when told (startNext), in a new client with a
// new Group: it resumes from the progress in Redis, checked against the
// epoch history of whatever node it subscribes to. Between handovers a
// member follows the master across failovers itself.
//
// Every body a member's handler is handed is counted: with the progress
// saved before the ack and a clean handover, each message of the history
// is handed exactly once.
type groupSub struct {
	t          *testing.T
	topic, who string
	addrs      []string
	rdb        *redis.Client
	log        *smsstest.SyncBuffer // every member's log, for a failure

	mu       sync.Mutex
	got      map[string]int   // body → times handed
	ids      map[string]int64 // body → the eventId it was handed with
	changed  []string         // bodies handed again at another eventId
	changes  int              // OnHistoryChange calls
	errs     []error          // what a member's Run returned other than a handover or the end
	members  int              // members started
	stopNext bool             // the member stops after its next batch
	stopped  chan struct{}    // closed when the member asked to stop has ended

	next chan struct{} // startNext
	ctx  context.Context
	end  context.CancelFunc
	done chan struct{}
}

func startGroupSub(t *testing.T, redisAddr string, addrs []string, topic, who string) *groupSub {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true,
		DialTimeout: 5 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, MaxRetries: -1})
	ctx, end := context.WithCancel(context.Background())
	gs := &groupSub{t: t, topic: topic, who: who, addrs: addrs, rdb: rdb, log: &smsstest.SyncBuffer{},
		got: map[string]int{}, ids: map[string]int64{}, next: make(chan struct{}, 1), ctx: ctx, end: end,
		done: make(chan struct{})}
	gs.next <- struct{}{}
	go gs.run()
	return gs
}

func (gs *groupSub) close() {
	gs.end()
	<-gs.done
	gs.rdb.Close()
}

// run starts a member whenever startNext asks, until close.
func (gs *groupSub) run() {
	defer close(gs.done)
	for {
		select {
		case <-gs.ctx.Done():
			return
		case <-gs.next:
		}
		gs.mu.Lock()
		gs.members++
		n := gs.members
		gs.mu.Unlock()
		err := gs.member(n)
		gs.mu.Lock()
		if err != nil && gs.ctx.Err() == nil {
			gs.errs = append(gs.errs, fmt.Errorf("member %d: %w", n, err))
		}
		if gs.stopped != nil {
			close(gs.stopped)
			gs.stopped = nil
		}
		gs.mu.Unlock()
	}
}

// member runs one member of the group until it hands over (nil) or the
// group is closed.
func (gs *groupSub) member(n int) error {
	log := slog.New(slog.NewTextHandler(gs.log, &slog.HandlerOptions{Level: slog.LevelWarn})).With("member", n)
	var c *smss.Client
	// Every node may be down (the whole cluster restarting): dial until
	// one answers.
	for attempt := 0; ; attempt++ {
		dctx, cancel := context.WithTimeout(gs.ctx, 2*time.Second)
		var err error
		c, err = smss.Dial(dctx, "", smss.Options{Addrs: gs.addrs, DialTimeout: time.Second, ProbeTimeout: 500 * time.Millisecond, Logger: log})
		cancel()
		if err == nil {
			break
		}
		if gs.ctx.Err() != nil {
			return nil
		}
		if attempt >= 100 {
			return fmt.Errorf("no node answered a dial in %d attempts: %w", attempt, err)
		}
		select {
		case <-gs.ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond): // dial backoff
		}
	}
	defer c.Close()
	g, err := dlock.NewGroupSubscriber(c, dlock.GroupConfig{
		Store:         redislock.NewGroup(gs.rdb, gs.topic, gs.who, redislock.Options{TTL: 10 * time.Second, Logger: log}),
		RetryInterval: 50 * time.Millisecond,
		Logger:        log,
		Sub: smss.SubscriberConfig{Topic: gs.topic, Who: gs.who, Addrs: gs.addrs, BatchSize: 10,
			MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, IdleTimeout: 3 * time.Second,
			DialTimeout: time.Second, ProbeTimeout: 500 * time.Millisecond, Logger: log,
			Handler: gs.handle,
			OnHistoryChange: func(smss.HistoryChange) {
				gs.mu.Lock()
				gs.changes++
				gs.mu.Unlock()
			}},
	})
	if err != nil {
		return err
	}
	return g.Run(gs.ctx)
}

func (gs *groupSub) handle(_ context.Context, batch []smss.Delivery) smss.AckAction {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for _, d := range batch {
		b := string(d.Body)
		if id, seen := gs.ids[b]; seen && id != d.EventID {
			gs.changed = append(gs.changed, b)
		}
		gs.ids[b] = d.EventID
		gs.got[b]++
	}
	if gs.stopNext {
		gs.stopNext = false
		return smss.AckAndStop
	}
	return smss.Ack
}

// handOver asks the member to stop after its next batch and waits until
// it has ended (its progress saved, its lock released); the next member
// starts on startNext. The load must be running: a batch has to come.
func (gs *groupSub) handOver(d time.Duration) {
	gs.t.Helper()
	stopped := make(chan struct{})
	gs.mu.Lock()
	gs.stopNext, gs.stopped = true, stopped
	gs.mu.Unlock()
	select {
	case <-stopped:
	case <-time.After(d):
		gs.t.Fatalf("the group's member did not stop after a batch within %v\n%s", d, tail(gs.log.String(), 3000))
	}
}

// startNext starts the next member (after handOver).
func (gs *groupSub) startNext() { gs.next <- struct{}{} }

// snapshot returns a copy of what was handed, the history changes seen, the
// members' failures and how many members ran.
func (gs *groupSub) snapshot() (map[string]int, []string, int, []error, int) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	out := make(map[string]int, len(gs.got))
	for b, n := range gs.got {
		out[b] = n
	}
	return out, append([]string(nil), gs.changed...), gs.changes, append([]error(nil), gs.errs...), gs.members
}

// groupOnce waits until the group was handed every message of its topic in
// the master's history, and fails if a message was handed twice (to one
// member or to two), one that history does not hold, or one at another
// eventId than before, if a member saw its history change, or if a
// member's Run failed.
func groupOnce(t *testing.T, dataDir string, gs *groupSub, cycle int, fault string) {
	t.Helper()
	held := heldBodies(t, dataDir, gs.topic)
	if missing := awaitHanded(held, func() map[string]int { got, _, _, _, _ := gs.snapshot(); return got }); len(missing) > 0 {
		_, _, _, errs, members := gs.snapshot()
		t.Fatalf("cycle %d (%s): the Redis group was never handed %d of the %d messages of %s (first %q); %d members ran, failures %v\n%s",
			cycle, fault, len(missing), len(held), gs.topic, missing[0], members, errs, tail(gs.log.String(), 3000))
	}
	got, changed, changes, errs, members := gs.snapshot()
	if len(errs) > 0 {
		t.Fatalf("cycle %d (%s): a member of the Redis group failed: %v\n%s", cycle, fault, errs, tail(gs.log.String(), 3000))
	}
	if len(changed) > 0 {
		t.Fatalf("cycle %d (%s): the Redis group was handed %q again at another eventId: the history it was shown changed", cycle, fault, changed[0])
	}
	if changes != 0 {
		t.Fatalf("cycle %d (%s): the Redis group saw %d history changes; read-committed delivery allows none", cycle, fault, changes)
	}
	dups := 0
	var first string
	for b, n := range got {
		if !held[b] {
			t.Fatalf("cycle %d (%s): the Redis group was handed %q, which the history does not hold", cycle, fault, b)
		}
		if n > 1 {
			if dups == 0 || b < first {
				first = b
			}
			dups++
		}
	}
	if dups > 0 {
		t.Fatalf("cycle %d (%s): the Redis group (%d members so far) was handed %d messages more than once (first %q, %d times)\n%s",
			cycle, fault, members, dups, first, got[first], tail(gs.log.String(), 3000))
	}
}
