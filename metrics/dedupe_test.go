package metrics_test

import (
	"testing"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/metrics/metricstest"
)

func TestDedupeMetrics(t *testing.T) {
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	m.DedupeHit([]byte("orders"))
	m.DedupeHit([]byte("orders"))
	m.DedupeHit([]byte("audit"))
	st := fakeState()
	st.Info.DedupeIDs = 1234
	m.SetSource(metricstest.NewFake(st))
	f := families(t, m)
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"smss_dedupe_hits_total", map[string]string{"topic": "orders"}, 2},
		{"smss_dedupe_hits_total", map[string]string{"topic": "audit"}, 1},
		{"smss_dedupe_ids", nil, 1234},
		// A duplicate is not a publication.
		{"smss_topic_published_messages_total", map[string]string{"topic": "orders"}, 0},
	}
	for _, tc := range tests {
		if got := value(t, f, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if c, ok := m.TopicCounters("orders"); !ok || c.DedupeHits != 2 || c.Publishes != 0 {
		t.Errorf("TopicCounters(orders) = %+v %v", c, ok)
	}
	// Dropped with the topic like its other series.
	m.TopicDeleted("orders")
	if _, ok := sample(t, families(t, m), "smss_dedupe_hits_total", map[string]string{"topic": "orders"}); ok {
		t.Error("dedupe hits of a deleted topic still exported")
	}
	long := []byte("a-topic-name-well-beyond-the-thirty-two-byte-stack-buffer")
	m.DedupeHit(long)
	if a := testing.AllocsPerRun(1000, func() { m.DedupeHit(long) }); a != 0 {
		t.Errorf("DedupeHit: %v allocs/op", a)
	}
	var nilM *metrics.Metrics
	nilM.DedupeHit(long)
}
