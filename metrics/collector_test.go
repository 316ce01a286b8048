package metrics_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/metrics/metricstest"
	"github.com/smssmq/smss/protocol"
)

func fakeState() metricstest.State {
	now := time.Now().UnixMilli()
	delays := metrics.NewDelayStats()
	for _, due := range []int64{now - 5, now + 30_000, now + 120_000, now + 40*24*3600*1000} {
		delays.Add(now, due)
	}
	return metricstest.State{
		Topics: []protocol.TopicInfo{
			{Name: "orders", CreateTime: now - 1000},
			{Name: "tmp", ExpireAt: 1}, // expired long ago, not reaped
			{Name: "old", State: protocol.TopicStateDeleted},
			{Name: "x\xff"},
			{Name: "x\xfe"}, // same label as x\xff: only the first is exported
		},
		Stats: map[string]metrics.TopicStats{
			"orders": {Bytes: 4096, Files: 1, Messages: 40, FirstEventID: 1, LastEventID: 90},
			"tmp":    {Bytes: 10, Messages: -1, LastEventID: 5},
			"x\xff":  {Bytes: 1, Messages: 1, LastEventID: 7},
			"x\xfe":  {Bytes: 2, Messages: 2, LastEventID: 8},
		},
		Subscribers: []metrics.SubscriberInfo{
			{Topic: "orders", Who: "billing", Position: 80, Lag: 10},
			{Topic: "orders", Who: "audit", Position: 90, Lag: 0},
		},
		Replication: metrics.ReplicationInfo{Role: metrics.RoleMaster, LastEventID: 90, Slaves: []metrics.SlaveInfo{
			{RemoteAddr: "10.0.0.2:5000", Position: 70, LagEvents: 20},
			{RemoteAddr: "10.0.0.3:5000", Position: 90, Confirming: true, Confirmed: 88, ConfirmLatencySeconds: 0.002},
		}, Sync: &metrics.SyncInfo{SyncSlaves: 1, Confirming: 1, Waiting: 3, Degraded: true, TimeoutsFail: 0, TimeoutsDegrade: 2, Unconfirmed: 7, BeforeSync: true}},
		Delays: delays,
		Info: metrics.ServerInfo{Version: "v1.2.3", Role: metrics.RoleMaster, StartTime: 1_700_000_000_000, LastEventID: 90, Epoch: 3, BinlogBytes: 1 << 20, BinlogFiles: 2,
			Certificates: []metrics.CertificateInfo{
				{Key: "tls.cert", Subject: "CN=server", NotAfter: 1_800_000_000_000},
				{Key: "replication.cert", Subject: "CN=slave", NotAfter: 1_800_000_500_000},
				{Key: "tls.cert", Subject: "CN=duplicate", NotAfter: 1}, // same series: the first wins
			}},
	}
}

func TestSourceCollector(t *testing.T) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	if _, ok := families(t, m)["smss_info"]; ok {
		t.Fatal("source gauges exported without a source")
	}
	fake := metricstest.NewFake(fakeState())
	m.SetSource(fake)
	f := families(t, m)
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"smss_info", map[string]string{"version": "v1.2.3", "role": "master"}, 1},
		{"smss_start_time_seconds", nil, 1_700_000_000},
		{"smss_last_event_id", nil, 90},
		{"smss_binlog_disk_bytes", nil, 1 << 20},
		{"smss_binlog_files", nil, 2},
		{"smss_promotion_epoch", nil, 3},
		{"smss_is_master", nil, 1},
		{"smss_topics", map[string]string{"state": "normal"}, 3},
		{"smss_topics", map[string]string{"state": "expired"}, 1},
		{"smss_topics", map[string]string{"state": "deleted"}, 1},
		{"smss_topic_disk_bytes", map[string]string{"topic": "orders"}, 4096},
		{"smss_topic_disk_bytes", map[string]string{"topic": "tmp"}, 10},
		{"smss_topic_disk_bytes", map[string]string{"topic": "x\uFFFD"}, 1},
		{"smss_topic_messages", map[string]string{"topic": "orders"}, 40},
		{"smss_topic_last_event_id", map[string]string{"topic": "orders"}, 90},
		{"smss_subscribers", nil, 2},
		{"smss_subscriber_lag_events", map[string]string{"topic": "orders", "who": "billing"}, 10},
		{"smss_subscriber_lag_events", map[string]string{"topic": "orders", "who": "audit"}, 0},
		{"smss_subscriber_position", map[string]string{"topic": "orders", "who": "billing"}, 80},
		{"smss_replication_slaves", nil, 2},
		{"smss_replication_slave_confirmed_event_id", map[string]string{"slave": "10.0.0.3:5000"}, 88},
		{"smss_replication_slave_confirm_latency_seconds", map[string]string{"slave": "10.0.0.3:5000"}, 0.002},
		{"smss_replication_sync_slaves", nil, 1},
		{"smss_replication_sync_confirming_slaves", nil, 1},
		{"smss_replication_sync_waiting_writes", nil, 3},
		{"smss_replication_sync_degraded", nil, 1},
		{"smss_replication_sync_before_fsync", nil, 1},
		{"smss_replication_sync_timeouts_total", map[string]string{"mode": "fail"}, 0},
		{"smss_replication_sync_timeouts_total", map[string]string{"mode": "degrade"}, 2},
		{"smss_replication_sync_unconfirmed_writes_total", nil, 7},
		{"smss_replication_slave_lag_events", map[string]string{"slave": "10.0.0.2:5000"}, 20},
		{"smss_delayed_pending", nil, 4},
		{"smss_delayed_pending_due", map[string]string{"within": "1m"}, 2},
		{"smss_delayed_pending_due", map[string]string{"within": "10m"}, 1},
		{"smss_delayed_pending_due", map[string]string{"within": "1h"}, 0},
		{"smss_delayed_pending_due", map[string]string{"within": "later"}, 1},
		{"smss_tls_certificate_expiry_timestamp_seconds", map[string]string{"key": "tls.cert"}, 1_800_000_000},
		{"smss_tls_certificate_expiry_timestamp_seconds", map[string]string{"key": "replication.cert"}, 1_800_000_500},
	}
	for _, tc := range tests {
		if got := value(t, f, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if _, ok := sample(t, f, "smss_topic_messages", map[string]string{"topic": "tmp"}); ok {
		t.Error("unknown message count (-1) exported")
	}
	if _, ok := sample(t, f, "smss_topic_disk_bytes", map[string]string{"topic": "old"}); ok {
		t.Error("deleted topic exported disk bytes")
	}
	if _, ok := sample(t, f, "smss_replication_slave_confirmed_event_id", map[string]string{"slave": "10.0.0.2:5000"}); ok {
		t.Error("a non-confirming slave exported a confirmed position")
	}
	if _, ok := f["smss_replication_connected"]; ok {
		t.Error("slave gauges exported on a master")
	}

	// A slave exports its link instead; a failing Topics is counted, not fatal.
	fake.Update(func(s *metricstest.State) {
		s.Replication = metrics.ReplicationInfo{Role: metrics.RoleSlave, Master: &metrics.MasterLink{
			Addr: "10.0.0.1:12301", State: metrics.LinkStreaming, LagEvents: -1, LagSeconds: 1.5, QuietMs: 2500, CaughtUp: true}}
		s.FailTopics = true
		s.Info.Certificates = nil
		s.Info.Role = metrics.RoleSlave
	})
	f = families(t, m)
	if got := value(t, f, "smss_is_master", nil); got != 0 {
		t.Errorf("is_master on a slave = %v", got)
	}
	if _, ok := f["smss_tls_certificate_expiry_timestamp_seconds"]; ok {
		t.Error("certificate expiry exported without a certificate")
	}
	if got := value(t, f, "smss_replication_connected", nil); got != 1 {
		t.Errorf("replication_connected = %v", got)
	}
	if got := value(t, f, "smss_replication_lag_seconds", nil); got != 1.5 {
		t.Errorf("replication_lag_seconds = %v", got)
	}
	if got := value(t, f, "smss_replication_caught_up", nil); got != 1 {
		t.Errorf("replication_caught_up = %v", got)
	}
	if _, ok := f["smss_replication_lag_events"]; ok {
		t.Error("unknown slave lag (-1) exported")
	}
	if _, ok := f["smss_topics"]; ok {
		t.Error("topic gauges exported although Topics failed")
	}
	if got := value(t, f, "smss_source_errors_total", nil); got != 1 {
		t.Errorf("source_errors_total = %v, want 1", got)
	}
}

func TestDelayStatsBuckets(t *testing.T) {
	const now = 1_000_000
	minute := int64(60_000)
	tests := []struct {
		in   int64 // due - now
		want string
	}{
		{-10 * minute, "1m"}, // overdue
		{0, "1m"},
		{minute, "1m"},
		{minute + 1, "10m"},
		{59 * minute, "1h"},
		{23 * 60 * minute, "1d"},
		{6 * 24 * 60 * minute, "7d"},
		{8 * 24 * 60 * minute, "later"},
	}
	for _, tc := range tests {
		var s metrics.DelayStats // the zero value works too
		s.Add(now, now+tc.in)
		var got []string
		for _, b := range s.Buckets {
			if b.Count > 0 {
				got = append(got, b.Label)
			}
		}
		if strings.Join(got, ",") != tc.want || s.Pending != 1 || s.NextDue != now+tc.in {
			t.Errorf("due in %d ms: buckets %v pending %d next %d, want %s", tc.in, got, s.Pending, s.NextDue, tc.want)
		}
	}
	s := metrics.NewDelayStats()
	s.Add(now, now+500)
	s.Add(now, now+100)
	if s.NextDue != now+100 || len(s.Buckets) != len(metrics.DelayBucketBounds)+1 {
		t.Fatalf("NextDue %d, %d buckets", s.NextDue, len(s.Buckets))
	}
}

func TestBetweenRatesAndQuantiles(t *testing.T) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	m.ObserveRequest(protocol.CmdPub, 100*time.Second, true) // before the window
	prev := m.Read()
	// 98 fast pubs in (0.5 ms, 1 ms], one slow info, one slow pub; subs are
	// streams and must not count.
	for range 98 {
		m.ObserveRequest(protocol.CmdPub, 800*time.Microsecond, true)
	}
	m.ObserveRequest(protocol.CmdTopicInfo, 40*time.Millisecond, true)
	m.ObserveRequest(protocol.CmdPub, 40*time.Millisecond, true)
	m.ObserveRequest(protocol.CmdSub, time.Hour, true)
	m.Published("a", 10, 1000)
	m.Published("b", 20, 2000)
	m.Delivered("a", 5, 500)
	m.ConnOpened()
	cur := m.Read()
	cur.At = prev.At.Add(2 * time.Second)
	r := metrics.Between(prev, cur)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
	checks := []struct {
		name      string
		got, want float64
	}{
		{"seconds", r.Seconds, 2},
		{"publishes/s", r.PublishesPerSec, 1},
		{"msgs/s", r.MsgsPerSec, 15},
		{"bytes/s", r.BytesPerSec, 1500},
		{"delivered msgs/s", r.DeliveredMsgsPerSec, 2.5},
		{"delivered bytes/s", r.DeliveredBytesPerSec, 250},
		{"requests/s", r.RequestsPerSec, 50},
		// rank 50 of 100, 98 samples in (0.5, 1] ms: 0.5 + 0.5*50/98.
		{"p50", r.P50Ms, 0.5 + 0.5*50/98},
		// rank 99: the first of the two samples in (25, 50] ms.
		{"p99", r.P99Ms, 25 + 25*1.0/2},
		// pub only: 99 samples; rank 49.5 and 98.01.
		{"pub p50", r.PubP50Ms, 0.5 + 0.5*49.5/98},
		{"pub p99", r.PubP99Ms, 25 + 25*0.01/1},
		{"connections", float64(r.Connections), 1},
	}
	for _, c := range checks {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	idle := metrics.Between(cur, metrics.Reading{At: cur.At.Add(time.Second)})
	if idle.P50Ms != -1 || idle.PubP99Ms != -1 || idle.MsgsPerSec != 0 {
		t.Errorf("idle window: %+v", idle)
	}
	if z := metrics.Between(cur, cur); z.Seconds != 0 || z.P50Ms != -1 {
		t.Errorf("empty window: %+v", z)
	}
	// An observation above every bound reports the top bound.
	before := m.Read()
	m.ObserveRequest(protocol.CmdPub, time.Minute, true)
	after := m.Read()
	if got := metrics.Between(before, after).PubP99Ms; got != 10_000 {
		t.Errorf("p99 of a +Inf sample = %v ms, want 10000", got)
	}
}

// Stored positions are exported per (topic, who) whether or not the
// subscriber is connected; an unknown lag (-1) is left out.
func TestCursorGauges(t *testing.T) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	st := fakeState()
	st.Cursors = []metrics.CursorInfo{
		{Topic: "orders", Who: "billing", EventID: 80, Lag: 12},
		{Topic: "orders", Who: "gone", EventID: 3, Lag: 500},
		{Topic: "orders", Who: "unknown", EventID: 7, Lag: -1},
	}
	m.SetSource(metricstest.NewFake(st))
	f := families(t, m)
	for _, tc := range []struct {
		name, who string
		want      float64
	}{
		{"smss_cursor_lag_messages", "billing", 12},
		{"smss_cursor_lag_messages", "gone", 500},
		{"smss_cursor_position", "gone", 3},
		{"smss_cursor_position", "unknown", 7},
	} {
		if got := value(t, f, tc.name, map[string]string{"topic": "orders", "who": tc.who}); got != tc.want {
			t.Errorf("%s{who=%s} = %v, want %v", tc.name, tc.who, got, tc.want)
		}
	}
	if _, ok := sample(t, f, "smss_cursor_lag_messages", map[string]string{"topic": "orders", "who": "unknown"}); ok {
		t.Error("unknown lag exported")
	}
}
