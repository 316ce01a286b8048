package bridge

import (
	"strings"
	"testing"
	"time"
)

// benchMirror mirrors b.N single-record pubs of 200 bytes from a fake
// master into a target and reports messages per second.
func benchMirror(b *testing.B, k targetKind) {
	h := newHistory()
	h.create("bench")
	body := strings.Repeat("b", 200)
	for i := 0; i < b.N; i++ {
		h.pub("bench", rec(body, "traceId", "t"))
	}
	m := startFakeMaster(b, h.blocks)
	cfg := testConfig(m.addr())
	cfg.NATS.MaxInFlight, cfg.Kafka.MaxInFlight = 1024, 4096
	newTarget := k.benchSetup(b, &cfg)
	bb, err := New(cfg, newTarget(), Options{Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	stop := runBridgeB(b, bb)
	waitFor(b, "the bridge to catch up", 10*time.Minute, func() bool { return bb.Stats().Safe == lastID(h) })
	el := time.Since(start)
	b.StopTimer()
	stop()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
}

func BenchmarkMirrorJetStream(b *testing.B) {
	benchMirror(b, targetKind{benchSetup: func(b *testing.B, cfg *Config) func() Target {
		s := startNATS(b, 0, "")
		cfg.NATS.URL = s.ClientURL()
		return func() Target { return NewNATSTarget(cfg.NATS, cfg.Identity) }
	}})
}

func BenchmarkMirrorKafka(b *testing.B) {
	benchMirror(b, targetKind{benchSetup: func(b *testing.B, cfg *Config) func() Target {
		c := startKafka(b)
		cfg.Kafka.Brokers = c.ListenAddrs()
		return func() Target { return NewKafkaTarget(cfg.Kafka) }
	}})
}
