package admin

import (
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/admin"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/metrics"
)

// TestAdminReplicationViews runs a master and a slave with admin endpoints:
// the master lists the slave's stream with its address and position, the
// slave shows its link to the master, and the slave's readiness follows
// the link.
func TestAdminReplicationViews(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	mport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, kit.AdminConfig(kit.AdminToken))
	kit.ReplConfig(t, sdir, 0, kit.AdminConfig(kit.AdminToken))
	master := kit.StartArgs(t, mdir)
	madm := kit.AdminAddr(t, master)
	topics := []string{"ra", "rb"}
	c := kit.Dial(t, master.Addr)
	for _, tp := range topics {
		if err := c.Create(tp, 0); err != nil {
			t.Fatal(err)
		}
	}
	kit.ReplPublish(t, master.Addr, topics, 200, "adm")

	slave := kit.StartReplSlave(t, sdir, mport, 0)
	sadm := kit.AdminAddr(t, slave)
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), slave, 30*time.Second)

	var mi admin.Info
	kit.AdminJSON(t, madm, "/api/info", &mi)
	last := mi.LastEventID
	if last < 202 {
		t.Fatalf("master last eventId %d", last)
	}

	// The slave: streaming from the master, at its position, ready.
	var sr metrics.ReplicationInfo
	if !smsstest.Poll(10*time.Second, func() bool {
		kit.AdminJSON(t, sadm, "/api/replication", &sr)
		return sr.Master != nil && sr.Master.State == metrics.LinkStreaming && sr.Master.Position == last
	}) {
		t.Fatalf("slave replication view %+v master %+v", sr, sr.Master)
	}
	if sr.Role != metrics.RoleSlave || sr.Master.Addr != "127.0.0.1:"+strconv.Itoa(mport) || sr.Master.LagEvents != -1 ||
		sr.Master.LastContact <= 0 || sr.LastEventID != last || sr.Master.LagSeconds < 0 {
		t.Errorf("slave link %+v %+v", sr, sr.Master)
	}
	if code, body := kit.AdminGet(t, sadm, kit.AdminToken, "/readyz"); code != http.StatusOK {
		t.Errorf("slave /readyz %d %s", code, body)
	}
	var si admin.Info
	kit.AdminJSON(t, sadm, "/api/info", &si)
	if si.Role != metrics.RoleSlave || si.LastEventID != last {
		t.Errorf("slave info %+v", si)
	}
	kit.WaitMetric(t, sadm, kit.Series("smss_replication_connected"), 1)
	// Caught up: the next alive from the master says so.
	kit.WaitMetric(t, sadm, kit.Series("smss_replication_lag_seconds"), 0)
	sm := kit.Scrape(t, sadm)
	if got := sm[kit.Series("smss_topic_published_messages_total", "topic", "ra")] + sm[kit.Series("smss_topic_published_messages_total", "topic", "rb")]; got != 200 {
		t.Errorf("slave counted %v replicated messages, want 200", got)
	}

	// The master: one slave, at the master's last eventId, from the
	// slave's address.
	var mr metrics.ReplicationInfo
	if !smsstest.Poll(10*time.Second, func() bool {
		kit.AdminJSON(t, madm, "/api/replication", &mr)
		return len(mr.Slaves) == 1 && mr.Slaves[0].Position == last
	}) {
		t.Fatalf("master replication view %+v", mr)
	}
	if s := mr.Slaves[0]; s.LagEvents != 0 || !strings.HasPrefix(s.RemoteAddr, "127.0.0.1:") || s.Since <= 0 || mr.Role != metrics.RoleMaster {
		t.Errorf("master's slave %+v", s)
	}
	kit.WaitMetric(t, madm, kit.Series("smss_replication_slaves"), 1)
	kit.WaitMetric(t, madm, kit.Series("smss_replication_slave_lag_events", "slave", mr.Slaves[0].RemoteAddr), 0)

	// Without its master the slave is alive but not ready.
	master.Term()
	if !smsstest.Poll(15*time.Second, func() bool {
		code, _ := kit.AdminGet(t, sadm, kit.AdminToken, "/readyz")
		return code == http.StatusServiceUnavailable
	}) {
		t.Fatal("slave still ready after its master stopped")
	}
	code, body := kit.AdminGet(t, sadm, kit.AdminToken, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "replication") {
		t.Errorf("slave /readyz %d %q", code, body)
	}
	if code, _ := kit.AdminGet(t, sadm, "", "/healthz"); code != http.StatusOK {
		t.Errorf("slave /healthz %d", code)
	}
	kit.WaitMetric(t, sadm, kit.Series("smss_replication_connected"), 0)
	if !smsstest.Poll(15*time.Second, func() bool { return kit.Scrape(t, sadm)[kit.Series("smss_errors_total", "kind", "replication")] >= 1 }) {
		t.Error("the lost master was not counted as a replication error")
	}
	slave.Term()
}
