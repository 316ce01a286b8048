package kit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// ClusterNode is one -role auto process: its smss and raft ports stay.
type ClusterNode struct {
	Fnode
	ID   string
	Raft int
}

// ClusterStatus is the part of a status reply the test reads.
type ClusterStatus struct {
	Role        string `json:"role"`
	Epoch       uint64 `json:"epoch"`
	LastEventID int64  `json:"lastEventId"`
	// CommitPoint is how far the node serves subscribers (read-committed
	// delivery), for failure messages.
	CommitPoint int64 `json:"commitPoint"`
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

// ClusterStatusOf asks addr's status; ok false when it does not answer.
func ClusterStatusOf(addr string) (ClusterStatus, bool) {
	return ClusterStatusWithin(addr, 2*time.Second)
}

// ClusterStatusWithin is ClusterStatusOf waiting at most d (a hung node
// answers nothing).
func ClusterStatusWithin(addr string, d time.Duration) (ClusterStatus, bool) {
	var st ClusterStatus
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return st, false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write(Must(protocol.AppendStatus(nil, nil))); err != nil {
		return st, false
	}
	body, err := protocol.ReadReply(bufio.NewReader(c), protocol.ReplyJSON, 1<<20)
	if err != nil || json.Unmarshal(body, &st) != nil {
		return st, false
	}
	return st, true
}

// StartClusterNodes starts three -role auto nodes, a, b and c, each with
// its own directory, smss port and raft port, peers of each other, with
// extra added to every config.
func StartClusterNodes(t *testing.T, extra string) []*ClusterNode {
	t.Helper()
	return StartClusterNodesWith(t, ReplDefaults, extra)
}

// StartClusterNodesWith is StartClusterNodes with o's settings.
func StartClusterNodesWith(t *testing.T, o ReplOptions, extra string) []*ClusterNode {
	t.Helper()
	nodes := make([]*ClusterNode, 3)
	for i := range nodes {
		nodes[i] = &ClusterNode{Fnode: Fnode{Name: string(rune('a' + i)), Dir: t.TempDir(), Port: FreePort(t)},
			ID: string(rune('a' + i)), Raft: FreePort(t)}
	}
	var peers strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&peers, "    %s: {raft: \"127.0.0.1:%d\", addr: \"127.0.0.1:%d\"}\n", n.ID, n.Raft, n.Port)
	}
	for _, n := range nodes {
		ReplConfigWith(t, n.Dir, n.Port, o, extra+"cluster:\n  node: "+n.ID+"\n  peers:\n"+peers.String())
	}
	for _, n := range nodes {
		n.P = StartArgs(t, n.Dir, "-role", "auto")
	}
	return nodes
}

// HasEligibleInSync reports whether the master at addr has an in-sync
// slave the cluster may elect (before that it rightly elects nobody).
func HasEligibleInSync(addr string) bool {
	st, ok := ClusterStatusOf(addr)
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

// WaitClusterMaster returns the node that reports itself master of an
// epoch above after, not fenced, within d.
func WaitClusterMaster(t *testing.T, nodes []*ClusterNode, after uint64, d time.Duration) (*ClusterNode, uint64) {
	t.Helper()
	var found *ClusterNode
	var epoch uint64
	if !smsstest.Poll(d, func() bool {
		for _, n := range nodes {
			st, ok := ClusterStatusOf(n.Addr())
			if ok && st.Role == "master" && st.Epoch > after && st.Cluster != nil && st.Cluster.Master == n.ID &&
				st.Cluster.Epoch == st.Epoch && st.Cluster.Fenced == "" {
				found, epoch = n, st.Epoch
				return true
			}
		}
		return false
	}) {
		var b strings.Builder
		for _, n := range nodes {
			st, ok := ClusterStatusOf(n.Addr())
			fmt.Fprintf(&b, "%s: answered %v %+v cluster %+v\n%s\n", n.ID, ok, st, st.Cluster, Tail(n.P.Out.String(), 2500))
		}
		t.Fatalf("no master above epoch %d within %v\n%s", after, d, b.String())
	}
	return found, epoch
}

// DirtyReads fails when a subscriber was handed a message that is not in
// the master's history.
func DirtyReads(t *testing.T, dataDir string, topics []string, subs []*LiveSub, cycle int, fault string) {
	t.Helper()
	held := map[string]bool{}
	s := ReadStore(t, dataDir, topics)
	for _, blocks := range s.Topics {
		for _, blk := range blocks {
			held[BodyOf(t, blk.Record)] = true
		}
	}
	for _, sub := range subs {
		sub.Mu.Lock()
		got := append([]string(nil), sub.Got...)
		sub.Mu.Unlock()
		for _, b := range got {
			if !held[b] {
				t.Fatalf("cycle %d (%s): subscriber %s was handed %q, which the history after the failover does not hold", cycle, fault, sub.Name, b)
			}
		}
	}
}

// StoredPositionOnce waits until the consumer with a stored position was
// handed every message of its topic in the master's history, and fails if
// it took one twice (above the last eventId it acknowledged), one that
// history does not hold, or one again at another eventId.
func StoredPositionOnce(t *testing.T, dataDir string, fs *FollowSub, cycle int, fault string) {
	t.Helper()
	held := heldBodies(t, dataDir, fs.topic)
	if missing := awaitHanded(held, fs.Snapshot); len(missing) > 0 {
		t.Fatalf("cycle %d (%s): the stored-position consumer was never handed %d of the %d messages of %s (first %q); it subscribed %d times",
			cycle, fault, len(missing), len(held), fs.topic, missing[0], fs.Resubscribed.Load())
	}
	if ch := fs.historyChanged(); len(ch) > 0 {
		t.Fatalf("cycle %d (%s): the stored-position consumer was handed %q again at another eventId: the history it was shown changed", cycle, fault, ch[0])
	}
	dups := 0
	for b, n := range fs.Snapshot() {
		if !held[b] {
			t.Fatalf("cycle %d (%s): the stored-position consumer was handed %q, which the history does not hold", cycle, fault, b)
		}
		if n > 1 {
			dups++
		}
	}
	if dups > 0 {
		t.Fatalf("cycle %d (%s): the stored-position consumer was handed %d messages more than once", cycle, fault, dups)
	}
}

// ClientSubOnce waits until a Go client's subscriber was handed every
// message of its topic in the master's history, and fails if it was handed
// one twice or one that history does not hold. With read-committed
// delivery and onSyncTimeout fail no failover changes a history a consumer
// saw, so it never resumes before its position either.
func ClientSubOnce(t *testing.T, dataDir string, cs *ClientSub, cycle int, fault string) {
	t.Helper()
	held := heldBodies(t, dataDir, cs.topic)
	if missing := awaitHanded(held, func() map[string]int { got, _ := cs.Snapshot(); return got }); len(missing) > 0 {
		t.Fatalf("cycle %d (%s): %s was never handed %d of the %d messages of %s (first %q); it is %s",
			cycle, fault, cs.name, len(missing), len(held), cs.topic, missing[0], cs.state())
	}
	got, changes := cs.Snapshot()
	for b, n := range got {
		switch {
		case !held[b]:
			t.Fatalf("cycle %d (%s): %s was handed %q, which the history does not hold", cycle, fault, cs.name, b)
		case n > 1:
			t.Fatalf("cycle %d (%s): %s was handed %q %d times", cycle, fault, cs.name, b, n)
		}
	}
	if changes != 0 {
		t.Fatalf("cycle %d (%s): %s saw %d history changes; read-committed delivery allows none", cycle, fault, cs.name, changes)
	}
}
