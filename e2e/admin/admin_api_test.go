package admin

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/admin"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/topicblock"
)

// topicDiskBytes sums a topic's *.log files as stored.
func topicDiskBytes(t *testing.T, dataDir, topic string) int64 {
	t.Helper()
	dir := topicblock.Dir(filepath.Join(dataDir, "topic"), []byte(topic), 10)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			st, err := os.Stat(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			n += st.Size()
		}
	}
	return n
}

// TestAdminAPIAgainstServer runs the real binary with the admin endpoint,
// publishes, subscribes part-way and checks probes, protection, /metrics
// and every JSON endpoint against what was done.
func TestAdminAPIAgainstServer(t *testing.T) {
	dir := t.TempDir()
	// Many wrong tokens below: raise the wrong-token throttle (it follows
	// auth.maxFailures) out of the way.
	// Stored positions are written only when the subscription ends (not
	// every second), so that the eventIds checked below are the test's own.
	kit.WriteConfig(t, dir, kit.AdminConfig(kit.AdminToken)+"auth:\n  maxFailures: 1000\ncursor:\n  flushMs: 600000\n")
	p := kit.Start(t, dir)
	adm := kit.AdminAddr(t, p)

	// Liveness and the dashboard page are public; everything else is not.
	if code, body := kit.AdminGet(t, adm, "", "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz %d %q", code, body)
	}
	if code, body := kit.AdminGet(t, adm, "", "/"); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Fatalf("dashboard page %d", code)
	}
	// /readyz is public like /healthz: probes carry no token.
	if code, body := kit.AdminGet(t, adm, "", "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz without a token: %d %q", code, body)
	}
	for _, path := range []string{"/metrics", "/api/info", "/api/topics", "/api/subscribers",
		"/api/replication", "/api/delays", "/api/snapshot", "/debug/pprof/", "/debug/pprof/cmdline"} {
		for _, tok := range []string{"", "wrong-token-0123456789"} {
			if code, _ := kit.AdminGet(t, adm, tok, path); code != http.StatusUnauthorized {
				t.Errorf("%s with token %q: %d, want 401", path, tok, code)
			}
		}
	}
	if code, body := kit.AdminGet(t, adm, kit.AdminToken, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d %s", code, body)
	}
	if code, body := kit.AdminGet(t, adm, kit.AdminToken, "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ with the token: %d", code)
	}
	if code, body := kit.AdminGet(t, adm, kit.AdminToken, "/debug/pprof/cmdline"); code != http.StatusOK || !strings.Contains(body, "config.yaml") {
		t.Errorf("/debug/pprof/cmdline with the token: %d %q", code, body)
	}

	pub := kit.NewPublisher(t, p.Addr)
	pub.Create("orders") // 1
	pub.Create("audit")  // 2
	ra, rb, rc := kit.Record(nil, "a"), kit.Record(nil, "bb"), kit.Record(nil, "ccc")
	pub.Pub("orders", ra, rb) // 3, 4
	pub.Pub("orders", rc)     // 5
	pub.Pub("audit", kit.Record(nil, "x"))
	if err := pub.C.Delay("orders", 3_600_000, kit.Record(nil, "later")); err != nil { // 7
		t.Fatal(err)
	}
	if err := pub.C.Pub("missing", ra); err == nil {
		t.Fatal("pub to a missing topic succeeded")
	}

	// A subscriber that acknowledged the first frame (3, 4) and holds the
	// second (5) unacknowledged.
	sub := kit.Dial(t, p.Addr)
	if err := sub.Sub("orders", "billing", 0, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if u, err := sub.NextData(10 * time.Second); err != nil || len(u.Msgs) != 2 || u.Msgs[1].EventID != 4 {
		t.Fatalf("first frame %v %v", u, err)
	}
	if err := sub.Ack(0); err != nil {
		t.Fatal(err)
	}
	if u, err := sub.NextData(10 * time.Second); err != nil || len(u.Msgs) != 1 || u.Msgs[0].EventID != 5 {
		t.Fatalf("second frame %v %v", u, err)
	}

	pubBytes := float64(len(ra) + len(rb) + len(rc))
	for _, c := range []struct {
		series string
		want   float64
	}{
		{kit.Series("smss_topic_publishes_total", "topic", "orders"), 2},
		{kit.Series("smss_topic_published_messages_total", "topic", "orders"), 3},
		{kit.Series("smss_topic_published_bytes_total", "topic", "orders"), pubBytes},
		{kit.Series("smss_topic_published_messages_total", "topic", "audit"), 1},
		{kit.Series("smss_topic_delivered_messages_total", "topic", "orders"), 3},
		{kit.Series("smss_topic_delivered_bytes_total", "topic", "orders"), pubBytes},
		{kit.Series("smss_subscribers"), 1},
		{kit.Series("smss_subscriber_position", "topic", "orders", "who", "billing"), 4},
		{kit.Series("smss_subscriber_lag_events", "topic", "orders", "who", "billing"), 1},
		{kit.Series("smss_topic_last_event_id", "topic", "orders"), 5},
		{kit.Series("smss_topic_disk_bytes", "topic", "orders"), float64(topicDiskBytes(t, filepath.Join(dir, "data"), "orders"))},
		{kit.Series("smss_topics", "state", "normal"), 2},
		{kit.Series("smss_last_event_id"), 7},
		{kit.Series("smss_delayed_pending"), 1},
		{kit.Series("smss_delayed_pending_due", "within", "1h"), 1},
		{kit.Series("smss_request_duration_seconds_count", "command", "pub"), 4},
		{kit.Series("smss_request_errors_total", "command", "pub"), 1},
		{kit.Series("smss_request_duration_seconds_count", "command", "sub"), 1},
		{kit.Series("smss_errors_total", "kind", "business"), 1},
		{kit.Series("smss_connections_open"), 2},
		{kit.Series("smss_replication_slaves"), 0},
	} {
		kit.WaitMetric(t, adm, c.series, c.want)
	}
	// flushLevel 1 fsyncs within a second of the writes.
	var m map[string]float64
	smsstest.Poll(10*time.Second, func() bool {
		m = kit.Scrape(t, adm)
		return m["smss_fsync_duration_seconds_count"] >= 1
	})
	if m["smss_group_commit_commands_count"] < 1 || m["smss_fsync_duration_seconds_count"] < 1 || m["go_goroutines"] <= 0 {
		t.Errorf("group commits %v, fsyncs %v, goroutines %v", m["smss_group_commit_commands_count"],
			m["smss_fsync_duration_seconds_count"], m["go_goroutines"])
	}

	var topics []admin.TopicView
	kit.AdminJSON(t, adm, "/api/topics", &topics)
	if len(topics) != 2 || topics[0].Name != "audit" || topics[1].Name != "orders" {
		t.Fatalf("/api/topics %+v", topics)
	}
	o := topics[1]
	if o.Status != metrics.TopicStateNormal || o.Stats == nil || o.Stats.FirstEventID != 3 || o.Stats.LastEventID != 5 ||
		o.Stats.Bytes != topicDiskBytes(t, filepath.Join(dir, "data"), "orders") || o.Stats.Files != 1 || o.Stats.LastWriteTime <= 0 ||
		o.Counters == nil || o.Counters.Messages != 3 || o.Counters.DelivMsgs != 3 || o.Subscribers != 1 || o.CreateEventID != 1 {
		t.Errorf("orders %+v stats %+v counters %+v", o, o.Stats, o.Counters)
	}
	if topics[0].Subscribers != 0 || topics[0].Stats == nil || topics[0].Stats.LastEventID != 6 {
		t.Errorf("audit %+v stats %+v", topics[0], topics[0].Stats)
	}

	var subs []metrics.SubscriberInfo
	kit.AdminJSON(t, adm, "/api/subscribers", &subs)
	if len(subs) != 1 {
		t.Fatalf("/api/subscribers %+v", subs)
	}
	if s := subs[0]; s.Topic != "orders" || s.Who != "billing" || s.RemoteAddr != sub.C.LocalAddr().String() ||
		s.StartEventID != 0 || s.Position != 4 || s.Delivered != 5 || s.Lag != 1 || s.Since <= 0 {
		t.Errorf("subscriber %+v (client %s)", s, sub.C.LocalAddr())
	}

	var info admin.Info
	kit.AdminJSON(t, adm, "/api/info", &info)
	if info.ListenAddr != p.Addr || info.Role != metrics.RoleMaster || info.LastEventID != 7 || !info.Ready ||
		!info.AuthRequired || info.BinlogBytes <= 0 || info.Config["admin.token"] != "<redacted>" || info.Config["store.path"] == nil {
		t.Errorf("/api/info %+v", info)
	}
	if strings.Contains(p.Out.String(), kit.AdminToken) {
		t.Error("the admin token appears in the server log")
	}

	var delays metrics.DelayStats
	kit.AdminJSON(t, adm, "/api/delays", &delays)
	if delays.Pending != 1 || delays.NextDue <= time.Now().UnixMilli() {
		t.Errorf("/api/delays %+v", delays)
	}
	var repl metrics.ReplicationInfo
	kit.AdminJSON(t, adm, "/api/replication", &repl)
	if repl.Role != metrics.RoleMaster || len(repl.Slaves) != 0 || repl.LastEventID != 7 {
		t.Errorf("/api/replication %+v", repl)
	}

	// Ending the subscription removes it; deleting a topic drops its series.
	if err := sub.Ack(1); err != nil {
		t.Fatal(err)
	}
	kit.WaitMetric(t, adm, kit.Series("smss_subscribers"), 0)
	if err := pub.C.Del("audit"); err != nil {
		t.Fatal(err)
	}
	smsstest.Poll(10*time.Second, func() bool {
		_, ok := kit.Scrape(t, adm)[kit.Series("smss_topic_published_messages_total", "topic", "audit")]
		return !ok
	})
	if _, ok := kit.Scrape(t, adm)[kit.Series("smss_topic_published_messages_total", "topic", "audit")]; ok {
		t.Error("a deleted topic keeps its counter series")
	}
	kit.WaitMetric(t, adm, kit.Series("smss_published_messages_total"), 4)
	p.Term()
}

// TestAdminOpenWithoutToken: without admin.token every endpoint answers,
// and the start-up log says the endpoint is protected by nothing.
func TestAdminOpenWithoutToken(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, kit.AdminConfig(""))
	p := kit.Start(t, dir)
	adm := kit.AdminAddr(t, p)
	for _, path := range []string{"/readyz", "/metrics", "/api/topics", "/debug/pprof/"} {
		if code, _ := kit.AdminGet(t, adm, "", path); code != http.StatusOK {
			t.Errorf("%s without a token on an open endpoint: %d", path, code)
		}
	}
	if !strings.Contains(p.Out.String(), "auth=false") {
		t.Error("admin start-up line does not say auth=false")
	}
	p.Term()
}
