package e2e

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// The operator's side of a cluster (issue 31 items 6 and 7) on real
// processes: smssctl cluster status, smssctl switchover, /api/cluster, the
// smss_cluster_* metrics, promote refused on a cluster node; and the
// safety check of a manual promote (refused when the slave is behind its
// master's commit point, accepted with --force).

// clusterOpsConfig is the nodes' config tail: semi-synchronous writes
// that fail rather than degrade, and the admin endpoint.
func clusterOpsConfig() string {
	return "replication:\n  syncSlaves: 1\n  syncTimeoutMs: 2000\n  onSyncTimeout: fail\n" + adminConfig(adminToken)
}

// waitClusterEligible waits until the master's in-sync set holds every
// other node, each eligible.
func waitClusterEligible(t *testing.T, master *clusterNode, members int, d time.Duration) {
	t.Helper()
	if !smsstest.Poll(d, func() bool {
		st, ok := clusterStatusOf(master.addr())
		if !ok || st.Cluster == nil || len(st.Cluster.InSync) != members {
			return false
		}
		for _, m := range st.Cluster.InSync {
			if !m.Eligible {
				return false
			}
		}
		return true
	}) {
		st, _ := clusterStatusOf(master.addr())
		t.Fatalf("the in-sync set of %s never held %d eligible members: %+v\n%s", master.id, members, st.Cluster, tail(master.p.out.String(), 3000))
	}
}

// clusterLogs is the consensus and agent lines of every node's output,
// for a failure's message.
func clusterLogs(nodes []*clusterNode) string {
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "--- %s\n", n.id)
		for _, l := range strings.Split(n.p.out.String(), "\n") {
			if strings.Contains(l, "component=cluster") || strings.Contains(l, "component=consensus") || strings.Contains(l, "level=ERROR") {
				b.WriteString(tail(l, 600) + "\n")
			}
		}
	}
	return b.String()
}

// clusterPublish publishes n messages to topic on addr, each acknowledged
// (retried while the cluster makes a slave in sync), and returns their
// bodies.
func clusterPublish(t *testing.T, addr, topic, prefix string, n int) []string {
	t.Helper()
	var bodies []string
	for i := 0; i < n; i++ {
		body := fmt.Sprintf("%s-%d", prefix, i)
		var err error
		if !smsstest.Poll(20*time.Second, func() bool {
			err = dial(t, addr).pub(topic, record(nil, body))
			return err == nil
		}) {
			t.Fatalf("publish %s to %s: %v", body, addr, err)
		}
		bodies = append(bodies, body)
	}
	return bodies
}

// checkAllThere fails unless every body is in topic on addr exactly once.
func checkAllThere(t *testing.T, addr, topic string, bodies []string) {
	t.Helper()
	got := subscribeAll(t, addr, topic)
	for _, b := range bodies {
		h, n := hex.EncodeToString([]byte(b)), 0
		for _, g := range got {
			if strings.HasSuffix(g, h) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("message %q is %d times in %s on %s (want once); %d messages", b, n, topic, addr, len(got))
		}
	}
}

func TestClusterOpsStatusSwitchover(t *testing.T) {
	nodes := startClusterNodes(t, clusterOpsConfig())
	master, epoch := waitClusterMaster(t, nodes, 0, 60*time.Second)
	if !smsstest.Poll(30*time.Second, func() bool {
		err := dial(t, master.addr()).create("ops", 0)
		return err == nil || strings.Contains(err.Error(), "topic exist")
	}) {
		t.Fatalf("create never succeeded on %s\n%s", master.id, tail(master.p.out.String(), 3000))
	}
	acked := clusterPublish(t, master.addr(), "ops", "before", 5)
	waitClusterEligible(t, master, 2, 30*time.Second)

	// cluster status, JSON: every node, the master's figures, the slaves
	// confirmed up to the master's last eventId.
	mst, _ := clusterStatusOf(master.addr())
	var rep protocol.ClusterReport
	if !smsstest.Poll(10*time.Second, func() bool {
		out, _, code := smssctl(t, master.addr(), "cluster", "status", "--json")
		rep = protocol.ClusterReport{}
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Nodes) != 3 {
			return false
		}
		for _, n := range rep.Nodes {
			if !n.Reachable || n.LastEventID != mst.LastEventID || n.Confirmed != mst.LastEventID {
				return false
			}
			// A slave may leave the in-sync set for a moment on a
			// loaded machine (isrLagMs) and come back.
			if n.Node != master.id && (!n.InSync || !n.Eligible) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("cluster status never showed three caught-up nodes, both slaves eligible: %+v (master last eventId %d)\n%s", rep, mst.LastEventID, clusterLogs(nodes))
	}
	if rep.Master != master.id || rep.Epoch != epoch || rep.Leader == "" || rep.Version == 0 {
		t.Errorf("cluster status: master %q epoch %d leader %q version %d; want %s, %d, a leader", rep.Master, rep.Epoch, rep.Leader, rep.Version, master.id, epoch)
	}
	leaders := 0
	for _, n := range rep.Nodes {
		isMaster := n.Node == master.id
		if n.Master != isMaster || (n.Role == "master") != isMaster || n.Epoch != epoch || n.Fenced != "" {
			t.Errorf("row %+v: want master %v at epoch %d, not fenced", n, isMaster, epoch)
		}
		if !isMaster && (!n.InSync || !n.Eligible) {
			t.Errorf("row %+v: a slave not eligible in sync", n)
		}
		if n.Leader {
			leaders++
			if n.Node != rep.Leader {
				t.Errorf("row %s marked leader, report leader %s", n.Node, rep.Leader)
			}
		}
	}
	if leaders != 1 {
		t.Errorf("%d rows marked consensus leader", leaders)
	}
	// The human table, asking all three addresses.
	var all []string
	for _, n := range nodes {
		all = append(all, n.addr())
	}
	out, errOut, code := smssctl(t, strings.Join(all, ","), "cluster", "status")
	if code != 0 {
		t.Fatalf("cluster status: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("smssctl cluster status:\n%s", out)
	for _, want := range []string{"NODE", fmt.Sprintf("cluster: epoch %d, master %s, consensus leader %s", epoch, master.id, rep.Leader),
		"(master)", "yes, eligible", strconv.FormatInt(mst.LastEventID, 10)} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster status table lacks %q:\n%s", want, out)
		}
	}

	// /api/cluster and the metrics, on every node.
	leaderGauges := 0.0
	for _, n := range nodes {
		adm := adminAddr(t, n.p)
		var api struct {
			Node string `json:"node"`
			protocol.ClusterReport
		}
		adminJSON(t, adm, "/api/cluster", &api)
		if api.Node != n.id || api.Master != master.id || api.Epoch != epoch || len(api.Nodes) != 3 {
			t.Errorf("/api/cluster of %s: %+v", n.id, api)
		}
		want := map[string]float64{"smss_cluster_epoch": float64(epoch), "smss_cluster_lease_valid": 1, "smss_cluster_fenced": 0,
			"smss_cluster_in_sync_members": 2, "smss_cluster_blocked": 0}
		if n == master {
			want["smss_cluster_is_master"] = 1
		} else {
			want["smss_cluster_is_master"] = 0
		}
		var m map[string]float64
		var bad []string
		// Polled: the in-sync set may shrink and grow back meanwhile.
		if !smsstest.Poll(10*time.Second, func() bool {
			m, bad = scrape(t, adm), nil
			for k, v := range want {
				if got, ok := m[k]; !ok || got != v {
					bad = append(bad, fmt.Sprintf("%s = %v (present %v), want %v", k, got, ok, v))
				}
			}
			return len(bad) == 0
		}) {
			t.Errorf("metrics of %s: %s", n.id, strings.Join(bad, "; "))
		}
		if m["smss_cluster_state_version"] < 1 {
			t.Errorf("smss_cluster_state_version on %s = %v", n.id, m["smss_cluster_state_version"])
		}
		leaderGauges += m["smss_cluster_is_raft_leader"]
	}
	if leaderGauges != 1 {
		t.Errorf("smss_cluster_is_raft_leader sums to %v over the nodes, want 1", leaderGauges)
	}

	// A cluster node refuses a manual promotion, pointing at switchover.
	var target *clusterNode
	for _, n := range nodes {
		if n != master && (target == nil || n.id < target.id) {
			target = n
		}
	}
	if out, errOut, code := smssctl(t, target.addr(), "promote"); code != 1 || !strings.Contains(errOut, "switchover") {
		t.Errorf("promote on a cluster node: exit %d\n%s%s", code, out, errOut)
	}
	// Refusals of switchover: the master itself, an unknown node.
	if _, errOut, code := smssctl(t, target.addr(), "switchover", master.id); code != 1 || !strings.Contains(errOut, "already the master") {
		t.Errorf("switchover to the master: exit %d %s", code, errOut)
	}
	if _, errOut, code := smssctl(t, target.addr(), "switchover", "zz"); code != 1 || !strings.Contains(errOut, `no node "zz"`) {
		t.Errorf("switchover to an unknown node: exit %d %s", code, errOut)
	}

	// A node that is not the consensus leader refuses naming the leader
	// and its address (where smssctl asks again).
	addrOf := map[string]string{}
	for _, n := range nodes {
		addrOf[n.id] = n.addr()
	}
	for _, n := range nodes {
		if n.id == rep.Leader {
			continue
		}
		_, err := dial(t, n.addr()).roundTrip(must(protocol.AppendSwitchover(nil, target.id, nil)), protocol.ReplyJSON)
		if id, addr, ok := protocol.ParseNotLeader(fmt.Sprint(err)); !ok || id != rep.Leader || addr != addrOf[rep.Leader] {
			t.Errorf("switchover at %s (not the leader %s): %v", n.id, rep.Leader, err)
		}
	}

	// The switchover, asked at the master (not necessarily the consensus
	// leader: the request follows the leader).
	start := time.Now()
	out, errOut, code = smssctl(t, master.addr(), "switchover", target.id, "--json")
	if code != 0 {
		t.Fatalf("switchover to %s: exit %d\n%s%s\n%s", target.id, code, out, errOut, tail(target.p.out.String(), 3000))
	}
	var sw struct {
		Master        string `json:"master"`
		Epoch         uint64 `json:"epoch"`
		PreviousEpoch uint64 `json:"previousEpoch"`
	}
	if err := json.Unmarshal([]byte(out), &sw); err != nil || sw.Master != target.id || sw.Epoch <= epoch || sw.PreviousEpoch != epoch {
		t.Fatalf("switchover --json: %q %v; want master %s above epoch %d", out, err, target.id, epoch)
	}
	t.Logf("switchover %s -> %s took %v", master.id, target.id, time.Since(start))
	next, e := waitClusterMaster(t, nodes, epoch, 20*time.Second)
	if next != target || e != sw.Epoch {
		t.Fatalf("after the switchover the master is %s at epoch %d, want %s at %d", next.id, e, target.id, sw.Epoch)
	}
	acked = append(acked, clusterPublish(t, next.addr(), "ops", "after", 5)...)
	checkAllThere(t, next.addr(), "ops", acked)
	if !smsstest.Poll(20*time.Second, func() bool {
		st, ok := clusterStatusOf(master.addr())
		return ok && st.Role == "slave" && st.Epoch == e
	}) {
		st, _ := clusterStatusOf(master.addr())
		t.Fatalf("the old master %s did not follow the new one: %+v\n%s", master.id, st, tail(master.p.out.String(), 3000))
	}
	if got := scrape(t, adminAddr(t, next.p))["smss_cluster_is_master"]; got != 1 {
		t.Errorf("smss_cluster_is_master on the new master = %v", got)
	}

	// Without NODE the cluster picks an eligible member: not the master.
	waitClusterEligible(t, next, 2, 30*time.Second)
	out, errOut, code = smssctl(t, next.addr(), "switchover")
	if code != 0 || !strings.Contains(out, "switchover done: ") {
		t.Fatalf("switchover without a node: exit %d\n%s%s\n%s", code, out, errOut, clusterLogs(nodes))
	}
	third, e3 := waitClusterMaster(t, nodes, e, 20*time.Second)
	if third == next {
		t.Fatalf("switchover without a node kept %s master", next.id)
	}
	if !strings.Contains(out, fmt.Sprintf("%s is master at epoch %d (was %s at epoch %d)", third.id, e3, next.id, e)) {
		t.Errorf("switchover output: %q", out)
	}
	acked = append(acked, clusterPublish(t, third.addr(), "ops", "third", 3)...)
	checkAllThere(t, third.addr(), "ops", acked)
}

// TestManualPromoteRefusedWhenBehind: a semi-synchronous master with a
// confirming slave s1 holds a backlog when a second slave s2 starts; the
// master is killed while s2 is still catching up (its last eventId below
// the commit point the master sent it). promote refuses on s2 naming what
// would be lost and succeeds with --force, printing the warning; the
// caught-up s1 is promoted without --force. A non-cluster node has no
// cluster metrics and no /api/cluster.
func TestManualPromoteRefusedWhenBehind(t *testing.T) {
	const backlog = 1500
	for attempt := 1; ; attempt++ {
		if manualPromoteBehind(t, backlog*attempt) {
			return
		}
		if attempt == 3 {
			t.Fatalf("s2 caught up before the master was killed in %d attempts: the backlog is too small for this machine", attempt)
		}
		t.Logf("attempt %d: s2 caught up before the kill; again with a larger backlog", attempt)
	}
}

// manualPromoteBehind runs the scenario once; false when s2 caught up
// before the kill (nothing to check).
func manualPromoteBehind(t *testing.T, backlog int) bool {
	extra := "replication:\n  syncSlaves: 1\n  syncTimeoutMs: 5000\n  onSyncTimeout: fail\n"
	m := &fnode{name: "M", dir: t.TempDir(), port: freePort(t)}
	replConfig(t, m.dir, m.port, extra+adminConfig(adminToken))
	m.p = startArgs(t, m.dir, "-role", "master")
	s1 := &fnode{name: "S1", dir: t.TempDir(), port: freePort(t)}
	replConfig(t, s1.dir, s1.port, "")
	s1.p = startReplSlave(t, s1.dir, m.port, 0)
	defer s1.p.stop()
	defer m.p.kill()

	if !smsstest.Poll(20*time.Second, func() bool {
		err := dial(t, m.addr()).create("behind", 0)
		return err == nil || strings.Contains(err.Error(), "topic exist")
	}) {
		t.Fatalf("create never confirmed\n%s", tail(m.p.out.String(), 3000))
	}
	// The backlog: every block acknowledged (s1 confirmed it).
	body := strings.Repeat("x", 2000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var pubErr error
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, m.addr())
			for i := 0; i < backlog/4; i++ {
				if err := c.pub("behind", record(nil, body), record(nil, body)); err != nil {
					mu.Lock()
					pubErr = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if pubErr != nil {
		t.Fatalf("backlog: %v", pubErr)
	}
	ms, _ := clusterStatusOf(m.addr())
	acked := ms.LastEventID

	// Non-cluster nodes: no cluster metrics, no /api/cluster.
	adm := adminAddr(t, m.p)
	if _, ok := scrape(t, adm)["smss_cluster_epoch"]; ok {
		t.Errorf("smss_cluster_epoch on a -role master node")
	}
	if code, _ := adminGet(t, adm, adminToken, "/api/cluster"); code != http.StatusNotFound {
		t.Errorf("/api/cluster on a -role master node: %d, want 404", code)
	}
	if _, err := dial(t, m.addr()).roundTrip(must(protocol.AppendSwitchover(nil, "b", nil)), protocol.ReplyJSON); err == nil ||
		!strings.Contains(err.Error(), "switchover needs a cluster") {
		t.Errorf("switchover on a -role master node: %v", err)
	}

	s2 := &fnode{name: "S2", dir: t.TempDir(), port: freePort(t)}
	replConfig(t, s2.dir, s2.port, "")
	s2.p = startReplSlave(t, s2.dir, m.port, 0)
	defer s2.p.stop()
	if !smsstest.Poll(20*time.Second, func() bool {
		st, ok := clusterStatusOf(s2.addr())
		return ok && st.LastEventID > 0
	}) {
		t.Fatalf("s2 never applied anything\n%s", tail(s2.p.out.String(), 3000))
	}
	m.p.kill()
	st2, ok := clusterStatusOf(s2.addr())
	if !ok {
		t.Fatalf("s2 does not answer status")
	}
	if st2.LastEventID >= acked {
		return false
	}
	// s1 holds everything: promoted without --force.
	if !smsstest.Poll(10*time.Second, func() bool {
		st, ok := clusterStatusOf(s1.addr())
		return ok && st.LastEventID == acked
	}) {
		t.Fatalf("s1 does not hold the acknowledged writes (last %d)", acked)
	}
	if out, errOut, code := smssctl(t, s1.addr(), "promote"); code != 0 || strings.Contains(errOut, "WARNING") {
		t.Errorf("promote of the caught-up s1: exit %d\n%s%s", code, out, errOut)
	}
	// s2 is behind: refused, nothing changed.
	out, errOut, code := smssctl(t, s2.addr(), "promote")
	if code != 1 || !strings.Contains(errOut, "promote refused") || !strings.Contains(errOut, "--force") {
		t.Fatalf("promote of s2 at %d (acknowledged %d): exit %d\n%s%s", st2.LastEventID, acked, code, out, errOut)
	}
	if st, _ := clusterStatusOf(s2.addr()); st.Role != "slave" {
		t.Fatalf("a refused promotion changed the role: %+v", st)
	}
	out, errOut, code = smssctl(t, s2.addr(), "promote", "--force")
	if code != 0 || !strings.Contains(errOut, "WARNING: forced promotion") || !strings.Contains(out, "promoted to master") {
		t.Fatalf("promote --force of s2: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("s2 promoted at last eventId %d of %d acknowledged: %s", st2.LastEventID, acked, strings.TrimSpace(errOut))
	return true
}

// TestFollowRefusesDivergedMaster: follow to a master whose binlog this
// slave's is not a prefix of is refused (exit 1, the reason named) instead
// of answering 200 and stopping the slave at its first session; the slave
// keeps following its master.
func TestFollowRefusesDivergedMaster(t *testing.T) {
	x := &fnode{name: "X", dir: t.TempDir(), port: freePort(t)}
	y := &fnode{name: "Y", dir: t.TempDir(), port: freePort(t)}
	s := &fnode{name: "S", dir: t.TempDir(), port: freePort(t)}
	for _, n := range []*fnode{x, y, s} {
		replConfig(t, n.dir, n.port, "")
	}
	x.p = startArgs(t, x.dir, "-role", "master")
	y.p = startArgs(t, y.dir, "-role", "master")
	s.p = startReplSlave(t, s.dir, x.port, 0)
	defer s.p.stop()
	defer x.p.stop()
	defer y.p.stop()
	cx, cy := dial(t, x.addr()), dial(t, y.addr())
	if err := cx.create("fx", 0); err != nil {
		t.Fatal(err)
	}
	if err := cy.create("fy", 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := cy.pub("fy", record(nil, fmt.Sprintf("y%d", i))); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if err := cx.pub("fx", record(nil, fmt.Sprintf("x%d", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitReplicated(t, x.data(), s.data(), s.p, 20*time.Second)
	out, errOut, code := smssctl(t, s.addr(), "follow", y.addr())
	if code != 1 || !strings.Contains(errOut, "not a prefix") || !strings.Contains(errOut, "-rejoin") {
		t.Fatalf("follow to a diverged master: exit %d\n%s%s\n%s", code, out, errOut, tail(s.p.out.String(), 3000))
	}
	// Still S's master is X, and S still applies what X writes.
	if err := cx.pub("fx", record(nil, "x-after")); err != nil {
		t.Fatal(err)
	}
	waitReplicated(t, x.data(), s.data(), s.p, 20*time.Second)
	if st := statusOf(t, s.addr()); st.Role != "slave" || st.Master != x.addr() {
		t.Fatalf("after the refused follow S is %+v, want a slave of %s", st, x.addr())
	}
	// A follow to a master it is a prefix of is accepted.
	if _, errOut, code := smssctl(t, s.addr(), "follow", x.addr()); code != 0 {
		t.Fatalf("follow to the same master: exit %d %s", code, errOut)
	}
}
