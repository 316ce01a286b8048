package client

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"

	"github.com/smssmq/smss/client/internal/testserver"
)

// waitTopic waits until the server at addr holds exactly want (bodies) on
// topic; a slave catches up asynchronously.
func waitTopic(t *testing.T, addr, topic string, want []string) {
	t.Helper()
	var got []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := Dial(ctxT(t, 5*time.Second), addr, Options{HealthCheckInterval: -1})
		if err == nil {
			_, err = c.TopicInfo(ctxT(t, 5*time.Second), topic)
			c.Close()
		}
		if err == nil {
			got = got[:0]
			for _, d := range topicMessages(t, addr, topic) {
				got = append(got, string(d.Body))
			}
			if slices.Equal(got, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s holds %q (last error %v), want %q", topic, addr, got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPublishFollowsTheMaster: a client given [slave, master] of real
// servers writes to the master; after the master dies and the slave is
// restarted as a master on its port (today's promotion), the same client
// writes there, with no change to its code or configuration.
func TestPublishFollowsTheMaster(t *testing.T) {
	master := testserver.Start(t, fastAlive)
	slave := testserver.StartSlave(t, master, fastAlive)
	c := dialT(t, "", Options{Addrs: []string{slave.Addr, master.Addr}, HealthCheckInterval: -1,
		RetryBackoff: 20 * time.Millisecond})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "order"); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got := c.Master(); got != master.Addr {
		t.Fatalf("master %q, want %s", got, master.Addr)
	}
	for i := range 3 {
		if err := c.Publish(ctx, "order", NewMessage([]byte("before"+strconv.Itoa(i)))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	// Reads may be served by any node; the slave has everything once it
	// caught up.
	waitTopic(t, slave.Addr, "order", seq("before", 0, 3))

	master.Kill()
	slave.Stop()
	slave.Args = nil // restarted without -role slave: a master on the slave's port and data
	slave.Restart()
	if err := c.Publish(ctx, "order", NewMessage([]byte("after0"))); err != nil {
		t.Fatalf("publish after the failover: %v", err)
	}
	if got := c.Master(); got != slave.Addr {
		t.Fatalf("master %q after the failover, want %s", got, slave.Addr)
	}
	if err := c.PublishBatch(ctx, "order", []*Message{NewMessage([]byte("after1")), NewMessage([]byte("after2"))}); err != nil {
		t.Fatal(err)
	}
	waitTopic(t, slave.Addr, "order", append(seq("before", 0, 3), seq("after", 0, 3)...))
}

// TestRetryAfterLostReplyKeepsID: the server stores a publish but its reply
// is lost; the client's retry carries the same id. A server without dedupe
// stores every attempt, each copy showing the one id; a dedupe server
// stores one. Either way no copy may carry another id. Without ids the
// call fails instead of storing twice.
func TestRetryAfterLostReplyKeepsID(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	admin := dialT(t, srv.Addr, Options{})
	for _, topic := range []string{"lost", "budget", "noid"} {
		if err := admin.CreateTopic(ctxT(t, 10*time.Second), topic); err != nil {
			t.Fatal(err)
		}
	}
	// sameID checks the copies stored by attempts requests.
	sameID := func(t *testing.T, ids []string, attempts int) {
		t.Helper()
		if len(ids) == 0 || len(ids) != attempts && len(ids) != 1 || !isMessageID(ids[0]) || len(slices.Compact(slices.Clone(ids))) != 1 {
			t.Fatalf("stored ids %q after %d attempts: want one id, stored once (dedupe) or per attempt", ids, attempts)
		}
	}
	opts := Options{HealthCheckInterval: -1, RetryBackoff: time.Millisecond, MaxRetries: 3}

	t.Run("one lost reply", func(t *testing.T) {
		p := startDropProxy(t, srv.Addr, 1)
		c := dialT(t, p.addr(), opts)
		if err := c.Publish(ctxT(t, 20*time.Second), "lost", NewMessage([]byte("m"))); err != nil {
			t.Fatalf("publish: %v", err)
		}
		if n := p.requests.Load(); n != 2 {
			t.Fatalf("%d requests, want 2", n)
		}
		sameID(t, msgIDs(topicMessages(t, srv.Addr, "lost")), 2)
	})
	t.Run("every reply lost", func(t *testing.T) {
		p := startDropProxy(t, srv.Addr, 1000)
		c := dialT(t, p.addr(), opts)
		err := c.Publish(ctxT(t, 20*time.Second), "budget", NewMessage([]byte("m")))
		if !errors.Is(err, ErrRetriesExhausted) || !errors.Is(err, io.EOF) {
			t.Fatalf("got %v, want retries exhausted wrapping the lost reply (EOF)", err)
		}
		if n := p.requests.Load(); n != 4 {
			t.Fatalf("%d requests, want 1 attempt + 3 retries", n)
		}
		sameID(t, msgIDs(topicMessages(t, srv.Addr, "budget")), 4)
	})
	t.Run("ids off", func(t *testing.T) {
		p := startDropProxy(t, srv.Addr, 1)
		o := opts
		o.DisableMessageIDs = true
		c := dialT(t, p.addr(), o)
		if err := c.Publish(ctxT(t, 20*time.Second), "noid", NewMessage([]byte("m"))); !errors.Is(err, io.EOF) || errors.Is(err, ErrRetriesExhausted) {
			t.Fatalf("got %v, want the lost reply without a retry", err)
		}
		if ids := msgIDs(topicMessages(t, srv.Addr, "noid")); !slices.Equal(ids, []string{""}) {
			t.Fatalf("stored ids %q, want one message without id", ids)
		}
	})
}

// TestSubscriberUsesNextAddress: a subscriber given [dead, slave]
// subscribes on the slave.
func TestSubscriberUsesNextAddress(t *testing.T) {
	master := testserver.Start(t, fastAlive)
	slave := testserver.StartSlave(t, master, fastAlive)
	c := dialT(t, master.Addr, Options{})
	if err := c.CreateTopic(ctxT(t, 10*time.Second), "t"); err != nil {
		t.Fatal(err)
	}
	publishN(t, c, "t", "m", 0, 3)
	waitTopic(t, slave.Addr, "t", seq("m", 0, 3))

	dead := "127.0.0.1:" + strconv.Itoa(testserver.FreePort(t))
	col := newCollector()
	col.stop = func(d []Delivery) bool { return len(d) >= 3 }
	s, err := NewSubscriber(dead, SubscriberConfig{Topic: "t", Who: "w", Addrs: []string{slave.Addr},
		Handler: col.handle, AfterAck: col.afterAck, MinBackoff: 10 * time.Millisecond, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if b := col.bodies(); !slices.Equal(b, seq("m", 0, 3)) {
		t.Fatalf("bodies %q", b)
	}
	if s.Addr() != slave.Addr {
		t.Errorf("subscribed at %s, want the slave %s", s.Addr(), slave.Addr)
	}
}

// TestDiscoverySkipsHungNode: of a master and its slave, the slave is
// frozen (SIGSTOP: its port accepts connections, nothing answers) and comes
// first among the addresses. A fresh client's first publish reaches the
// master within about the probe timeout, not after the hung probe's
// connection times out.
func TestDiscoverySkipsHungNode(t *testing.T) {
	master := testserver.Start(t, fastAlive)
	slave := testserver.StartSlave(t, master, fastAlive)
	admin := dialT(t, master.Addr, Options{HealthCheckInterval: -1})
	if err := admin.CreateTopic(ctxT(t, 10*time.Second), "order"); err != nil {
		t.Fatal(err)
	}
	slave.Freeze()
	defer slave.Thaw()
	start := time.Now()
	c := dialT(t, "", Options{Addrs: []string{slave.Addr, master.Addr}, HealthCheckInterval: -1})
	if err := c.Publish(ctxT(t, 30*time.Second), "order", NewMessage([]byte("m"))); err != nil {
		t.Fatalf("publish: %v", err)
	}
	// ProbeTimeout (1 s) plus start-up; before, discovery waited for the
	// hung probe for twice the dial timeout (10 s).
	if d := time.Since(start); d > 1800*time.Millisecond {
		t.Fatalf("first publish took %v with a hung node among the addresses", d)
	}
	if got := c.Master(); got != master.Addr {
		t.Fatalf("master %q, want %s", got, master.Addr)
	}
}

// quickQuiet lets a slave whose master stopped writing be promoted 200 ms
// later (replication.promoteQuietMs), where a manual promote of a slave
// whose master is still up waits for its stream to be quiet.
const quickQuiet = "replication:\n  promoteQuietMs: 200\n"

// promoteCaughtUp promotes the slave c is connected to once its status
// says its master streams no more writes (a promote before that is
// refused).
func promoteCaughtUp(t *testing.T, c *Client) {
	t.Helper()
	smsstest.WaitFor(t, 20*time.Second, "the slave's stream caught up", func() bool {
		st, err := c.Status(ctxT(t, 5*time.Second))
		return err == nil && st.Stream != nil && st.Stream.CaughtUp
	})
	if _, err := c.Promote(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("promote: %v", err)
	}
}

// TestPublishMovesOnNotConfirmed: a master that waits for one slave's
// confirmation (syncSlaves 1) loses it when the slave is promoted (a
// manual failover); its writes are refused "write not confirmed". A client
// publishing with message ids looks for the master again on that refusal
// and moves to the promoted slave, where each message is stored once.
func TestPublishMovesOnNotConfirmed(t *testing.T) {
	const sync = "replication:\n  syncSlaves: 1\n  syncTimeoutMs: 300\n"
	master := testserver.Start(t, fastAlive+sync)
	slave := testserver.StartSlave(t, master, fastAlive+quickQuiet)
	c := dialT(t, "", Options{Addrs: []string{master.Addr, slave.Addr}, HealthCheckInterval: -1,
		RetryBackoff: 20 * time.Millisecond})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "order"); err != nil {
		t.Fatalf("create: %v", err)
	}
	for i := range 3 {
		if err := c.Publish(ctx, "order", NewMessage([]byte("before"+strconv.Itoa(i)))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if got := c.Master(); got != master.Addr {
		t.Fatalf("master %q, want %s", got, master.Addr)
	}
	waitTopic(t, slave.Addr, "order", seq("before", 0, 3))

	sc := dialT(t, slave.Addr, Options{HealthCheckInterval: -1})
	promoteCaughtUp(t, sc)
	for i := range 3 {
		if err := c.Publish(ctx, "order", NewMessage([]byte("after"+strconv.Itoa(i)))); err != nil {
			t.Fatalf("publish %d after the promotion: %v", i, err)
		}
	}
	if got := c.Master(); got != slave.Addr {
		t.Fatalf("master %q after the promotion, want the promoted slave %s", got, slave.Addr)
	}
	waitTopic(t, slave.Addr, "order", append(seq("before", 0, 3), seq("after", 0, 3)...))
}

// TestSubscriberPrefersCurrentEpoch: of a master M and its slaves S1 and
// S2, S1 is promoted (epoch 1) while M, still a master of epoch 0, and S2,
// still following it, stay up. A subscriber given [M, S2, S1] subscribes on
// S1, the master of the newest epoch, and gets what was written there,
// not on M (first in its list), which would never deliver it. A frozen
// node costs the probe timeout only.
func TestSubscriberPrefersCurrentEpoch(t *testing.T) {
	m := testserver.Start(t, fastAlive)
	s1 := testserver.StartSlave(t, m, fastAlive+quickQuiet)
	s2 := testserver.StartSlave(t, m, fastAlive)
	mc := dialT(t, m.Addr, Options{HealthCheckInterval: -1})
	if err := mc.CreateTopic(ctxT(t, 10*time.Second), "t"); err != nil {
		t.Fatal(err)
	}
	publishN(t, mc, "t", "before", 0, 3)
	waitTopic(t, s1.Addr, "t", seq("before", 0, 3))
	waitTopic(t, s2.Addr, "t", seq("before", 0, 3))
	c1 := dialT(t, s1.Addr, Options{HealthCheckInterval: -1})
	promoteCaughtUp(t, c1)
	publishN(t, c1, "t", "after", 0, 2)

	run := func(t *testing.T, addrs []string, want []string) *Subscriber {
		t.Helper()
		col := newCollector()
		col.stop = func(d []Delivery) bool { return len(d) >= len(want) }
		s, err := NewSubscriber("", SubscriberConfig{Topic: "t", Who: "w", Addrs: addrs, Handler: col.handle,
			AfterAck: col.afterAck, MinBackoff: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Run(ctxT(t, 30*time.Second)); err != nil {
			t.Fatalf("Run: %v (got %q)", err, col.bodies())
		}
		if b := col.bodies(); !slices.Equal(b, want) {
			t.Fatalf("bodies %q, want %q", b, want)
		}
		return s
	}
	all := append(seq("before", 0, 3), seq("after", 0, 2)...)
	if s := run(t, []string{m.Addr, s2.Addr, s1.Addr}, all); s.Addr() != s1.Addr {
		t.Fatalf("subscribed at %s, want the epoch-1 master %s", s.Addr(), s1.Addr)
	}
	// A frozen node first: skipped after the probe timeout.
	s2.Freeze()
	defer s2.Thaw()
	start := time.Now()
	if s := run(t, []string{s2.Addr, s1.Addr}, all); s.Addr() != s1.Addr {
		t.Fatalf("subscribed at %s, want %s", s.Addr(), s1.Addr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v with a frozen node first", d)
	}
}

// TestTwoMastersOfOneEpochRefused: two masters at the same epoch (here two
// servers never promoted; by hand, two slaves of a dead master promoted
// both) are a split brain the client cannot resolve: whatever it wrote to
// one would be lost when that one rejoins the other. It writes to
// neither and says why; once one of them is a newer epoch's master, it
// writes there.
func TestTwoMastersOfOneEpochRefused(t *testing.T) {
	a := testserver.Start(t, fastAlive)
	b := testserver.Start(t, fastAlive)
	c := dialT(t, "", Options{Addrs: []string{a.Addr, b.Addr}, HealthCheckInterval: -1, MaxRetries: 1,
		RetryBackoff: 10 * time.Millisecond})
	ctx := ctxT(t, 30*time.Second)
	err := c.CreateTopic(ctx, "order")
	if !errors.Is(err, ErrTwoMasters) || !errors.Is(err, ErrNoMaster) || !strings.Contains(err.Error(), "both masters of epoch 0") {
		t.Fatalf("create with two masters of epoch 0: %v, want ErrTwoMasters", err)
	}
	for _, srv := range []*testserver.Server{a, b} {
		sc := dialT(t, srv.Addr, Options{HealthCheckInterval: -1})
		if st, err := sc.Status(ctx); err != nil || st.LastEventID != 0 {
			t.Fatalf("%s after the refused create: %+v %v, want nothing written", srv.Addr, st, err)
		}
	}
	// b becomes a slave of a, then is promoted: epoch 1 is b's alone.
	bs := testserver.StartSlave(t, a, fastAlive+quickQuiet)
	c2 := dialT(t, "", Options{Addrs: []string{a.Addr, bs.Addr}, HealthCheckInterval: -1})
	promoteCaughtUp(t, dialT(t, bs.Addr, Options{HealthCheckInterval: -1}))
	if err := c2.CreateTopic(ctx, "order"); err != nil {
		t.Fatalf("create once one master is of a newer epoch: %v", err)
	}
	if got := c2.Master(); got != bs.Addr {
		t.Fatalf("master %q, want the newer epoch's %s", got, bs.Addr)
	}
}
