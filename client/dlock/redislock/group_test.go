package redislock

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/client/dlock"
	"github.com/smssmq/smss/client/internal/testserver"
	"github.com/smssmq/smss/internal/smsstest"
)

const fastAlive = "timeout:\n  server:\n    alive: 200\n"

// member is an in-process group subscriber that records what it handled.
type member struct {
	mu        sync.Mutex
	ids       []int64
	acked     int64
	held      bool
	changedAt time.Time // when held last changed, taken in OnLockChange
	changes   []bool
	done      chan error
	cancel    context.CancelFunc
}

func (m *member) handled() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ids)
}

func (m *member) lastAcked() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.acked
}

func (m *member) isHeld() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held
}

// lastChange is when the member last started or stopped consuming: timed
// in the callback, not when a polling test notices.
func (m *member) lastChange() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changedAt
}

func startMember(t *testing.T, c *client.Client, store dlock.GroupStore, topic string) *member {
	t.Helper()
	m := &member{done: make(chan error, 1)}
	g, err := dlock.NewGroupSubscriber(c, dlock.GroupConfig{
		Store:         store,
		RetryInterval: 50 * time.Millisecond,
		OnLockChange: func(held bool) {
			now := time.Now()
			m.mu.Lock()
			m.held = held
			m.changedAt = now
			m.changes = append(m.changes, held)
			m.mu.Unlock()
		},
		Sub: client.SubscriberConfig{Topic: topic, Who: "group", BatchSize: 2,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
			Handler: func(_ context.Context, batch []client.Delivery) client.AckAction {
				m.mu.Lock()
				defer m.mu.Unlock()
				if !m.held {
					t.Errorf("handler called while the member does not hold the lock")
				}
				for _, d := range batch {
					m.ids = append(m.ids, d.EventID)
				}
				return client.Ack
			},
			AfterAck: func(id int64) {
				m.mu.Lock()
				m.acked = id
				m.mu.Unlock()
			}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-m.done
	})
	return m
}

func (m *member) stop(t *testing.T) {
	t.Helper()
	m.cancel()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Fatal("member did not stop")
	}
	m.done <- nil // for the cleanup
}

func publish(t *testing.T, c *client.Client, topic string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := c.Publish(ctxT(t, 10*time.Second), topic, client.NewMessage([]byte("m"+strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
}

func ids(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func setup(t *testing.T) (*testserver.Server, *testserver.Redis, *client.Client) {
	t.Helper()
	rs := testserver.StartRedis(t)
	// These tests name the eventIds the group handles (2..N): the server's
	// stored positions, whose writes take eventIds too, are off here (the
	// group keeps its progress in Redis).
	srv := testserver.Start(t, fastAlive+"cursor:\n  enabled: false\n")
	c, err := client.Dial(ctxT(t, 10*time.Second), srv.Addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.CreateTopic(ctxT(t, 10*time.Second), "t"); err != nil {
		t.Fatal(err)
	}
	return srv, rs, c
}

func TestGroupOneConsumerAtATime(t *testing.T) {
	_, rs, c := setup(t)
	rdb := redisClient(t, rs.Addr)
	// Exclusivity is asserted over several TTLs: a generous TTL keeps a
	// loaded machine's scheduling delays from costing the holder its lease.
	const ttl = 2 * time.Second
	a := startMember(t, c, NewGroup(rdb, "t", "group", Options{TTL: ttl}), "t")
	b := startMember(t, c, NewGroup(rdb, "t", "group", Options{TTL: ttl}), "t")
	publish(t, c, "t", 10) // ids 2..11
	smsstest.WaitFor(t, 20*time.Second, "10 messages handled", func() bool { return len(a.handled())+len(b.handled()) >= 10 })
	holder, standby := a, b
	if len(b.handled()) > 0 {
		holder, standby = b, a
	}
	// Keep publishing for several TTLs: the standby never receives.
	for i := 0; i < 4; i++ {
		publish(t, c, "t", 5)
		time.Sleep(ttl / 2)
	}
	smsstest.WaitFor(t, 20*time.Second, "30 messages handled", func() bool { return len(holder.handled()) >= 30 })
	if got := standby.handled(); len(got) != 0 || standby.isHeld() {
		t.Fatalf("standby handled %v (held %v) while the holder runs", got, standby.isHeld())
	}
	if got := holder.handled(); !slices.Equal(got, ids(2, 31)) {
		t.Fatalf("holder handled %v", got)
	}

	// A clean stop releases the lock: the standby takes over at once and
	// continues right after the group's progress.
	holder.stop(t)
	start := time.Now()
	smsstest.WaitFor(t, 10*time.Second, "standby takes over", standby.isHeld)
	if d := time.Since(start); d > ttl {
		t.Errorf("takeover after a release took %v", d)
	}
	publish(t, c, "t", 3)
	smsstest.WaitFor(t, 20*time.Second, "standby handles new messages", func() bool { return len(standby.handled()) >= 3 })
	if got := standby.handled(); !slices.Equal(got, ids(32, 34)) {
		t.Errorf("standby handled %v, want 32..34", got)
	}
}

// TestMain runs the group member of the kill test when asked to.
func init() {
	if os.Getenv("SMSS_GROUP_CHILD") == "1" {
		os.Exit(groupChild())
	}
}

// groupChild is a group member in its own process, killed by the test. It
// prints "held", then "handled <id>" for each message and "acked <id>" after
// each saved and acknowledged batch.
func groupChild() int {
	ttl, _ := time.ParseDuration(os.Getenv("SMSS_GROUP_TTL"))
	c, err := client.Dial(context.Background(), os.Getenv("SMSS_GROUP_SERVER"), client.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	rdb := newRedis(os.Getenv("SMSS_GROUP_REDIS"))
	var mu sync.Mutex
	g, err := dlock.NewGroupSubscriber(c, dlock.GroupConfig{
		Store:         NewGroup(rdb, "t", "group", Options{TTL: ttl}),
		RetryInterval: 50 * time.Millisecond,
		OnLockChange: func(held bool) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Println("held", held)
		},
		Sub: client.SubscriberConfig{Topic: "t", Who: "group", BatchSize: 1,
			Handler: func(_ context.Context, batch []client.Delivery) client.AckAction {
				mu.Lock()
				defer mu.Unlock()
				fmt.Println("handled", batch[0].EventID)
				time.Sleep(20 * time.Millisecond) // a slow consumer, so the kill lands mid-stream
				return client.Ack
			},
			AfterAck: func(id int64) {
				mu.Lock()
				defer mu.Unlock()
				fmt.Println("acked", id)
			}},
	})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("error", g.Run(context.Background()))
	return 1
}

// lines collects a child's output lines.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) read(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		l.mu.Lock()
		l.all = append(l.all, s.Text())
		l.mu.Unlock()
	}
}

func (l *lines) lastAcked() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last int64
	for _, ln := range l.all {
		if v, ok := strings.CutPrefix(ln, "acked "); ok {
			last, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return last
}

func (l *lines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.all, s)
}

func TestGroupTakeoverAfterHolderKilled(t *testing.T) {
	srv, rs, c := setup(t)
	rdb := redisClient(t, rs.Addr)
	// The child keeps its lease as long as its renewals get through within
	// 2/3 TTL; a loaded machine may pause it for a good part of a second.
	const ttl = 2 * time.Second
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(os.Environ(), "SMSS_GROUP_CHILD=1", "SMSS_GROUP_SERVER="+srv.Addr,
		"SMSS_GROUP_REDIS="+rs.Addr, "SMSS_GROUP_TTL="+ttl.String())
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = io.Discard
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var l lines
	go func() {
		l.read(out)
		child.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		child.Process.Kill()
		<-exited
	})
	smsstest.WaitFor(t, 20*time.Second, "child holds the lock", func() bool { return l.has("held true") })

	standby := startMember(t, c, NewGroup(rdb, "t", "group", Options{TTL: ttl}), "t")
	publish(t, c, "t", 60) // ids 2..61
	smsstest.WaitFor(t, 20*time.Second, "child acked 15 messages", func() bool { return l.lastAcked() >= 16 })
	if got := standby.handled(); len(got) != 0 {
		t.Fatalf("standby handled %v while the child holds the lock", got)
	}
	g := NewGroup(rdb, "t", "group", Options{})
	token, err := rdb.Get(ctxT(t, 5*time.Second), g.Key()).Result()
	if err != nil {
		t.Fatalf("the child's lock: %v", err)
	}
	child.Process.Kill()
	<-exited
	// When the child's key expires: its TTL as Redis sees it, while the
	// key still holds the child's token.
	pttl, err := rdb.Eval(ctxT(t, 5*time.Second), `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return 0`, []string{g.Key()}, token).Int64()
	if err != nil {
		t.Fatal(err)
	}
	expiry := time.Now().Add(time.Duration(max(pttl, 0)) * time.Millisecond)
	if pttl > ttl.Milliseconds() {
		t.Fatalf("the child's key expires in %dms, TTL %v", pttl, ttl)
	}
	progress, ok, err := g.Progress(ctxT(t, 5*time.Second))
	if err != nil || !ok {
		t.Fatalf("group progress after the kill: %d %v %v", progress, ok, err)
	}
	if acked := l.lastAcked(); progress < acked {
		t.Fatalf("progress %d behind the child's last ack %d", progress, acked)
	}

	smsstest.WaitFor(t, 20*time.Second, "standby takes over", standby.isHeld)
	// The standby tries every 50ms, so it takes over right after the key
	// expires; ten tries' worth is slack for a loaded machine.
	if d := standby.lastChange().Sub(expiry); d > 500*time.Millisecond {
		t.Errorf("takeover %v after the child's key expired", d)
	}
	smsstest.WaitFor(t, 30*time.Second, "all messages handled", func() bool {
		h := standby.handled()
		return len(h) > 0 && h[len(h)-1] == 61
	})
	if got := standby.handled(); !slices.Equal(got, ids(progress+1, 61)) {
		t.Errorf("standby handled %v, want %d..61 (resume after the group's progress)", got, progress+1)
	}
}

func TestGroupPausesWhileRedisIsDown(t *testing.T) {
	for _, mode := range []string{"paused", "killed"} {
		t.Run(mode, func(t *testing.T) {
			_, rs, c := setup(t)
			spy := newGrantSpy(redisClient(t, rs.Addr))
			// The member must stop before its key could expire, a TTL after
			// the last renewal was sent; it stops at 2/3 TTL, leaving a
			// third (500 ms) as slack for a loaded machine.
			const ttl = 1500 * time.Millisecond
			m := startMember(t, c, NewGroup(spy, "t", "group", Options{TTL: ttl}), "t")
			publish(t, c, "t", 5) // 2..6
			// Saved and acknowledged: a batch handled but not yet saved when
			// Redis goes away is delivered again, by design.
			smsstest.WaitFor(t, 20*time.Second, "5 handled and saved", func() bool { return m.lastAcked() == 6 })

			if mode == "paused" {
				rs.Pause()
			} else {
				rs.Kill()
			}
			smsstest.WaitFor(t, 10*time.Second, "consumption stops", func() bool { return !m.isHeld() })
			if d := m.lastChange().Sub(spy.lastGrant()); d >= ttl {
				t.Errorf("consumer stopped %v after its last renewal was sent; TTL %v", d, ttl)
			}
			publish(t, c, "t", 5) // 7..11, published during the outage
			time.Sleep(2 * ttl)   // an outage of two TTLs: nothing may be consumed
			if got := m.handled(); len(got) != 5 {
				t.Fatalf("consumed during the outage: %v", got)
			}
			if mode == "paused" {
				rs.Resume()
			} else {
				rs.Start()
			}
			smsstest.WaitFor(t, 20*time.Second, "consumption resumes", func() bool { return len(m.handled()) >= 10 })
			if got := m.handled(); !slices.Equal(got, ids(2, 11)) {
				t.Errorf("handled %v, want 2..11 exactly once", got)
			}
		})
	}
}

// TestGroupAcrossChangedHistory: a group's progress is saved with its epoch.
// The master hands the group 30 messages its stopped slave never got and
// dies; the slave is promoted and numbers 40 writes of its own over the
// same eventIds. The member that takes over after that, on the new master,
// resumes where the histories part and handles every new message; from
// the bare eventId it would skip 30 of them.
func TestGroupAcrossChangedHistory(t *testing.T) {
	srv, rs, c := setup(t)
	rdb := redisClient(t, rs.Addr)
	slave := testserver.StartSlave(t, srv, fastAlive+"cursor:\n  enabled: false\n")
	publish(t, c, "t", 50) // ids 2..51
	sc, err := client.Dial(ctxT(t, 10*time.Second), slave.Addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	smsstest.WaitFor(t, 20*time.Second, "the slave at eventId 51", func() bool {
		st, err := sc.Status(ctxT(t, 5*time.Second))
		return err == nil && st.LastEventID == 51
	})
	slave.Stop()
	publish(t, c, "t", 30) // ids 52..81, on the master only
	first := startMember(t, c, NewGroup(rdb, "t", "group", Options{TTL: 2 * time.Second}), "t")
	smsstest.WaitFor(t, 20*time.Second, "80 messages handled", func() bool { return len(first.handled()) >= 80 })
	first.stop(t)
	pos, known, ok, err := NewGroup(rdb, "t", "group", Options{}).Position(ctxT(t, 5*time.Second))
	if err != nil || !ok || !known || pos.EventID != 81 {
		t.Fatalf("the group's saved position %+v known %v ok %v %v, want eventId 81 with its epoch", pos, known, ok, err)
	}

	srv.Kill()
	slave.Restart()
	nc, err := client.Dial(ctxT(t, 10*time.Second), slave.Addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Promote(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	publish(t, nc, "t", 40) // ids 52..91 of the new history
	second := startMember(t, nc, NewGroup(rdb, "t", "group", Options{TTL: 2 * time.Second}), "t")
	smsstest.WaitFor(t, 20*time.Second, "the new master's 40 messages handled", func() bool { return len(second.handled()) >= 40 })
	if got := second.handled(); !slices.Equal(got, ids(52, 91)) {
		t.Fatalf("the member on the new master handled %v, want 52..91", got)
	}
	if p, known, _, err := NewGroup(rdb, "t", "group", Options{}).Position(ctxT(t, 5*time.Second)); err != nil || !known || p.EventID != 91 || p.Epoch == 0 {
		t.Fatalf("the group's position after the new history %+v known %v %v", p, known, err)
	}
}
