package replication

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/protocol"
)

// publishN publishes total messages of ~200 bytes on topic "bench" from
// conns goroutines, perBlock records per request, and returns the rate.
func publishN(tb testing.TB, m *broker.Broker, total, perBlock, conns int) float64 {
	tb.Helper()
	ctx := context.Background()
	one, err := protocol.AppendRecord(nil, protocol.Record{Body: bytes.Repeat([]byte("x"), 192)})
	if err != nil {
		tb.Fatal(err)
	}
	payload := bytes.Repeat(one, perBlock)
	requests := int64(total / perBlock)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= requests {
				if _, err := m.Publish(ctx, []byte("bench"), payload, perBlock); err != nil {
					tb.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(requests*int64(perBlock)) / time.Since(start).Seconds()
}

// BenchmarkCatchUp measures how fast an empty slave replicates a master's
// backlog of 1,000,000 messages over loopback TCP, applying through its
// writer (flushLevel 1 on both sides). One op is one whole catch-up; the
// msg/s metric is the result.
func BenchmarkCatchUp(b *testing.B) {
	for _, perBlock := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("records%d", perBlock), func(b *testing.B) {
			const total = 1_000_000
			m := openBroker(b, b.TempDir(), false, nil)
			defer m.Close()
			if _, err := m.CreateTopic(context.Background(), []byte("bench"), 0); err != nil {
				b.Fatal(err)
			}
			publishN(b, m, total, perBlock, 64)
			ms := serveMaster(b, m, "", MasterOptions{})
			b.ResetTimer()
			var rate float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				sb := openBroker(b, b.TempDir(), true, nil)
				b.StartTimer()
				start := time.Now()
				s, stop := runSlave(b, sb, SlaveOptions{MasterAddr: ms.addr})
				waitCaughtUp(b, s, m, 10*time.Minute)
				d := time.Since(start)
				b.StopTimer()
				stop()
				sb.Close()
				rate = total / d.Seconds()
				b.StartTimer()
			}
			b.ReportMetric(rate, "msg/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkLag publishes 1,000 single-message requests per second for 3 s
// to a master followed by a slave, and reports the time from the publish
// call to the slave's apply of that message (p50, p99, max).
func BenchmarkLag(b *testing.B) {
	m := openBroker(b, b.TempDir(), false, nil)
	defer m.Close()
	ctx := context.Background()
	if _, err := m.CreateTopic(ctx, []byte("bench"), 0); err != nil {
		b.Fatal(err)
	}
	ms := serveMaster(b, m, "", MasterOptions{})
	sb := openBroker(b, b.TempDir(), true, nil)
	defer sb.Close()
	type step struct {
		last int64
		at   time.Time
	}
	var mu sync.Mutex
	var steps []step // in apply order, so sorted by last
	s, stop := runSlave(b, sb, SlaveOptions{MasterAddr: ms.addr, OnApply: func(last int64) {
		now := time.Now()
		mu.Lock()
		steps = append(steps, step{last, now})
		mu.Unlock()
	}})
	defer stop()
	waitCaughtUp(b, s, m, time.Minute)
	one, _ := protocol.AppendRecord(nil, protocol.Record{Body: bytes.Repeat([]byte("x"), 192)})
	const rate, seconds = 1000, 3
	sent := map[int64]time.Time{}
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	b.ResetTimer()
	for i := 0; i < rate*seconds; i++ {
		<-tick.C
		t0 := time.Now()
		id, err := m.Publish(ctx, []byte("bench"), one, 1)
		if err != nil {
			b.Fatal(err)
		}
		sent[id] = t0
	}
	waitCaughtUp(b, s, m, time.Minute)
	b.StopTimer()
	var lags []time.Duration
	mu.Lock()
	for id, t0 := range sent {
		// The first apply step that covered id.
		i := sort.Search(len(steps), func(i int) bool { return steps[i].last >= id })
		if i < len(steps) {
			lags = append(lags, steps[i].at.Sub(t0))
		}
	}
	mu.Unlock()
	if len(lags) != len(sent) {
		b.Fatalf("%d of %d messages seen applied", len(lags), len(sent))
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	pct := func(p float64) float64 { return float64(lags[int(p*float64(len(lags)-1))].Microseconds()) }
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(lags[len(lags)-1].Microseconds()), "max-µs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPublishWithSlave compares a master's publish throughput alone,
// with a replica stream read by a consumer that only discards the frames
// (the master's own cost of a slave), and with a real slave replicating
// live (200-byte records, 64 publishers, one record per request,
// flushLevel 1). Everything runs on one machine and in one process, so a
// real slave's apply competes with the master for CPU.
func BenchmarkPublishWithSlave(b *testing.B) {
	for _, mode := range []string{"none", "discard", "slave"} {
		b.Run(mode, func(b *testing.B) {
			m := openBroker(b, b.TempDir(), false, nil)
			defer m.Close()
			if _, err := m.CreateTopic(context.Background(), []byte("bench"), 0); err != nil {
				b.Fatal(err)
			}
			switch mode {
			case "discard":
				ms := serveMaster(b, m, "", MasterOptions{})
				c, err := net.Dial("tcp", ms.addr)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				req, _ := protocol.AppendReplica(nil, 0)
				c.Write(req)
				go io.Copy(io.Discard, c)
			case "slave":
				ms := serveMaster(b, m, "", MasterOptions{})
				sb := openBroker(b, b.TempDir(), true, nil)
				defer sb.Close()
				s, stop := runSlave(b, sb, SlaveOptions{MasterAddr: ms.addr})
				defer stop()
				waitCaughtUp(b, s, m, time.Minute)
			}
			b.ResetTimer()
			rate := publishN(b, m, max(b.N, 1), 1, 64)
			b.ReportMetric(rate, "msg/s")
		})
	}
}
