package bridge

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
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
	smsstest.WaitFor(b, 10*time.Minute, "the bridge to catch up", func() bool { return bb.Stats().Safe == lastID(h) })
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

// benchMessage is a mirrored message as the benchmarks see it: 200 bytes,
// one record header.
func benchMessage() *Message {
	return &Message{Topic: "bench", EventID: 123456789, Timestamp: 1764600000000,
		Block:   Mark{EventID: 123456789, BlockFirst: 123456700, BlockCRC: 0xdeadbeef, Safe: 123456699},
		Headers: []protocol.KV{{Key: "traceId", Value: "t-0001"}}, Body: []byte(strings.Repeat("b", 200))}
}

// BenchmarkNATSMsg is the bridge's own work per message into JetStream
// before nats.go takes over: the headers and the message.
func BenchmarkNATSMsg(b *testing.B) {
	m := benchMessage()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = NATSMsg("smss", m)
	}
}

// BenchmarkKafkaRecord is the same for Kafka.
func BenchmarkKafkaRecord(b *testing.B) {
	m := benchMessage()
	key := []byte(m.Topic)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = KafkaRecord(m, key)
	}
}

// BenchmarkAckPath is the acks goroutine's work per message whose ack has
// arrived by its turn (the common case under load).
func BenchmarkAckPath(b *testing.B) {
	br := &Bridge{cfg: Config{Kafka: KafkaConfig{AckTimeoutMs: 1000}}, m: newMetrics(), target: NewKafkaTarget(KafkaConfig{})}
	q := make(chan entry, 1024)
	var acked atomic.Int64
	done := make(chan error, 1)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() { done <- br.acks(ctx, cancel, q, &acked) }()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a := make(chanAck, 1)
		a <- nil
		q <- entry{ack: a, body: 200, blockEnd: int64(i + 1)}
	}
	close(q)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
