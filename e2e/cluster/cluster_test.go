package cluster

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

// Automatic failover on real processes (issue 31): three -role auto nodes
// whose embedded consensus elects the master. Eight publishers (single and
// 10-record requests, each with a message id, retried with the same id
// until acknowledged) write to whichever node the cluster made master; the
// master is killed with SIGKILL at random moments and nobody acts: the
// cluster elects a new one, and the killed node comes back -role auto and
// rejoins by itself. After every cycle every acknowledged message is on
// the new master exactly once, in its publisher's order, and every node's
// binlog is the master's byte for byte. SMSS_CLUSTER_CYCLES sets the
// cycles (default 1).

func TestClusterAutoFailover(t *testing.T) {
	// One by default: TestClusterChaos kills the master too, among its
	// other faults.
	cycles := 1
	if s := os.Getenv("SMSS_CLUSTER_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SMSS_CLUSTER_CYCLES=%q: want a positive integer", s)
		}
		cycles = n
	}
	nodes := kit.StartClusterNodes(t, "replication:\n  syncSlaves: 1\n  syncTimeoutMs: 2000\n  onSyncTimeout: fail\n")
	master, epoch := kit.WaitClusterMaster(t, nodes, 0, 60*time.Second)
	topics := []string{"c0", "c1", "c2", "c3"}
	// The creates are refused until the cluster made a slave in sync.
	for _, name := range topics {
		if !smsstest.Poll(60*time.Second, func() bool {
			nc, err := net.DialTimeout("tcp", master.Addr(), time.Second)
			if err != nil {
				return false
			}
			c := &kit.Client{C: nc, R: bufio.NewReader(nc)}
			defer nc.Close()
			err = c.Create(name, 0)
			return err == nil || strings.Contains(err.Error(), "topic exist")
		}) {
			t.Fatalf("create %s never succeeded on the cluster's master %s\n%s", name, master.ID, kit.Tail(master.P.Out.String(), 4000))
		}
	}
	l := kit.NewFailoverLoad(master.Addr(), topics)
	l.Start(8)
	defer l.Finish()
	var times []time.Duration
	for cycle := 0; cycle < cycles; cycle++ {
		target := l.AckedCount.Load() + 200
		if !smsstest.Poll(60*time.Second, func() bool { return l.AckedCount.Load() >= target }) {
			t.Fatalf("cycle %d: only %d of %d acknowledgements\n%s", cycle, l.AckedCount.Load(), target, kit.Tail(master.P.Out.String(), 4000))
		}
		// Killed once a slave may be elected: before the cluster made one
		// eligible it rightly elects nobody (it cannot prove that one
		// holds every acknowledged write).
		if !smsstest.Poll(30*time.Second, func() bool { return kit.HasEligibleInSync(master.Addr()) }) {
			t.Fatalf("cycle %d: no eligible in-sync slave of %s\n%s", cycle, master.ID, kit.Tail(master.P.Out.String(), 4000))
		}
		master.P.Kill()
		killed := time.Now()
		var rest []*kit.ClusterNode
		for _, n := range nodes {
			if n != master {
				rest = append(rest, n)
			}
		}
		next, e := kit.WaitClusterMaster(t, rest, epoch, 30*time.Second)
		l.SetAddr(next.Addr())
		// Failover time: from the kill to the first write the new master
		// acknowledges.
		before := l.AckedCount.Load()
		if !smsstest.Poll(30*time.Second, func() bool { return l.AckedCount.Load() > before }) {
			t.Fatalf("cycle %d: the new master %s acknowledged nothing\n%s", cycle, next.ID, kit.Tail(next.P.Out.String(), 4000))
		}
		took := time.Since(killed)
		times = append(times, took)
		old := master
		master, epoch = next, e
		old.P = kit.StartArgs(t, old.Dir, "-role", "auto")

		l.Pause()
		for _, n := range nodes {
			if n != master {
				waitRejoined(t, master, n, 60*time.Second)
			}
		}
		if lost := l.Verify(t, master.Data(), cycle); lost != 0 {
			t.Fatalf("cycle %d: %d acknowledged messages lost", cycle, lost)
		}
		t.Logf("cycle %d: %s elected at epoch %d, first write acknowledged %v after the kill; %d acknowledged so far",
			cycle, master.ID, epoch, took.Round(time.Millisecond), l.AckedCount.Load())
		l.Resume()
	}
	l.Finish()
	for _, n := range nodes {
		if n != master {
			waitRejoined(t, master, n, 60*time.Second)
		}
	}
	if lost := l.Verify(t, master.Data(), cycles); lost != 0 {
		t.Fatalf("%d acknowledged messages lost", lost)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	t.Logf("%d automatic failovers: %d acknowledged, 0 lost, %d refused as unconfirmed, %d retries; failover time min %v median %v max %v",
		cycles, l.AckedCount.Load(), l.Refused.Load(), l.Retried.Load(), times[0], times[len(times)/2], times[len(times)-1])
	if max := times[len(times)-1]; max > 15*time.Second {
		t.Fatalf("a failover took %v", max)
	}
}

// waitRejoined waits until n's binlog is master's byte for byte. A node
// that held a divergent tail (an old master) differs until it rejoined by
// itself: that is allowed, until the deadline.
func waitRejoined(t *testing.T, master, n *kit.ClusterNode, d time.Duration) {
	t.Helper()
	if !smsstest.Poll(d, func() bool {
		m, s := kit.ReplBinlog(t, master.Data()), kit.ReplBinlog(t, n.Data())
		return len(m) > 0 && bytes.Equal(m, s)
	}) {
		m, s := kit.ReplBinlog(t, master.Data()), kit.ReplBinlog(t, n.Data())
		t.Fatalf("%s's binlog (%d bytes) is not %s's (%d bytes) after %v; common prefix %d\n%s", n.ID, len(s), master.ID, len(m), d,
			kit.ReplCommon(m, s), kit.Tail(n.P.Out.String(), 4000))
	}
}
