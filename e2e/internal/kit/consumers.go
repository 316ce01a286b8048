package kit

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	smss "github.com/smssmq/smss/client"
	"github.com/smssmq/smss/client/dlock"
	"github.com/smssmq/smss/client/dlock/redislock"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// FollowSub is a consumer with a stored position (sub from -1) that
// follows the master across failovers: whenever its connection fails or a
// node refuses it, it subscribes again, at whatever address the load
// currently writes to, from the position the cluster stored for it.
//
// A stored position is at least once across a failover: acknowledgements
// the old master had not replicated yet are redelivered by the new one.
// The consumer skips those as a careful client does, by eventId: a
// message it is handed at or below the last eventId it acknowledged. That
// is safe only because delivery is read-committed (what a node hands out
// is in every later history, at the same eventId), so the consumer also
// checks that a redelivered message has the eventId it had before: a
// changed history fails the test.
type FollowSub struct {
	topic, who string
	addr       func() string

	mu      sync.Mutex
	got     map[string]int   // body → times handed above the last acknowledged eventId
	ids     map[string]int64 // body → the eventId it was handed with
	acked   int64            // the last eventId acknowledged
	changed []string         // bodies redelivered with another eventId

	Resubscribed, Redelivered atomic.Int64
	stop                      chan struct{}
	done                      chan struct{}
}

// StartFollowSub starts a FollowSub of topic as who on whatever node
// addr names at the time it (re)subscribes.
func StartFollowSub(addr func() string, topic, who string) *FollowSub {
	s := &FollowSub{topic: topic, who: who, addr: addr, got: map[string]int{}, ids: map[string]int64{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// Close stops the subscriber and waits for it.
func (s *FollowSub) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *FollowSub) run() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		s.session()
		s.Resubscribed.Add(1)
		select {
		case <-s.stop:
			return
		case <-time.After(100 * time.Millisecond): // resubscribe backoff
		}
	}
}

// session subscribes once and consumes until anything fails.
func (s *FollowSub) session() {
	nc, err := net.DialTimeout("tcp", s.addr(), time.Second)
	if err != nil {
		return
	}
	defer nc.Close()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-s.stop:
			nc.Close()
		case <-stopped:
		}
	}()
	c := &Client{C: nc, R: bufio.NewReader(nc)}
	if err := c.Sub(s.topic, s.who, -1, 10, 5*time.Second); err != nil {
		return
	}
	for {
		// A frozen or cut-off node sends nothing: give it up after a
		// while and ask the current master.
		u, err := c.Next(3 * time.Second)
		if err != nil || u.Code == protocol.StatusError || u.Code == protocol.StatusSubEnd {
			return
		}
		if u.Code != protocol.StatusOK {
			continue
		}
		s.mu.Lock()
		for _, m := range u.Msgs {
			b := string(m.Record.Body)
			if id, seen := s.ids[b]; seen && id != m.EventID {
				s.changed = append(s.changed, b)
			}
			s.ids[b] = m.EventID
			if m.EventID <= s.acked {
				s.Redelivered.Add(1)
				continue
			}
			s.got[b]++
		}
		if n := len(u.Msgs); n > 0 {
			s.acked = max(s.acked, u.Msgs[n-1].EventID)
		}
		s.mu.Unlock()
		if err := c.Ack(0); err != nil {
			return
		}
	}
}

// Snapshot returns a copy of what it was handed.
func (s *FollowSub) Snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.got))
	for b, n := range s.got {
		out[b] = n
	}
	return out
}

// historyChanged returns the bodies redelivered with another eventId.
func (s *FollowSub) historyChanged() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.changed...)
}

// ClientSub is the Go client's Subscriber given every node's address, as
// an application runs it: it keeps its position itself (LastAcked with its
// epoch), or with resume starts from the position the server stored for it
// and keeps its own from its first acknowledgement on (within one Run);
// finds the master or an in-sync slave of the current epoch; and counts
// every message its handler is handed.
type ClientSub struct {
	topic  string
	name   string
	sub    *smss.Subscriber
	cancel context.CancelFunc
	done   chan error
	log    *tailLog
	// Describe, when set, describes the nodes for a failure message.
	Describe func() string

	mu      sync.Mutex
	got     map[string]int
	changes int
}

// StartClientSub starts a ClientSub of topic on the nodes at addrs, with
// Resume (a stored position) if resume.
func StartClientSub(t *testing.T, addrs []string, topic, who string, resume bool) *ClientSub {
	t.Helper()
	cs := &ClientSub{topic: topic, name: "the client's subscriber", got: map[string]int{}, done: make(chan error, 1), log: &tailLog{}}
	if resume {
		cs.name = "the client's resuming subscriber"
	}
	sub, err := smss.NewSubscriber("", smss.SubscriberConfig{Topic: topic, Who: who, Addrs: addrs, BatchSize: 10, Resume: resume,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, IdleTimeout: 3 * time.Second,
		DialTimeout: time.Second, ProbeTimeout: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(cs.log, nil)),
		Handler: func(_ context.Context, batch []smss.Delivery) smss.AckAction {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			for _, d := range batch {
				cs.got[string(d.Body)]++
			}
			return smss.Ack
		},
		OnHistoryChange: func(smss.HistoryChange) {
			cs.mu.Lock()
			cs.changes++
			cs.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cs.sub, cs.cancel = sub, cancel
	go func() {
		err := sub.Run(ctx)
		if ctx.Err() == nil {
			// Run gave up by itself: a failure message must say why.
			fmt.Fprintf(cs.log, "Run returned: %v\n", err)
		}
		cs.done <- err
	}()
	return cs
}

// Close stops the subscriber and waits for it.
func (cs *ClientSub) Close() {
	cs.cancel()
	<-cs.done
}

// state says where the subscriber is and what it last logged, for a
// failure message: a subscriber that stalls says why.
func (cs *ClientSub) state() string {
	s := fmt.Sprintf("at %s, last acknowledged %d; its last log lines:\n%s", cs.sub.Addr(), cs.sub.LastAcked(), cs.log.String())
	if cs.Describe != nil {
		s += "the nodes:\n" + cs.Describe()
	}
	return s
}

// tailLog keeps the last lines written to it (a subscriber's log, shown
// when the test fails).
type tailLog struct {
	mu    sync.Mutex
	lines []string
}

// tailLogLines is how many lines a tailLog keeps.
const tailLogLines = 20

func (l *tailLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, time.Now().Format("15:04:05.000 ")+string(p))
	if len(l.lines) > tailLogLines {
		l.lines = l.lines[len(l.lines)-tailLogLines:]
	}
	return len(p), nil
}

func (l *tailLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "")
}

// Snapshot returns how often each body was handed over so far and how
// many history changes the subscriber saw.
func (cs *ClientSub) Snapshot() (map[string]int, int) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make(map[string]int, len(cs.got))
	for b, n := range cs.got {
		out[b] = n
	}
	return out, cs.changes
}

// heldBodies is the set of message bodies of topic in the history of the
// master whose data is dataDir.
func heldBodies(t *testing.T, dataDir, topic string) map[string]bool {
	t.Helper()
	held := map[string]bool{}
	for _, blk := range ReadStore(t, dataDir, []string{topic}).Topics[topic] {
		held[BodyOf(t, blk.Record)] = true
	}
	return held
}

// awaitHanded waits up to 30 s until a consumer was handed every body of
// held (got reports how often it was handed each); it returns, sorted, the
// ones still missing then (none when all came).
func awaitHanded(held map[string]bool, got func() map[string]int) []string {
	var missing []string
	if smsstest.Poll(30*time.Second, func() bool {
		g := got()
		missing = missing[:0]
		for b := range held {
			if g[b] == 0 {
				missing = append(missing, b)
			}
		}
		return len(missing) == 0
	}) {
		return nil
	}
	sort.Strings(missing)
	return missing
}

// GroupSub is a consumer group whose lock and progress are in Redis
// (client/dlock with redislock.Group: the eventId and its epoch, saved
// before each batch is acknowledged), its members given every node's
// address. One member consumes at a time; on request (handOver) it stops
// after its next batch, which it saves and acknowledges, and the next
// member is started only when told (StartNext), in a new client with a
// new Group: it resumes from the progress in Redis, checked against the
// epoch history of whatever node it subscribes to. Between handovers a
// member follows the master across failovers itself.
//
// Every body a member's handler is handed is counted: with the progress
// saved before the ack and a clean handover, each message of the history
// is handed exactly once.
type GroupSub struct {
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

	next chan struct{} // StartNext
	ctx  context.Context
	end  context.CancelFunc
	done chan struct{}
}

// StartGroupSub starts a GroupSub of topic on the nodes at addrs, its
// group's progress kept in the Redis at redisAddr.
func StartGroupSub(t *testing.T, redisAddr string, addrs []string, topic, who string) *GroupSub {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true,
		DialTimeout: 5 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, MaxRetries: -1})
	ctx, end := context.WithCancel(context.Background())
	gs := &GroupSub{t: t, topic: topic, who: who, addrs: addrs, rdb: rdb, log: &smsstest.SyncBuffer{},
		got: map[string]int{}, ids: map[string]int64{}, next: make(chan struct{}, 1), ctx: ctx, end: end,
		done: make(chan struct{})}
	gs.next <- struct{}{}
	go gs.run()
	return gs
}

// Close stops the members and waits for them.
func (gs *GroupSub) Close() {
	gs.end()
	<-gs.done
	gs.rdb.Close()
}

// run starts a member whenever StartNext asks, until Close.
func (gs *GroupSub) run() {
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
func (gs *GroupSub) member(n int) error {
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

func (gs *GroupSub) handle(_ context.Context, batch []smss.Delivery) smss.AckAction {
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

// HandOver asks the member to stop after its next batch and waits until
// it has ended (its progress saved, its lock released); the next member
// starts on StartNext. The load must be running: a batch has to come.
func (gs *GroupSub) HandOver(d time.Duration) {
	gs.t.Helper()
	stopped := make(chan struct{})
	gs.mu.Lock()
	gs.stopNext, gs.stopped = true, stopped
	gs.mu.Unlock()
	select {
	case <-stopped:
	case <-time.After(d):
		gs.t.Fatalf("the group's member did not stop after a batch within %v\n%s", d, Tail(gs.log.String(), 3000))
	}
}

// StartNext starts the next member (after handOver).
func (gs *GroupSub) StartNext() { gs.next <- struct{}{} }

// Snapshot returns a copy of what was handed, the history changes seen, the
// members' failures and how many members ran.
func (gs *GroupSub) Snapshot() (map[string]int, []string, int, []error, int) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	out := make(map[string]int, len(gs.got))
	for b, n := range gs.got {
		out[b] = n
	}
	return out, append([]string(nil), gs.changed...), gs.changes, append([]error(nil), gs.errs...), gs.members
}

// GroupOnce waits until the group was handed every message of its topic in
// the master's history, and fails if a message was handed twice (to one
// member or to two), one that history does not hold, or one at another
// eventId than before, if a member saw its history change, or if a
// member's Run failed.
func GroupOnce(t *testing.T, dataDir string, gs *GroupSub, cycle int, fault string) {
	t.Helper()
	held := heldBodies(t, dataDir, gs.topic)
	if missing := awaitHanded(held, func() map[string]int { got, _, _, _, _ := gs.Snapshot(); return got }); len(missing) > 0 {
		_, _, _, errs, members := gs.Snapshot()
		t.Fatalf("cycle %d (%s): the Redis group was never handed %d of the %d messages of %s (first %q); %d members ran, failures %v\n%s",
			cycle, fault, len(missing), len(held), gs.topic, missing[0], members, errs, Tail(gs.log.String(), 3000))
	}
	got, changed, changes, errs, members := gs.Snapshot()
	if len(errs) > 0 {
		t.Fatalf("cycle %d (%s): a member of the Redis group failed: %v\n%s", cycle, fault, errs, Tail(gs.log.String(), 3000))
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
			cycle, fault, members, dups, first, got[first], Tail(gs.log.String(), 3000))
	}
}
