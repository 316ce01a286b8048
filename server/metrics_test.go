package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
)

// metricValue returns the value (histograms: the sample count) of the
// series of family name with exactly labels, 0 when it is absent.
func metricValue(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, s := range mf.GetMetric() {
			if len(s.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range s.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			return seriesValue(s)
		}
	}
	return 0
}

func seriesValue(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.GetCounter().GetValue()
	case s.Gauge != nil:
		return s.GetGauge().GetValue()
	case s.Histogram != nil:
		return float64(s.GetHistogram().GetSampleCount())
	}
	return -1
}

// waitMetric waits for a series to reach want. A request is observed just
// after its reply is written, so a client that has read the reply can see
// the metric one step behind: poll instead of reading once.
func waitMetric(t *testing.T, m *metrics.Metrics, name string, labels map[string]string, want float64) {
	t.Helper()
	var got float64
	deadline := time.Now().Add(testDeadline)
	for {
		if got = metricValue(t, m, name, labels); got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s%v = %v, want %v", name, labels, got, want)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func cmdLabel(c protocol.Command) map[string]string { return map[string]string{"command": c.String()} }

func kindLabel(k string) map[string]string { return map[string]string{"kind": k} }

func withMetrics(m *metrics.Metrics, more ...func(*Options)) func(*Options) {
	return func(o *Options) {
		o.Metrics = m
		for _, f := range more {
			f(o)
		}
	}
}

func newTestMetrics() *metrics.Metrics {
	return metrics.NewWithOptions(metrics.Options{NoRuntime: true})
}

func TestMetricsRequestsAndConnections(t *testing.T) {
	m := newTestMetrics()
	ts := startServer(t, newFakeBackend(), withMetrics(m))
	c := ts.dial(t)
	send(t, c, createReq("t", 0))
	expect(t, c, okReply())
	send(t, c, pubReq("t", record("a")))
	expect(t, c, okReply())
	send(t, c, pubReq("nope", record("a")))
	expect(t, c, errReply("topic not exist"))
	send(t, c, aliveReq())
	expect(t, c, aliveReply())

	for _, tc := range []struct {
		cmd         protocol.Command
		count, errs float64
	}{{protocol.CmdCreate, 1, 0}, {protocol.CmdPub, 2, 1}, {protocol.CmdAlive, 1, 0}, {protocol.CmdSub, 0, 0}} {
		waitMetric(t, m, "smss_request_duration_seconds", cmdLabel(tc.cmd), tc.count)
		waitMetric(t, m, "smss_request_errors_total", cmdLabel(tc.cmd), tc.errs)
	}
	if got := metricValue(t, m, "smss_errors_total", kindLabel(metrics.KindBusiness)); got != 1 {
		t.Errorf("business errors %v, want 1", got)
	}

	// A request the server cannot parse closes the connection.
	bad := ts.dial(t)
	send(t, bad, enc(protocol.AppendRequest(nil, 5, [16]byte{}, []byte("t"), nil, []byte("body"))))
	expect(t, bad, errReply("don't support action"))
	expectClosed(t, bad)
	if got := metricValue(t, m, "smss_errors_total", kindLabel(metrics.KindProtocol)); got != 1 {
		t.Errorf("protocol errors %v, want 1", got)
	}
	waitMetric(t, m, "smss_request_errors_total", map[string]string{"command": "other"}, 1)
	if got := metricValue(t, m, "smss_request_errors_total", cmdLabel(protocol.Command(5))); got != 0 {
		t.Errorf("unknown command has its own series")
	}

	if got := metricValue(t, m, "smss_connections_total", nil); got != 2 {
		t.Errorf("connections accepted %v, want 2", got)
	}
	smsstest.WaitFor(t, testDeadline, "the closed connection to be counted", func() bool {
		return metricValue(t, m, "smss_connections_open", nil) == 1
	})
}

func TestMetricsRefusedPanicAndTimeout(t *testing.T) {
	m := newTestMetrics()
	be := newFakeBackend()
	be.onPublish = func(topic string) error {
		if topic == "boom" {
			panic("backend exploded")
		}
		return nil
	}
	ts := startServer(t, be, withMetrics(m, func(o *Options) { o.MaxConns = 1; o.ReadTimeout = 50 * time.Millisecond }))
	c := ts.dial(t)
	send(t, c, createReq("boom", 0))
	expect(t, c, okReply())
	refused := ts.dial(t)
	expectClosed(t, refused)
	if got := metricValue(t, m, "smss_errors_total", kindLabel(metrics.KindRefused)); got != 1 {
		t.Errorf("refused connections %v, want 1", got)
	}
	send(t, c, pubReq("boom", record("x")))
	expectClosed(t, c)
	if got := metricValue(t, m, "smss_errors_total", kindLabel(metrics.KindPanic)); got != 1 {
		t.Errorf("panics %v, want 1", got)
	}
	smsstest.WaitFor(t, testDeadline, "the slot to free", func() bool { return metricValue(t, m, "smss_connections_open", nil) == 0 })

	// Half a request, then silence: the read timeout closes it.
	slow := ts.dial(t)
	req := pubReq("boom", record("x"))
	send(t, slow, req[:len(req)-3])
	expectClosed(t, slow)
	if got := metricValue(t, m, "smss_errors_total", kindLabel(metrics.KindTimeout)); got != 1 {
		t.Errorf("timeouts %v, want 1", got)
	}
}

// trackingBackend hands out subscriptions that record what the server
// tells them about acks and the peer.
type trackingBackend struct {
	*fakeBackend
	mu   sync.Mutex
	subs []*trackedSub
}

type trackedSub struct {
	Subscription
	mu     sync.Mutex
	acked  []int64
	remote string
}

func (s *trackedSub) Acked(id int64) {
	s.mu.Lock()
	s.acked = append(s.acked, id)
	s.mu.Unlock()
}

func (s *trackedSub) SetRemoteAddr(a string) {
	s.mu.Lock()
	s.remote = a
	s.mu.Unlock()
}

func (b *trackingBackend) Subscribe(topic, who []byte, after int64) (Subscription, error) {
	s, err := b.fakeBackend.Subscribe(topic, who, after)
	if err != nil {
		return nil, err
	}
	ts := &trackedSub{Subscription: s}
	b.mu.Lock()
	b.subs = append(b.subs, ts)
	b.mu.Unlock()
	return ts, nil
}

func TestMetricsSubscription(t *testing.T) {
	m := newTestMetrics()
	tb := &trackingBackend{fakeBackend: newFakeBackend()}
	ts := startServer(t, tb.fakeBackend, withMetrics(m, func(o *Options) { o.Backend = tb; o.AliveInterval = time.Hour }))
	pub := ts.dial(t)
	send(t, pub, createReq("s", 0)) // eventId 1
	expect(t, pub, okReply())
	pubIDs(t, pub, "s", 2, 3, 4)

	c := ts.dial(t)
	send(t, c, subReq("s", "w", 0, 2, time.Second))
	expectData(t, c, 2, 3)
	send(t, c, ack(0))
	expectData(t, c, 4)
	send(t, c, ack(1))
	send(t, c, aliveReq())
	expect(t, c, aliveReply())

	tb.mu.Lock()
	sub := tb.subs[0]
	tb.mu.Unlock()
	sub.mu.Lock()
	acked, remote := append([]int64(nil), sub.acked...), sub.remote
	sub.mu.Unlock()
	if len(acked) != 2 || acked[0] != 3 || acked[1] != 4 {
		t.Errorf("acks reported %v, want [3 4]", acked)
	}
	if remote != c.LocalAddr().String() {
		t.Errorf("remote address %q, want %q", remote, c.LocalAddr())
	}
	counters, ok := m.TopicCounters("s")
	recBytes := int64(3 * len(record("m2")))
	if !ok || counters.DelivMsgs != 3 || counters.DelivBytes != recBytes {
		t.Errorf("delivered %+v, want 3 messages of %d record bytes", counters, recBytes)
	}
	waitMetric(t, m, "smss_request_duration_seconds", cmdLabel(protocol.CmdSub), 1)

	// A refused subscription is an error of the sub command.
	send(t, c, subReq("nope", "w", 0, 1, time.Second))
	expect(t, c, errReply("topic not exist"))
	waitMetric(t, m, "smss_request_errors_total", cmdLabel(protocol.CmdSub), 1)
}

// fakeReplica is a replication.Source whose streams never have blocks.
type fakeReplica struct {
	refuse error
	mu     sync.Mutex
	remote []string
}

type fakeStream struct{ r *fakeReplica }

func (r *fakeReplica) ReplicaStream(after int64) (replication.Stream, error) {
	r.mu.Lock()
	refuse := r.refuse
	r.mu.Unlock()
	if refuse != nil {
		return nil, refuse
	}
	return fakeStream{r}, nil
}

func (s fakeStream) SetRemoteAddr(a string) {
	s.r.mu.Lock()
	s.r.remote = append(s.r.remote, a)
	s.r.mu.Unlock()
}

func (fakeStream) Next(ctx context.Context, _ int, wait time.Duration, _ func([]byte) error) (int, error) {
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(wait):
		return 0, nil
	}
}

func (fakeStream) Close() {}

func TestMetricsReplicaStream(t *testing.T) {
	m := newTestMetrics()
	rs := &fakeReplica{}
	ts := startServer(t, newFakeBackend(), withMetrics(m, func(o *Options) {
		o.Replication = rs
		o.AliveInterval = 20 * time.Millisecond
	}))
	c := ts.dial(t)
	send(t, c, enc(protocol.AppendReplica(nil, 0)))
	expectUnit(t, c, protocol.StatusAlive)
	rs.mu.Lock()
	remote := strings.Join(rs.remote, ",")
	rs.mu.Unlock()
	if remote != c.LocalAddr().String() {
		t.Errorf("stream told remote %q, want %q", remote, c.LocalAddr())
	}
	waitMetric(t, m, "smss_request_duration_seconds", cmdLabel(protocol.CmdReplica), 1) // at the stream's start
	c.Close()
	smsstest.WaitFor(t, testDeadline, "the stream to end", func() bool { return metricValue(t, m, "smss_connections_open", nil) == 0 })
	if got := metricValue(t, m, "smss_errors_total", kindLabel(metrics.KindReplication)); got != 0 {
		t.Errorf("a slave leaving counted as %v replication errors", got)
	}

	rs.mu.Lock()
	rs.refuse = protocol.NewBizError("too old")
	rs.mu.Unlock()
	c2 := ts.dial(t)
	send(t, c2, enc(protocol.AppendReplica(nil, 7)))
	expect(t, c2, errReply("too old"))
	waitMetric(t, m, "smss_request_errors_total", cmdLabel(protocol.CmdReplica), 1)
}
