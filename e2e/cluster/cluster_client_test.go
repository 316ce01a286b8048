package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	smssclient "github.com/smssmq/smss/client"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

// TestClusterClientFollowsMaster: a Go client given the three addresses of
// a -role auto cluster publishes with message ids while the master is
// frozen (SIGSTOP: its port accepts, nothing answers). Its publish times
// out, it looks for the master again, skips the hung node within the probe
// timeout and retries on the master the cluster elects; a fresh client's
// first publish while the old master is still frozen takes well under the
// probe timeout (the new master proves itself). The frozen node, continued,
// is fenced, steps down and rejoins. Every acknowledged message is on the
// new master exactly once.
func TestClusterClientFollowsMaster(t *testing.T) {
	nodes := kit.StartClusterNodes(t, "replication:\n  syncSlaves: 1\n  syncTimeoutMs: 2000\n  onSyncTimeout: fail\n")
	master, epoch := kit.WaitClusterMaster(t, nodes, 0, 60*time.Second)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	opts := smssclient.Options{Addrs: addrs, HealthCheckInterval: -1, AttemptTimeout: time.Second,
		MaxRetries: 30, RetryBackoff: 100 * time.Millisecond, MaxRetryBackoff: 500 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := smssclient.Dial(ctx, "", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Writes are refused until the cluster made a slave in sync.
	if !smsstest.Poll(60*time.Second, func() bool {
		err := c.CreateTopic(ctx, "t")
		return err == nil || errors.Is(err, smssclient.ErrTopicExist)
	}) {
		t.Fatalf("create never succeeded on the cluster's master %s\n%s", master.ID, kit.Tail(master.P.Out.String(), 4000))
	}
	var acked []string
	pub := func(c *smssclient.Client, body string) {
		t.Helper()
		if err := c.Publish(ctx, "t", smssclient.NewMessage([]byte(body))); err != nil {
			t.Fatalf("publish %s: %v\n%s", body, err, kit.Tail(master.P.Out.String(), 2000))
		}
		acked = append(acked, body)
	}
	for i := range 20 {
		pub(c, fmt.Sprintf("before-%d", i))
	}
	if c.Master() != master.Addr() {
		t.Fatalf("the client writes to %s, the cluster's master is %s", c.Master(), master.Addr())
	}
	// Frozen once a slave may be elected (before, the cluster rightly
	// elects nobody).
	if !smsstest.Poll(30*time.Second, func() bool { return kit.HasEligibleInSync(master.Addr()) }) {
		t.Fatalf("no eligible in-sync slave of %s\n%s", master.ID, kit.Tail(master.P.Out.String(), 4000))
	}
	master.P.Stop()
	frozen := true
	defer func() {
		if frozen {
			master.P.Cont()
		}
	}()
	if !smsstest.Poll(10*time.Second, func() bool { return kit.ProcState(master.P.Pid()) == 'T' }) {
		t.Fatalf("%s did not stop", master.ID)
	}
	start := time.Now()
	pub(c, "during") // times out on the frozen master, then finds the new one
	var rest []*kit.ClusterNode
	for _, n := range nodes {
		if n != master {
			rest = append(rest, n)
		}
	}
	next, _ := kit.WaitClusterMaster(t, rest, epoch, 30*time.Second)
	t.Logf("the publish in flight was acknowledged by %s %v after the freeze", c.Master(), time.Since(start).Round(time.Millisecond))
	if c.Master() != next.Addr() {
		t.Fatalf("the client writes to %s, the new master is %s", c.Master(), next.Addr())
	}

	fresh, err := smssclient.Dial(ctx, "", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	start = time.Now()
	pub(fresh, "fresh")
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("a fresh client's first publish took %v with the old master frozen (probe timeout 1 s)", d)
	}
	for i := range 20 {
		pub(c, fmt.Sprintf("after-%d", i))
	}

	master.P.Cont()
	frozen = false
	waitRejoined(t, next, master, 60*time.Second)
	for i := range 5 {
		pub(c, fmt.Sprintf("rejoined-%d", i))
	}
	for _, n := range nodes {
		if n != next {
			waitRejoined(t, next, n, 60*time.Second)
		}
	}
	got := kit.ReadAll(t, next.Addr(), "t", len(acked))
	slices.Sort(got)
	want := slices.Clone(acked)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the new master holds %d messages %q, want each of the %d acknowledged once: %q", len(got), got, len(want), want)
	}
}
