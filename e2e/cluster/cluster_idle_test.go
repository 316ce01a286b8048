package cluster

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

// TestClusterIdleMasterFailsOver: a new cluster that has not taken a write
// yet still fails over. Its slaves are in the in-sync set within seconds of
// the election (the master's replica stream starts with an alive frame, on
// which a slave says its confirmation hello), so when the master is
// SIGKILLed before any write, another node is elected and accepts writes.
// Before, a slave of an idle master said hello only at the first alive
// frame, timeout.server.alive (30 s) later: a master that died in that
// window left the cluster with nobody to elect, for as long as it stayed
// down.
func TestClusterIdleMasterFailsOver(t *testing.T) {
	// The harness's configs send alive frames every 300 ms, which hid the
	// wait: these nodes keep the default timeout.server.alive (30 s).
	nodes := kit.StartClusterNodesWith(t, kit.ReplOptions{Flush: 1}, "replication:\n  syncSlaves: 1\n")
	master, epoch := kit.WaitClusterMaster(t, nodes, 0, 60*time.Second)
	// Well under timeout.server.alive: the join must wait neither for an
	// alive frame nor for a write.
	if !smsstest.Poll(10*time.Second, func() bool { return kit.HasEligibleInSync(master.Addr()) }) {
		st, _ := kit.ClusterStatusOf(master.Addr())
		t.Fatalf("no eligible in-sync slave of the idle master %s within 10 s: %+v\n%s", master.ID, st.Cluster, kit.Tail(master.P.Out.String(), 4000))
	}
	master.P.Kill()
	var rest []*kit.ClusterNode
	for _, n := range nodes {
		if n != master {
			rest = append(rest, n)
		}
	}
	next, e := kit.WaitClusterMaster(t, rest, epoch, 30*time.Second)
	if !smsstest.Poll(30*time.Second, func() bool {
		nc, err := net.DialTimeout("tcp", next.Addr(), time.Second)
		if err != nil {
			return false
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		c := &kit.Client{C: nc, R: bufio.NewReader(nc)}
		err = c.Create("after", 0)
		return err == nil || strings.Contains(err.Error(), "topic exist")
	}) {
		t.Fatalf("the elected master %s (epoch %d) never accepted a write\n%s", next.ID, e, kit.Tail(next.P.Out.String(), 4000))
	}
}
