package metrics_test

import (
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// families gathers m's registry by family name.
func families(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// sample finds the series of family name whose labels equal want exactly.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, bool) {
	t.Helper()
	mf := fams[name]
	if mf == nil {
		return nil, false
	}
next:
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, lp := range m.GetLabel() {
			if v, ok := want[lp.GetName()]; !ok || v != lp.GetValue() {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

// value is the counter, gauge or histogram count of one series.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m, ok := sample(t, fams, name, labels)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Fatalf("series %s%v has no value", name, labels)
	return 0
}

func labelsOf(fams map[string]*dto.MetricFamily, name string) []string {
	var out []string
	for _, m := range fams[name].GetMetric() {
		var kv []string
		for _, lp := range m.GetLabel() {
			kv = append(kv, lp.GetName()+"="+lp.GetValue())
		}
		out = append(out, strings.Join(kv, ","))
	}
	sort.Strings(out)
	return out
}

func TestNilMetricsIsNoop(t *testing.T) {
	var m *metrics.Metrics
	m.ObserveRequest(protocol.CmdPub, time.Millisecond, true)
	m.Published("a", 1, 2)
	m.PublishedBytes([]byte("a"), 1, 2)
	m.Delivered("a", 1, 2)
	m.DeliveredBytes([]byte("a"), 1, 2)
	m.TopicDeleted("a")
	m.ObserveGroup(1, 2)
	m.ObserveFsync(time.Millisecond)
	m.ConnOpened()
	m.ConnClosed()
	m.Error(metrics.KindIO)
	m.SetSource(nil)
	if m.Source() != nil || m.Registry() != nil {
		t.Fatal("nil Metrics returned non-nil")
	}
	if r := metrics.Between(m.Read(), m.Read()); r.MsgsPerSec != 0 {
		t.Fatalf("rates on nil metrics: %+v", r)
	}
}

func TestRecordedFamilies(t *testing.T) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	m.ObserveRequest(protocol.CmdPub, 2*time.Millisecond, true)
	m.ObserveRequest(protocol.CmdPub, 3*time.Millisecond, false)
	m.ObserveRequest(protocol.CmdCreate, time.Millisecond, true)
	m.ObserveRequest(protocol.Command(42), time.Millisecond, false)
	m.Published("orders", 3, 300)
	m.PublishedBytes([]byte("orders"), 2, 200)
	m.Published("audit", 1, 10)
	m.Delivered("orders", 4, 400)
	m.DeliveredBytes([]byte("orders"), 1, 100)
	m.ObserveGroup(7, 4096)
	m.ObserveFsync(4 * time.Millisecond)
	m.ConnOpened()
	m.ConnOpened()
	m.ConnClosed()
	m.Error(metrics.KindIO)
	m.Error(metrics.KindIO)
	m.Error("custom")

	f := families(t, m)
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"smss_request_duration_seconds", map[string]string{"command": "pub"}, 2},
		{"smss_request_duration_seconds", map[string]string{"command": "create"}, 1},
		{"smss_request_duration_seconds", map[string]string{"command": "other"}, 1},
		{"smss_request_errors_total", map[string]string{"command": "pub"}, 1},
		{"smss_request_errors_total", map[string]string{"command": "create"}, 0},
		{"smss_request_errors_total", map[string]string{"command": "other"}, 1},
		{"smss_topic_publishes_total", map[string]string{"topic": "orders"}, 2},
		{"smss_topic_published_messages_total", map[string]string{"topic": "orders"}, 5},
		{"smss_topic_published_bytes_total", map[string]string{"topic": "orders"}, 500},
		{"smss_topic_published_messages_total", map[string]string{"topic": "audit"}, 1},
		{"smss_topic_delivered_messages_total", map[string]string{"topic": "orders"}, 5},
		{"smss_topic_delivered_bytes_total", map[string]string{"topic": "orders"}, 500},
		{"smss_published_messages_total", nil, 6},
		{"smss_published_bytes_total", nil, 510},
		{"smss_delivered_messages_total", nil, 5},
		{"smss_delivered_bytes_total", nil, 500},
		{"smss_group_commit_commands", nil, 1},
		{"smss_group_commit_bytes", nil, 1},
		{"smss_fsync_duration_seconds", nil, 1},
		{"smss_connections_open", nil, 1},
		{"smss_connections_total", nil, 2},
		{"smss_errors_total", map[string]string{"kind": "io"}, 2},
		{"smss_errors_total", map[string]string{"kind": "custom"}, 1},
		{"smss_errors_total", map[string]string{"kind": "fsync"}, 0},
	}
	for _, tc := range tests {
		if got := value(t, f, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	want := metrics.TopicCounters{Publishes: 2, Messages: 5, Bytes: 500, DelivMsgs: 5, DelivBytes: 500}
	if got, ok := m.TopicCounters("orders"); !ok || got != want {
		t.Errorf("TopicCounters(orders) = %+v %v, want %+v", got, ok, want)
	}
	if _, ok := m.TopicCounters("nothing"); ok {
		t.Error("TopicCounters of an unseen topic reported ok")
	}
	// Every acceptable command has its own series from the start.
	cmds := labelsOf(f, "smss_request_duration_seconds")
	for _, c := range []string{"sub", "pub", "create", "delete", "delay", "alive", "replica", "info", "validList", "list", "delayApply", "other"} {
		if i := sort.SearchStrings(cmds, "command="+c); i == len(cmds) || cmds[i] != "command="+c {
			t.Errorf("no request_duration_seconds series for %s (have %v)", c, cmds)
		}
	}
	h, _ := sample(t, f, "smss_request_duration_seconds", map[string]string{"command": "pub"})
	if s := h.GetHistogram().GetSampleSum(); math.Abs(s-0.005) > 1e-9 {
		t.Errorf("pub latency sum = %v, want 0.005", s)
	}
	if _, ok := f["go_goroutines"]; ok {
		t.Error("NoRuntime still registered the Go collector")
	}
	if _, ok := families(t, metrics.New())["go_goroutines"]; !ok {
		t.Error("New did not register the Go collector")
	}
}

func TestTopicDeletedDropsSeries(t *testing.T) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	m.Published("gone", 1, 1)
	m.Published("kept", 1, 1)
	m.TopicDeleted("gone")
	m.TopicDeleted("never-seen")
	f := families(t, m)
	if got := labelsOf(f, "smss_topic_published_messages_total"); strings.Join(got, " ") != "topic=/other topic=kept" {
		t.Fatalf("series after delete: %v", got)
	}
	if got := value(t, f, "smss_published_messages_total", nil); got != 2 {
		t.Fatalf("total after delete = %v, want 2 (totals survive deletion)", got)
	}
	// A recreated topic starts from zero.
	m.Published("gone", 4, 1)
	if got := value(t, families(t, m), "smss_topic_published_messages_total", map[string]string{"topic": "gone"}); got != 4 {
		t.Fatalf("recreated topic = %v, want 4", got)
	}
}

func TestTopicLabelsInvalidUTF8AndCap(t *testing.T) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true, MaxTopics: 2})
	m.PublishedBytes([]byte("a\xff"), 1, 1)
	m.PublishedBytes([]byte("a\xfe"), 1, 1) // same label as a\xff
	m.Published("b", 1, 1)
	m.Published("c", 2, 1) // over the cap
	m.Published("d", 3, 1) // over the cap
	f := families(t, m)
	want := map[string]float64{"a\uFFFD": 2, "b": 1, metrics.OtherTopicLabel: 5}
	if got := labelsOf(f, "smss_topic_published_messages_total"); len(got) != len(want) {
		t.Fatalf("series = %q, want labels of %v", got, want)
	}
	for label, n := range want {
		if got := value(t, f, "smss_topic_published_messages_total", map[string]string{"topic": label}); got != n {
			t.Errorf("topic %q = %v, want %v", label, got, n)
		}
	}
	// The shared label goes away only with the last name using it, and the
	// freed slot is reused.
	m.TopicDeleted("a\xff")
	if _, ok := sample(t, families(t, m), "smss_topic_published_messages_total", map[string]string{"topic": "a\uFFFD"}); !ok {
		t.Fatal("label dropped while a\\xfe still uses it")
	}
	m.TopicDeleted("a\xfe")
	m.Published("e", 1, 1)
	if got := value(t, families(t, m), "smss_topic_published_messages_total", map[string]string{"topic": "e"}); got != 1 {
		t.Fatalf("topic e after a slot was freed = %v, want 1", got)
	}
}

func TestConcurrentRecording(t *testing.T) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	var wg sync.WaitGroup
	const workers, n = 8, 500
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				topic := []string{"x", "y", "z"}[(w+i)%3]
				m.Published(topic, 1, 10)
				m.ObserveRequest(protocol.CmdPub, time.Microsecond, true)
				if i%50 == 0 {
					m.TopicDeleted("z")
				}
			}
		}()
	}
	wg.Wait()
	f := families(t, m)
	if got := value(t, f, "smss_published_messages_total", nil); got != workers*n {
		t.Fatalf("total = %v, want %d", got, workers*n)
	}
	if got := value(t, f, "smss_request_duration_seconds", map[string]string{"command": "pub"}); got != workers*n {
		t.Fatalf("pub requests = %v, want %d", got, workers*n)
	}
}

func TestRecordingDoesNotAllocate(t *testing.T) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	long := "a-topic-name-well-beyond-the-thirty-two-byte-stack-buffer"
	longB := []byte(long)
	m.Published(long, 1, 1)
	tests := []struct {
		name string
		fn   func()
	}{
		{"Published", func() { m.Published(long, 3, 100) }},
		{"PublishedBytes", func() { m.PublishedBytes(longB, 3, 100) }},
		{"Delivered", func() { m.Delivered(long, 3, 100) }},
		{"DeliveredBytes", func() { m.DeliveredBytes(longB, 3, 100) }},
		{"ObserveRequest", func() { m.ObserveRequest(protocol.CmdPub, time.Millisecond, false) }},
		{"ObserveGroup", func() { m.ObserveGroup(10, 1000) }},
		{"ObserveFsync", func() { m.ObserveFsync(time.Millisecond) }},
		{"Conn", func() { m.ConnOpened(); m.ConnClosed() }},
		{"Error", func() { m.Error(metrics.KindTimeout) }},
	}
	for _, tc := range tests {
		if a := testing.AllocsPerRun(1000, tc.fn); a != 0 {
			t.Errorf("%s: %v allocs/op, want 0", tc.name, a)
		}
	}
}

func BenchmarkPublished(b *testing.B) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	m.Published("orders", 1, 1)
	b.ReportAllocs()
	for b.Loop() {
		m.Published("orders", 10, 1000)
	}
}

func BenchmarkPublishedBytes(b *testing.B) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	name := []byte("orders.eu-west.payments.settlement")
	m.PublishedBytes(name, 1, 1)
	b.ReportAllocs()
	for b.Loop() {
		m.PublishedBytes(name, 10, 1000)
	}
}

func BenchmarkPublishedParallel(b *testing.B) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	m.Published("orders", 1, 1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Published("orders", 10, 1000)
		}
	})
}

func BenchmarkObserveRequest(b *testing.B) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveRequest(protocol.CmdPub, 250*time.Microsecond, true)
	}
}

func BenchmarkObserveRequestParallel(b *testing.B) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.ObserveRequest(protocol.CmdPub, 250*time.Microsecond, true)
		}
	})
}

func BenchmarkNilMetrics(b *testing.B) {
	var m *metrics.Metrics
	b.ReportAllocs()
	for b.Loop() {
		m.Published("orders", 10, 1000)
		m.ObserveRequest(protocol.CmdPub, time.Millisecond, true)
	}
}
