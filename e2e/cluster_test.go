package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
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

// clusterNode is one -role auto process: its smss and raft ports stay.
type clusterNode struct {
	fnode
	id   string
	raft int
}

// clusterStatus is the part of a status reply the test reads.
type clusterStatus struct {
	Role        string `json:"role"`
	Epoch       uint64 `json:"epoch"`
	LastEventID int64  `json:"lastEventId"`
	Cluster     *struct {
		Master string `json:"master"`
		Epoch  uint64 `json:"epoch"`
		Fenced string `json:"fenced"`
		Leader string `json:"leader"`
		InSync []struct {
			Node     string `json:"node"`
			Eligible bool   `json:"eligible"`
		} `json:"inSync"`
	} `json:"cluster"`
}

// clusterStatusOf asks addr's status; ok false when it does not answer.
func clusterStatusOf(addr string) (clusterStatus, bool) {
	return clusterStatusWithin(addr, 2*time.Second)
}

// clusterStatusWithin is clusterStatusOf waiting at most d (a hung node
// answers nothing).
func clusterStatusWithin(addr string, d time.Duration) (clusterStatus, bool) {
	var st clusterStatus
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return st, false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write(must(protocol.AppendStatus(nil, nil))); err != nil {
		return st, false
	}
	body, err := protocol.ReadReply(bufio.NewReader(c), protocol.ReplyJSON, 1<<20)
	if err != nil || json.Unmarshal(body, &st) != nil {
		return st, false
	}
	return st, true
}

func startClusterNodes(t *testing.T, extra string) []*clusterNode {
	t.Helper()
	nodes := make([]*clusterNode, 3)
	for i := range nodes {
		nodes[i] = &clusterNode{fnode: fnode{name: string(rune('a' + i)), dir: t.TempDir(), port: freePort(t)},
			id: string(rune('a' + i)), raft: freePort(t)}
	}
	var peers strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&peers, "    %s: {raft: \"127.0.0.1:%d\", addr: \"127.0.0.1:%d\"}\n", n.id, n.raft, n.port)
	}
	for _, n := range nodes {
		replConfig(t, n.dir, n.port, extra+"cluster:\n  node: "+n.id+"\n  peers:\n"+peers.String())
	}
	for _, n := range nodes {
		n.p = startArgs(t, n.dir, "-role", "auto")
	}
	return nodes
}

// hasEligibleInSync reports whether the master at addr has an in-sync
// slave the cluster may elect (before that it rightly elects nobody).
func hasEligibleInSync(addr string) bool {
	st, ok := clusterStatusOf(addr)
	if !ok || st.Cluster == nil {
		return false
	}
	for _, m := range st.Cluster.InSync {
		if m.Eligible {
			return true
		}
	}
	return false
}

// waitClusterMaster returns the node that reports itself master of an
// epoch above after, not fenced, within d.
func waitClusterMaster(t *testing.T, nodes []*clusterNode, after uint64, d time.Duration) (*clusterNode, uint64) {
	t.Helper()
	var found *clusterNode
	var epoch uint64
	if !smsstest.Poll(d, func() bool {
		for _, n := range nodes {
			st, ok := clusterStatusOf(n.addr())
			if ok && st.Role == "master" && st.Epoch > after && st.Cluster != nil && st.Cluster.Master == n.id &&
				st.Cluster.Epoch == st.Epoch && st.Cluster.Fenced == "" {
				found, epoch = n, st.Epoch
				return true
			}
		}
		return false
	}) {
		var b strings.Builder
		for _, n := range nodes {
			st, ok := clusterStatusOf(n.addr())
			fmt.Fprintf(&b, "%s: answered %v %+v cluster %+v\n%s\n", n.id, ok, st, st.Cluster, tail(n.p.out.String(), 2500))
		}
		t.Fatalf("no master above epoch %d within %v\n%s", after, d, b.String())
	}
	return found, epoch
}

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
	nodes := startClusterNodes(t, "replication:\n  syncSlaves: 1\n  syncTimeoutMs: 2000\n  onSyncTimeout: fail\n")
	master, epoch := waitClusterMaster(t, nodes, 0, 60*time.Second)
	topics := []string{"c0", "c1", "c2", "c3"}
	// The creates are refused until the cluster made a slave in sync.
	for _, name := range topics {
		if !smsstest.Poll(60*time.Second, func() bool {
			nc, err := net.DialTimeout("tcp", master.addr(), time.Second)
			if err != nil {
				return false
			}
			c := &client{c: nc, r: bufio.NewReader(nc)}
			defer nc.Close()
			err = c.create(name, 0)
			return err == nil || strings.Contains(err.Error(), "topic exist")
		}) {
			t.Fatalf("create %s never succeeded on the cluster's master %s\n%s", name, master.id, tail(master.p.out.String(), 4000))
		}
	}
	l := newFailoverLoad(master.addr(), topics)
	l.start(8)
	defer l.finish()
	var times []time.Duration
	for cycle := 0; cycle < cycles; cycle++ {
		target := l.ackedCount.Load() + 200
		if !smsstest.Poll(60*time.Second, func() bool { return l.ackedCount.Load() >= target }) {
			t.Fatalf("cycle %d: only %d of %d acknowledgements\n%s", cycle, l.ackedCount.Load(), target, tail(master.p.out.String(), 4000))
		}
		// Killed once a slave may be elected: before the cluster made one
		// eligible it rightly elects nobody (it cannot prove that one
		// holds every acknowledged write).
		if !smsstest.Poll(30*time.Second, func() bool { return hasEligibleInSync(master.addr()) }) {
			t.Fatalf("cycle %d: no eligible in-sync slave of %s\n%s", cycle, master.id, tail(master.p.out.String(), 4000))
		}
		master.p.kill()
		killed := time.Now()
		var rest []*clusterNode
		for _, n := range nodes {
			if n != master {
				rest = append(rest, n)
			}
		}
		next, e := waitClusterMaster(t, rest, epoch, 30*time.Second)
		l.setAddr(next.addr())
		// Failover time: from the kill to the first write the new master
		// acknowledges.
		before := l.ackedCount.Load()
		if !smsstest.Poll(30*time.Second, func() bool { return l.ackedCount.Load() > before }) {
			t.Fatalf("cycle %d: the new master %s acknowledged nothing\n%s", cycle, next.id, tail(next.p.out.String(), 4000))
		}
		took := time.Since(killed)
		times = append(times, took)
		old := master
		master, epoch = next, e
		old.p = startArgs(t, old.dir, "-role", "auto")

		l.pause()
		for _, n := range nodes {
			if n != master {
				waitRejoined(t, master, n, 60*time.Second)
			}
		}
		if lost := l.verify(t, master.data(), cycle); lost != 0 {
			t.Fatalf("cycle %d: %d acknowledged messages lost", cycle, lost)
		}
		t.Logf("cycle %d: %s elected at epoch %d, first write acknowledged %v after the kill; %d acknowledged so far",
			cycle, master.id, epoch, took.Round(time.Millisecond), l.ackedCount.Load())
		l.resume()
	}
	l.finish()
	for _, n := range nodes {
		if n != master {
			waitRejoined(t, master, n, 60*time.Second)
		}
	}
	if lost := l.verify(t, master.data(), cycles); lost != 0 {
		t.Fatalf("%d acknowledged messages lost", lost)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	t.Logf("%d automatic failovers: %d acknowledged, 0 lost, %d refused as unconfirmed, %d retries; failover time min %v median %v max %v",
		cycles, l.ackedCount.Load(), l.refused.Load(), l.retried.Load(), times[0], times[len(times)/2], times[len(times)-1])
	if max := times[len(times)-1]; max > 15*time.Second {
		t.Fatalf("a failover took %v", max)
	}
}

// waitRejoined waits until n's binlog is master's byte for byte. A node
// that held a divergent tail (an old master) differs until it rejoined by
// itself: that is allowed, until the deadline.
func waitRejoined(t *testing.T, master, n *clusterNode, d time.Duration) {
	t.Helper()
	if !smsstest.Poll(d, func() bool {
		m, s := replBinlog(t, master.data()), replBinlog(t, n.data())
		return len(m) > 0 && bytes.Equal(m, s)
	}) {
		m, s := replBinlog(t, master.data()), replBinlog(t, n.data())
		t.Fatalf("%s's binlog (%d bytes) is not %s's (%d bytes) after %v; common prefix %d\n%s", n.id, len(s), master.id, len(m), d,
			replCommon(m, s), tail(n.p.out.String(), 4000))
	}
}
