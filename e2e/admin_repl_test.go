package e2e

import (
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/admin"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/metrics"
)

// TestAdminReplicationViews runs a master and a slave with admin endpoints:
// the master lists the slave's stream with its address and position, the
// slave shows its link to the master, and the slave's readiness follows
// the link.
func TestAdminReplicationViews(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	mport := freePort(t)
	replConfig(t, mdir, mport, adminConfig(adminToken))
	replConfig(t, sdir, 0, adminConfig(adminToken))
	master := startArgs(t, mdir)
	madm := adminAddr(t, master)
	topics := []string{"ra", "rb"}
	c := dial(t, master.addr)
	for _, tp := range topics {
		if err := c.create(tp, 0); err != nil {
			t.Fatal(err)
		}
	}
	replPublish(t, master.addr, topics, 200, "adm")

	slave := startReplSlave(t, sdir, mport, 0)
	sadm := adminAddr(t, slave)
	waitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), slave, 30*time.Second)

	var mi admin.Info
	adminJSON(t, madm, "/api/info", &mi)
	last := mi.LastEventID
	if last < 202 {
		t.Fatalf("master last eventId %d", last)
	}

	// The slave: streaming from the master, at its position, ready.
	var sr metrics.ReplicationInfo
	if !smsstest.Poll(10*time.Second, func() bool {
		adminJSON(t, sadm, "/api/replication", &sr)
		return sr.Master != nil && sr.Master.State == metrics.LinkStreaming && sr.Master.Position == last
	}) {
		t.Fatalf("slave replication view %+v master %+v", sr, sr.Master)
	}
	if sr.Role != metrics.RoleSlave || sr.Master.Addr != "127.0.0.1:"+strconv.Itoa(mport) || sr.Master.LagEvents != -1 ||
		sr.Master.LastContact <= 0 || sr.LastEventID != last || sr.Master.LagSeconds < 0 {
		t.Errorf("slave link %+v %+v", sr, sr.Master)
	}
	if code, body := adminGet(t, sadm, adminToken, "/readyz"); code != http.StatusOK {
		t.Errorf("slave /readyz %d %s", code, body)
	}
	var si admin.Info
	adminJSON(t, sadm, "/api/info", &si)
	if si.Role != metrics.RoleSlave || si.LastEventID != last {
		t.Errorf("slave info %+v", si)
	}
	waitMetric(t, sadm, series("smss_replication_connected"), 1)
	// Caught up: the next alive from the master says so.
	waitMetric(t, sadm, series("smss_replication_lag_seconds"), 0)
	sm := scrape(t, sadm)
	if got := sm[series("smss_topic_published_messages_total", "topic", "ra")] + sm[series("smss_topic_published_messages_total", "topic", "rb")]; got != 200 {
		t.Errorf("slave counted %v replicated messages, want 200", got)
	}

	// The master: one slave, at the master's last eventId, from the
	// slave's address.
	var mr metrics.ReplicationInfo
	if !smsstest.Poll(10*time.Second, func() bool {
		adminJSON(t, madm, "/api/replication", &mr)
		return len(mr.Slaves) == 1 && mr.Slaves[0].Position == last
	}) {
		t.Fatalf("master replication view %+v", mr)
	}
	if s := mr.Slaves[0]; s.LagEvents != 0 || !strings.HasPrefix(s.RemoteAddr, "127.0.0.1:") || s.Since <= 0 || mr.Role != metrics.RoleMaster {
		t.Errorf("master's slave %+v", s)
	}
	waitMetric(t, madm, series("smss_replication_slaves"), 1)
	waitMetric(t, madm, series("smss_replication_slave_lag_events", "slave", mr.Slaves[0].RemoteAddr), 0)

	// Without its master the slave is alive but not ready.
	master.stop()
	if !smsstest.Poll(15*time.Second, func() bool {
		code, _ := adminGet(t, sadm, adminToken, "/readyz")
		return code == http.StatusServiceUnavailable
	}) {
		t.Fatal("slave still ready after its master stopped")
	}
	code, body := adminGet(t, sadm, adminToken, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "replication") {
		t.Errorf("slave /readyz %d %q", code, body)
	}
	if code, _ := adminGet(t, sadm, "", "/healthz"); code != http.StatusOK {
		t.Errorf("slave /healthz %d", code)
	}
	waitMetric(t, sadm, series("smss_replication_connected"), 0)
	if !smsstest.Poll(15*time.Second, func() bool { return scrape(t, sadm)[series("smss_errors_total", "kind", "replication")] >= 1 }) {
		t.Error("the lost master was not counted as a replication error")
	}
	slave.stop()
}
