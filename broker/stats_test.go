package broker

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/topicblock"
)

// metricValue returns the value (histograms: the sample count) of the series
// of family name whose labels include labels; ok=false when absent.
func metricValue(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) (float64, bool) {
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
			have := map[string]string{}
			for _, lp := range s.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			return seriesValue(s), true
		}
	}
	return 0, false
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

func errorsOf(t *testing.T, m *metrics.Metrics, kind string) float64 {
	t.Helper()
	v, _ := metricValue(t, m, "smss_errors_total", map[string]string{"kind": kind})
	return v
}

// dirLogBytes sums the sizes of the *.log files in dir.
func dirLogBytes(t *testing.T, dir string) (int64, int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
		n++
	}
	return total, n
}

func newTestMetrics() *metrics.Metrics {
	return metrics.NewWithOptions(metrics.Options{NoRuntime: true})
}

func TestStatsRecordsCommittedWrites(t *testing.T) {
	ctx := context.Background()
	m := newTestMetrics()
	b := openTest(t, t.TempDir(), func(o *Options) { o.Metrics = m; o.FlushLevel = 2 })
	defer b.Close()
	b.CreateTopic(ctx, []byte("t"), 0)
	one, three := rec("a"), bytes.Join([][]byte{rec("b"), rec("cc"), rec("ddd")}, nil)
	b.Publish(ctx, []byte("t"), one, 1)
	b.Publish(ctx, []byte("t"), three, 3)
	if _, err := b.Publish(ctx, []byte("missing"), one, 1); err == nil {
		t.Fatal("publish to a missing topic succeeded")
	}
	want := metrics.TopicCounters{Publishes: 2, Messages: 4, Bytes: int64(len(one) + len(three))}
	if c, ok := m.TopicCounters("t"); !ok || c != want {
		t.Fatalf("counters %+v %v, want %+v", c, ok, want)
	}
	if _, ok := m.TopicCounters("missing"); ok {
		t.Fatal("a refused publish was counted")
	}
	// create + 2 pubs, each its own group here; every group fsynced.
	if v, _ := metricValue(t, m, "smss_group_commit_commands", nil); v != 3 {
		t.Fatalf("group commits observed %v, want 3", v)
	}
	if v, _ := metricValue(t, m, "smss_fsync_duration_seconds", nil); v < 3 {
		t.Fatalf("fsyncs observed %v, want >= 3", v)
	}

	// A delay applied later counts as a publish of its records.
	delayed := rec("later")
	if _, err := b.PublishDelay(ctx, []byte("t"), delayed, 1, 1000); err != nil {
		t.Fatal(err)
	}
	due, err := b.meta.DueDelays(time.Now().UnixMilli()+5000, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due %v %v", due, err)
	}
	b.ApplyDelay(ctx, due[0].Topic, due[0].Value)
	b.ApplyDelay(ctx, due[0].Topic, due[0].Value) // already applied: no publish
	want.Publishes, want.Messages, want.Bytes = 3, 5, want.Bytes+int64(len(delayed))
	if c, _ := m.TopicCounters("t"); c != want {
		t.Fatalf("after delay apply %+v, want %+v", c, want)
	}

	if _, err := b.DeleteTopic(ctx, []byte("t")); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.TopicCounters("t"); ok {
		t.Fatal("deleted topic keeps its series")
	}
	if v, _ := metricValue(t, m, "smss_published_messages_total", nil); v != 5 {
		t.Fatalf("total published %v, want 5 (totals survive deletion)", v)
	}
}

func TestStatsTopicFigures(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, func(o *Options) { o.MaxLogSize = 400 })
	b.CreateTopic(ctx, []byte("t"), 0)
	b.CreateTopic(ctx, []byte("empty"), 0)
	var first, last int64
	for i := 0; i < 30; i++ {
		id, err := b.Publish(ctx, []byte("t"), rec(strings.Repeat("x", i+1)), 1)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = id
		}
		last = id
	}
	topicDir := topicblock.Dir(filepath.Join(dir, "topic"), []byte("t"), 10)
	check := func(when string, b *Broker) {
		t.Helper()
		st, ok := b.TopicStats("t")
		if !ok {
			t.Fatalf("%s: topic unknown", when)
		}
		bytes, files := dirLogBytes(t, topicDir)
		if st.Bytes != bytes || st.Files != files || files < 2 {
			t.Fatalf("%s: %d bytes in %d files, disk has %d in %d", when, st.Bytes, st.Files, bytes, files)
		}
		if st.FirstEventID != first || st.LastEventID != last {
			t.Fatalf("%s: ids %d..%d, want %d..%d", when, st.FirstEventID, st.LastEventID, first, last)
		}
		if n := waitMessages(t, b, "t"); n != last-first+1 {
			t.Fatalf("%s: %d messages, want %d", when, n, last-first+1)
		}
		if now := time.Now().UnixMilli(); st.LastWriteTime <= 0 || st.LastWriteTime > now {
			t.Fatalf("%s: last write time %d", when, st.LastWriteTime)
		}
		if e, ok := b.TopicStats("empty"); !ok || e.Bytes != 0 || e.LastEventID != 0 || e.FirstEventID != 0 {
			t.Fatalf("%s: empty topic %+v %v", when, e, ok)
		}
	}
	check("open log", b)
	check("cached", b)
	if _, ok := b.TopicStats("nope"); ok {
		t.Fatal("unknown topic has stats")
	}
	b.Close()

	b = openTest(t, dir, nil)
	defer b.Close()
	check("restarted", b)
	// A topic whose log this process has not opened is read through a
	// private view; it must agree with the writer's log.
	b.mu.RLock()
	tp := b.topics["t"]
	b.mu.RUnlock()
	open, _ := b.TopicStats("t")
	open.Messages = -1 // a view does not count
	if _, view := b.closedTopicFigures(tp); view != open {
		t.Fatalf("read-only view %+v, open log %+v", view, open)
	}
	// A directory already moved to the trash is not recreated by a view.
	gone := filepath.Join(dir, "gone")
	if _, st := b.closedTopicFigures(&topic{dir: gone}); st.Bytes != -1 || st.LastEventID != -1 {
		t.Fatalf("missing directory: %+v", st)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Fatalf("view created %s: %v", gone, err)
	}
	id, err := b.Publish(ctx, []byte("t"), rec("new"), 1)
	if err != nil {
		t.Fatal(err)
	}
	last = id
	check("reopened by a publish", b)

	in := b.ServerInfo()
	bytes, files := dirLogBytes(t, filepath.Join(dir, "binlog"))
	if in.BinlogBytes != bytes || in.BinlogFiles != files || in.LastEventID != last || in.Role != metrics.RoleMaster || in.DataDir != dir {
		t.Fatalf("server info %+v; binlog on disk %d bytes in %d files, last %d", in, bytes, files, last)
	}
}

func TestStatsSubscribers(t *testing.T) {
	ctx := context.Background()
	b := openTest(t, t.TempDir(), nil)
	defer b.Close()
	b.CreateTopic(ctx, []byte("t"), 0)
	var ids []int64
	for i := 0; i < 5; i++ {
		id, _ := b.Publish(ctx, []byte("t"), rec("m"), 1)
		ids = append(ids, id)
	}
	if subs := b.Subscribers(); len(subs) != 0 {
		t.Fatalf("subscribers before any: %+v", subs)
	}
	s, err := b.Subscribe([]byte("t"), []byte("w1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	s.SetRemoteAddr("10.0.0.1:5000")
	s2, err := b.Subscribe([]byte("t"), []byte("w2"), ids[3])
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()

	last := ids[4]
	subs := b.Subscribers()
	if len(subs) != 2 {
		t.Fatalf("subscribers %+v", subs)
	}
	w1 := subs[0]
	// From 0: the lag counts from just before the oldest retained message.
	if w1.Who != "w1" || w1.Topic != "t" || w1.RemoteAddr != "10.0.0.1:5000" || w1.Position != 0 ||
		w1.StartEventID != 0 || w1.Lag != last-ids[0]+1 || w1.Since <= 0 {
		t.Fatalf("w1 %+v", w1)
	}
	if w2 := subs[1]; w2.Who != "w2" || w2.Position != ids[3] || w2.Lag != last-ids[3] || w2.RemoteAddr != "" {
		t.Fatalf("w2 %+v", w2)
	}

	_, n, err := s.Next(ctx, nil, 3, 0)
	if err != nil || n != 3 {
		t.Fatalf("next: %d %v", n, err)
	}
	if w1 = b.Subscribers()[0]; w1.Delivered != ids[2] || w1.Position != 0 {
		t.Fatalf("after delivery %+v", w1)
	}
	s.Acked(ids[2])
	s.Acked(ids[1]) // never moves back
	if w1 = b.Subscribers()[0]; w1.Position != ids[2] || w1.Lag != last-ids[2] {
		t.Fatalf("after ack %+v", w1)
	}
	s.Close()
	if subs := b.Subscribers(); len(subs) != 1 || subs[0].Who != "w2" {
		t.Fatalf("after close %+v", subs)
	}
}

func TestStatsReplication(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, t.TempDir(), nil)
	defer m.Close()
	m.CreateTopic(ctx, []byte("t"), 0)
	m.Publish(ctx, []byte("t"), bytes.Join([][]byte{rec("a"), rec("b")}, nil), 2)
	last := m.LastEventID()

	sm := newTestMetrics()
	s := openTest(t, t.TempDir(), func(o *Options) { o.Slave = true; o.Metrics = sm })
	defer s.Close()
	if r := s.Replication(); r.Role != metrics.RoleSlave || len(r.Slaves) != 0 {
		t.Fatalf("slave view %+v", r)
	}

	if r := m.Replication(); r.Role != metrics.RoleMaster || len(r.Slaves) != 0 || r.LastEventID != last {
		t.Fatalf("master before streams %+v", r)
	}
	st, err := m.ReplicaStream(0)
	if err != nil {
		t.Fatal(err)
	}
	st.SetRemoteAddr("10.0.0.2:6000")
	r := m.Replication()
	if len(r.Slaves) != 1 || r.Slaves[0].RemoteAddr != "10.0.0.2:6000" || r.Slaves[0].Position != 0 || r.Slaves[0].LagEvents != last {
		t.Fatalf("stream at start %+v", r)
	}
	for {
		n, err := st.Next(ctx, 10, 10*time.Millisecond, func(block []byte) error {
			_, err := s.ApplyReplicated(ctx, append([]byte(nil), block...))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if r = m.Replication(); r.Slaves[0].Position != last || r.Slaves[0].LagEvents != 0 {
		t.Fatalf("caught-up stream %+v", r)
	}
	if c, ok := sm.TopicCounters("t"); !ok || c.Messages != 2 || c.Publishes != 1 {
		t.Fatalf("slave counted replicated publishes %+v %v", c, ok)
	}
	st.Close()
	if r = m.Replication(); len(r.Slaves) != 0 {
		t.Fatalf("after close %+v", r)
	}
}

func TestStatsDelays(t *testing.T) {
	ctx := context.Background()
	b := openTest(t, t.TempDir(), nil)
	defer b.Close()
	if d := b.Delays(); d.Pending != 0 || len(d.Buckets) != len(metrics.DelayBucketBounds)+1 {
		t.Fatalf("empty %+v", d)
	}
	b.CreateTopic(ctx, []byte("t"), 0)
	for _, ms := range []int64{2000, 30_000, int64(2 * time.Hour / time.Millisecond), int64(30 * 24 * time.Hour / time.Millisecond)} {
		if _, err := b.PublishDelay(ctx, []byte("t"), rec("d"), 1, ms); err != nil {
			t.Fatal(err)
		}
	}
	// The first call was cached less than a second ago.
	if d := b.Delays(); d.Pending != 0 {
		t.Fatalf("cache not used: %+v", d)
	}
	b.stats.delayMu.Lock()
	b.stats.delayAt = time.Time{}
	b.stats.delayMu.Unlock()
	d := b.Delays()
	counts := map[string]int64{}
	for _, bk := range d.Buckets {
		counts[bk.Label] = bk.Count
	}
	if d.Pending != 4 || counts["1m"] != 2 || counts["1d"] != 1 || counts[metrics.DelayLaterLabel] != 1 || d.NextDue <= time.Now().UnixMilli() {
		t.Fatalf("delays %+v", d)
	}
	d.Buckets[0].Count = 99 // callers own their copy
	if b.Delays().Buckets[0].Count != 2 {
		t.Fatal("Delays returned the cached buckets")
	}
}

func TestStatsStorageErrorsAndReadiness(t *testing.T) {
	ctx := context.Background()
	m := newTestMetrics()
	f := &faults{}
	b := openTest(t, t.TempDir(), func(o *Options) { o.OpenFile = f.open; o.FlushLevel = 2; o.Metrics = m })
	defer b.Close()
	b.CreateTopic(ctx, []byte("a"), 0)
	if _, err := b.PublishDelay(ctx, []byte("a"), rec("d"), 1, 1000); err != nil {
		t.Fatal(err)
	}
	due, err := b.meta.DueDelays(time.Now().UnixMilli()+5000, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due %v %v", due, err)
	}
	f.set(func(p string) bool { return strings.Contains(p, "/topic/") }, nil)
	if _, err := b.ApplyDelay(ctx, due[0].Topic, due[0].Value); err == nil {
		t.Fatal("delay applied through a failing write")
	}
	if errorsOf(t, m, metrics.KindStorage) != 1 || errorsOf(t, m, metrics.KindDelay) != 1 {
		t.Fatalf("storage %v delay %v errors, want 1 and 1", errorsOf(t, m, metrics.KindStorage), errorsOf(t, m, metrics.KindDelay))
	}
	if b.FatalError() != nil {
		t.Fatal("a rolled-back group is fatal")
	}
	f.set(nil, func(string) bool { return true })
	if _, err := b.Publish(ctx, []byte("a"), rec("x"), 1); err == nil {
		t.Fatal("publish acknowledged through a failing fsync")
	}
	if errorsOf(t, m, metrics.KindFsync) != 1 || b.FatalError() == nil {
		t.Fatalf("fsync errors %v, fatal %v", errorsOf(t, m, metrics.KindFsync), b.FatalError())
	}
	f.set(nil, nil)
}

// TestStatsConcurrentWithWrites reads every view while the writer,
// subscribers and a replica stream run (for -race).
func TestStatsConcurrentWithWrites(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := newTestMetrics()
	b := openTest(t, t.TempDir(), func(o *Options) { o.MaxLogSize = 2048; o.Metrics = m })
	defer b.Close()
	m.SetSource(b)
	b.CreateTopic(ctx, []byte("t"), 0)
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Add(3)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			b.Publish(ctx, []byte("t"), rec("m"), 1)
			if i%50 == 0 {
				b.PublishDelay(ctx, []byte("t"), rec("d"), 1, 60_000)
			}
		}
	}()
	go func() {
		defer wg.Done()
		s, err := b.Subscribe([]byte("t"), []byte("w"), 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		s.SetRemoteAddr("r")
		var buf []byte
		for !stop.Load() {
			var n int
			buf, n, err = s.Next(ctx, buf[:0], 10, time.Millisecond)
			if err != nil {
				return
			}
			if n > 0 {
				s.Acked(b.LastEventID())
			}
		}
	}()
	go func() {
		defer wg.Done()
		st, err := b.ReplicaStream(0)
		if err != nil {
			t.Error(err)
			return
		}
		defer st.Close()
		for !stop.Load() {
			if _, err := st.Next(ctx, 10, time.Millisecond, func([]byte) error { return nil }); err != nil {
				return
			}
		}
	}()
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		b.Topics()
		b.TopicStats("t")
		b.Subscribers()
		b.Replication()
		b.Delays()
		b.ServerInfo()
		if _, err := m.Registry().Gather(); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	cancel()
	wg.Wait()
}

// BenchmarkPublishMetrics measures the writer's recording cost: two
// brokers, one with a Metrics attached, take the same publish load (200-byte
// records, one per request, 64 goroutines, flushLevel 1) in alternating
// rounds, so that machine noise hits both alike. An op is one message to
// each broker; on/off is the throughput ratio.
func BenchmarkPublishMetrics(b *testing.B) {
	off, on := benchBroker(b, nil), benchBroker(b, newTestMetrics())
	const rounds = 10
	per := max(b.N/rounds, 1)
	var took [2]time.Duration
	b.SetBytes(200)
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		for i := range 2 {
			k := (i + r) % 2 // alternate which goes first
			br := []*Broker{off, on}[k]
			start := time.Now()
			benchPublishTo(b, br, per, 64)
			took[k] += time.Since(start)
		}
	}
	b.StopTimer()
	msgs := float64(per * rounds)
	b.ReportMetric(msgs/took[0].Seconds(), "off-msgs/s")
	b.ReportMetric(msgs/took[1].Seconds(), "on-msgs/s")
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "on/off")
}

func benchBroker(b *testing.B, m *metrics.Metrics) *Broker {
	br, err := Open(Options{Dir: b.TempDir(), FlushLevel: 1, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	if _, err := br.CreateTopic(context.Background(), []byte("bench"), 0); err != nil {
		b.Fatal(err)
	}
	return br
}

// benchPublishTo publishes n 200-byte messages to br from conns goroutines.
func benchPublishTo(b *testing.B, br *Broker, n, conns int) {
	ctx := context.Background()
	one := rec(string(bytes.Repeat([]byte("x"), 192))) // 200-byte record
	var next atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if _, err := br.Publish(ctx, []byte("bench"), one, 1); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
