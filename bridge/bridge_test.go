package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

func rec(body string, kv ...string) protocol.Record {
	r := protocol.Record{Body: []byte(body)}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Headers = append(r.Headers, protocol.KV{Key: kv[i], Value: kv[i+1]})
	}
	return r
}

// mixedHistory has every kind of block: creates, singles, batches with
// headers NATS can and cannot carry, a delay and its apply, a delete, and
// a topic the filter leaves out.
func mixedHistory(rounds int) *history {
	h := newHistory()
	h.create("orders")
	h.create("audit.log")
	h.create("skip.me")
	for i := 0; i < rounds; i++ {
		h.pub("orders", rec(fmt.Sprintf("o%d", i), "traceId", fmt.Sprintf("t%d", i)))
		h.pub("orders", rec(fmt.Sprintf("b%d-0", i)), rec(fmt.Sprintf("b%d-1", i), "k", "v", "k", "v2"), rec(fmt.Sprintf("b%d-2", i), "bin", "a\r\nb\x00"))
		p := h.delay("audit.log", rec(fmt.Sprintf("d%d", i), "smss-event-id", "spoof"))
		h.pub("skip.me", rec("x"))
		h.pub("audit.log", rec(fmt.Sprintf("a%d", i), " sp", "x"), rec(strings.Repeat("z", 200)))
		h.apply("audit.log", p)
	}
	h.del("skip.me")
	h.create("late")
	h.pub("late", rec("l1"), rec("l2"))
	return h
}

type targetKind struct {
	name    string
	ordered bool // the target keeps header order across keys
	setup   func(t *testing.T, cfg *Config) (func() Target, func() []got)
	// benchSetup is setup for benchmarks (no read-back).
	benchSetup func(b *testing.B, cfg *Config) func() Target
}

func natsKind() targetKind {
	return targetKind{name: "jetstream", setup: func(t *testing.T, cfg *Config) (func() Target, func() []got) {
		s := startNATS(t, 0, "")
		cfg.NATS.URL = s.ClientURL()
		cfg.NATS.FileStorage = false
		return func() Target { return NewNATSTarget(cfg.NATS, cfg.Identity) },
			func() []got { return readNATS(t, cfg.NATS.URL, cfg.NATS.Stream) }
	}}
}

func kafkaKind(mode string) targetKind {
	return targetKind{name: "kafka-" + mode, ordered: true, setup: func(t *testing.T, cfg *Config) (func() Target, func() []got) {
		c := startKafka(t)
		cfg.Kafka.Brokers = c.ListenAddrs()
		cfg.Kafka.TopicMode = mode
		cfg.Kafka.Partitions = 3
		return func() Target { return NewKafkaTarget(cfg.Kafka) },
			func() []got {
				tg := NewKafkaTarget(cfg.Kafka)
				var topics []string
				if mode == TopicModeSingle {
					topics = []string{cfg.Kafka.Topic}
				} else {
					for _, tp := range []string{"orders", "audit.log", "late", "skip.me"} {
						topics = append(topics, tg.KafkaTopic(tp))
					}
				}
				return readKafka(t, cfg.Kafka.Brokers, topics...)
			}
	}}
}

func kinds() []targetKind {
	return []targetKind{natsKind(), kafkaKind(TopicModePerTopic), kafkaKind(TopicModeSingle)}
}

func testConfig(master string) Config {
	cfg := DefaultConfig()
	cfg.Master = []string{master}
	cfg.Exclude = []string{"skip.*"}
	cfg.Source.MinBackoffMs, cfg.Source.MaxBackoffMs = 10, 200
	cfg.Metrics.LogIntervalSec = 0
	cfg.NATS.MaxInFlight, cfg.Kafka.MaxInFlight = 16, 16
	cfg.NATS.AckTimeoutMs, cfg.Kafka.AckTimeoutMs = 5000, 5000
	return cfg
}

// runBridge runs a bridge in the background; stop cancels it and returns
// what Run returned.
func runBridge(t *testing.T, cfg Config, tg Target) (*Bridge, func() error) {
	t.Helper()
	b, err := New(cfg, tg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var once sync.Once
	var res error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case res = <-done:
			case <-time.After(testDeadline):
				res = errors.New("bridge did not stop")
			}
		})
		return res
	}
	t.Cleanup(func() { stop() })
	return b, stop
}

func lastID(h *history) int64 { return h.next - 1 }

func runBridgeB(b *testing.B, bb *Bridge) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bb.Run(ctx) }()
	return func() {
		cancel()
		<-done
	}
}

// TestMirror mirrors a mixed history into each target and checks it
// exactly: every message once, in order, bodies and headers byte-exact,
// delayed messages as applied, filtered topics absent.
func TestMirror(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			h := mixedHistory(5)
			m := startFakeMaster(t, h.blocks)
			cfg := testConfig(m.addr())
			newTarget, read := k.setup(t, &cfg)
			b, stop := runBridge(t, cfg, newTarget())
			smsstest.WaitFor(t, testDeadline, "the bridge to catch up", func() bool { return b.Stats().Safe == lastID(h) })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			f, _ := NewFilter(cfg.Topics, cfg.Exclude)
			msgs, w := read(), want(t, h.blocks, f)
			if len(w) < 30 {
				t.Fatalf("the history should give at least 30 messages, gives %d", len(w))
			}
			t.Logf("%d messages mirrored", len(msgs))
			checkMirror(t, msgs, w, k.ordered)
			if n := m.extraBytes(); n != 0 {
				t.Fatalf("the bridge sent %d bytes after its replica request; it must send none (it is not a confirming slave)", n)
			}
		})
	}
}

// crashTarget wraps a target and simulates a crash at the publish number
// crashAt (the bridge's context is cancelled as a kill would, leaving
// whatever was in flight), and a failed publish at gapAt (if > 0) that
// later publishes of the session may overtake:
//   - on JetStream the message really goes out, to a subject no stream
//     holds, so it is lost while the following ones reach the server,
//     which must refuse them (each names its predecessor);
//   - on Kafka the idempotent producer fails every later record of the
//     partition after a failed one; the wrapper does the same.
type crashTarget struct {
	Target
	n              atomic.Int64
	gapAt, crashAt int64
	crash          func()
	failRest       bool
	acks           []Ack
}

func (c *crashTarget) Publish(ctx context.Context, m *Message) (Ack, error) {
	n := c.n.Add(1)
	if n == c.crashAt {
		// Let what is in flight land first, so that the target holds
		// messages past the safe position that a resume must not repeat.
		for _, a := range c.acks {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			a.Wait(wctx)
			cancel()
		}
		c.crash()
		return nil, errors.New("simulated crash")
	}
	if c.failRest {
		return failedAck(), nil
	}
	if n == c.gapAt {
		if nt, ok := c.Target.(*NATSTarget); ok {
			prefix := nt.cfg.SubjectPrefix
			nt.cfg.SubjectPrefix = "nowhere"
			defer func() { nt.cfg.SubjectPrefix = prefix }()
			a, err := nt.Publish(ctx, m)
			if err != nil {
				return nil, err
			}
			a = tee(a)
			c.acks = append(c.acks, a)
			return a, nil
		}
		c.failRest = true
		return failedAck(), nil
	}
	a, err := c.Target.Publish(ctx, m)
	if err != nil {
		return nil, err
	}
	a = tee(a)
	c.acks = append(c.acks, a)
	return a, nil
}

// teeAck lets the bridge and the test both wait for one ack.
type teeAck struct {
	done chan struct{}
	err  error
}

func tee(a Ack) Ack {
	t := &teeAck{done: make(chan struct{})}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		t.err = a.Wait(ctx)
		close(t.done)
	}()
	return t
}

func (t *teeAck) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func failedAck() Ack {
	a := make(chanAck, 1)
	a <- errors.New("simulated failed publish")
	return a
}

// TestResumeAfterCrash kills the bridge at many points of a history with
// multi-message blocks (also inside a block, and after a publish that
// failed while later ones succeeded); each time a new bridge resumes from
// the target alone, and the target ends up exact.
func TestResumeAfterCrash(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			h := mixedHistory(6)
			m := startFakeMaster(t, h.blocks)
			cfg := testConfig(m.addr())
			newTarget, read := k.setup(t, &cfg)
			// Crash points, in publishes of each run: inside the first
			// batch, at its end, later with a gap just before.
			plan := []struct{ gap, crash int64 }{{0, 3}, {0, 4}, {0, 5}, {2, 7}, {3, 4}, {0, 2}, {5, 9}, {0, 1}}
			for i, p := range plan {
				// A new identity per run: JetStream's duplicate window
				// must not be what hides a repeated message.
				cfg.Identity = fmt.Sprintf("run%d", i)
				cfg.NATS.MaxInFlight, cfg.Kafka.MaxInFlight = 16, 16
				ctx, cancel := context.WithCancel(context.Background())
				ct := &crashTarget{Target: newTarget(), gapAt: p.gap, crashAt: p.crash, crash: cancel}
				b, err := New(cfg, ct, Options{Logger: testLogger(t)})
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- b.Run(ctx) }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("run %d: %v", i, err)
					}
				case <-time.After(testDeadline):
					t.Fatalf("run %d: the crash did not happen", i)
				}
				cancel()
			}
			cfg.Identity = "final"
			b, stop := runBridge(t, cfg, newTarget())
			smsstest.WaitFor(t, testDeadline, "the bridge to catch up", func() bool { return b.Stats().Safe == lastID(h) })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			f, _ := NewFilter(cfg.Topics, cfg.Exclude)
			checkMirror(t, read(), want(t, h.blocks, f), k.ordered)
			// Every replica request asked for the end of a block.
			ends := map[int64]bool{0: true}
			for _, raw := range h.blocks {
				_, last, _, _ := decodeSpan(raw)
				ends[last] = true
			}
			for _, r := range m.requests() {
				if !ends[r] {
					t.Fatalf("replica request after %d, which does not end a block", r)
				}
			}
		})
	}
}

// TestDivergedMasterStops: the target holds history A; after a "failover"
// the master has another history with the same eventIds. The bridge must
// stop loudly instead of mirroring a different message under an eventId
// it already used.
func TestDivergedMasterStops(t *testing.T) {
	for _, k := range kinds()[:2] {
		t.Run(k.name, func(t *testing.T) {
			a := newHistory()
			a.create("orders")
			a.pub("orders", rec("a1"), rec("a2"))
			a.pub("orders", rec("a3"))
			m := startFakeMaster(t, a.blocks)
			cfg := testConfig(m.addr())
			newTarget, _ := k.setup(t, &cfg)
			b, stop := runBridge(t, cfg, newTarget())
			smsstest.WaitFor(t, testDeadline, "the bridge to catch up", func() bool { return b.Stats().Safe == lastID(a) })
			stop()

			bh := newHistory()
			bh.create("orders")
			bh.pub("orders", rec("a1"), rec("a2"))
			bh.pub("orders", rec("B3")) // same eventId 4, other content
			bh.pub("orders", rec("b5"))
			m.setBlocks(bh.blocks)
			b2, err := New(cfg, newTarget(), Options{Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
			defer cancel()
			err = b2.Run(ctx)
			if !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "differs") {
				t.Fatalf("Run = %v, want a fatal divergence error", err)
			}
		})
	}
}

// TestUndecodableBlockStops: a block that does not decode stops the bridge.
func TestUndecodableBlockStops(t *testing.T) {
	h := newHistory()
	h.create("orders")
	h.pub("orders", rec("ok"))
	bad := append([]byte(nil), h.blocks[1]...)
	bad[6] = 'x' // inside the writeTime field
	m := startFakeMaster(t, [][]byte{h.blocks[0], bad})
	cfg := testConfig(m.addr())
	newTarget, _ := natsKind().setup(t, &cfg)
	b, err := New(cfg, newTarget(), Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if err := b.Run(ctx); !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "undecodable") {
		t.Fatalf("Run = %v, want a fatal undecodable-block error", err)
	}
}

// TestNeverGivesUp: neither the master nor the target is reachable at
// first; the bridge keeps retrying and mirrors once both are up, and it
// rides out a dropped master connection.
func TestNeverGivesUp(t *testing.T) {
	h := mixedHistory(2)
	// A port with nothing behind it yet.
	m := startFakeMaster(t, h.blocks)
	addr := m.addr()
	m.close()
	cfg := testConfig(addr)
	dir := t.TempDir()
	port := freePort(t)
	cfg.NATS.URL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	cfg.NATS.FileStorage = false
	b, stop := runBridge(t, cfg, NewNATSTarget(cfg.NATS, cfg.Identity))
	smsstest.WaitFor(t, testDeadline, "failed sessions", func() bool { return b.Stats().TargetErrs >= 3 })
	startNATS(t, port, dir)
	smsstest.WaitFor(t, testDeadline, "master failures", func() bool { return b.Stats().MasterErrs >= 3 })
	m2 := listenFakeMaster(t, addr, h.blocks)
	smsstest.WaitFor(t, testDeadline, "the bridge to catch up", func() bool { return b.Stats().Safe == lastID(h) })
	m2.dropConns()
	more := h.pub("orders", rec("after-drop"))
	m2.setBlocks(h.blocks)
	smsstest.WaitFor(t, testDeadline, "the bridge to reconnect", func() bool { return b.Stats().Safe == more })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	f, _ := NewFilter(cfg.Topics, cfg.Exclude)
	checkMirror(t, readNATS(t, cfg.NATS.URL, cfg.NATS.Stream), want(t, h.blocks, f), false)
}

// TestMetricsEndpoint: lag, rates and errors are served for Prometheus.
func TestMetricsEndpoint(t *testing.T) {
	h := mixedHistory(1)
	m := startFakeMaster(t, h.blocks)
	cfg := testConfig(m.addr())
	cfg.Metrics.Addr = "127.0.0.1:0"
	cfg.Source.StatusIntervalMs = 100
	newTarget, _ := natsKind().setup(t, &cfg)
	b, _ := runBridge(t, cfg, newTarget())
	smsstest.WaitFor(t, testDeadline, "the bridge to catch up", func() bool { return b.Stats().Safe == lastID(h) && b.MetricsAddr() != "" })
	resp, err := http.Get("http://" + b.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	smsstest.WaitFor(t, testDeadline, "the master's status", func() bool { return b.Stats().MasterLast == lastID(h) })
	for _, w := range []string{"smss_bridge_lag_events 0", fmt.Sprintf("smss_bridge_master_event_id %d", lastID(h)), "smss_bridge_lag_seconds 0", "smss_bridge_messages_total " + fmt.Sprint(b.Stats().Mirrored),
		`smss_bridge_errors_total{kind="target"} 0`, fmt.Sprintf("smss_bridge_mirrored_event_id %d", lastID(h)), `smss_bridge_blocks_total{cmd="delay_apply"} 1`} {
		if !strings.Contains(string(body), w) {
			t.Errorf("metrics lack %q:\n%s", w, body)
		}
	}
}

// TestSeveralMasters: the first address is dead and the second refuses
// replication (a slave); the bridge moves on to the third.
func TestSeveralMasters(t *testing.T) {
	h := mixedHistory(1)
	// A master that is gone: it holds its port (a closed port could be
	// taken by any server another test starts meanwhile, which may never
	// answer a replica request) and closes every connection at once.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gone.Close() })
	go func() {
		for {
			c, err := gone.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	deadAddr := gone.Addr().String()
	slave := startFakeMaster(t, nil)
	slave.refuse = "don't support action"
	m := startFakeMaster(t, h.blocks)
	cfg := testConfig(deadAddr)
	cfg.Master = append(cfg.Master, slave.addr(), m.addr())
	newTarget, read := natsKind().setup(t, &cfg)
	b, stop := runBridge(t, cfg, newTarget())
	smsstest.WaitFor(t, testDeadline, "the bridge to catch up", func() bool { return b.Stats().Safe == lastID(h) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	f, _ := NewFilter(cfg.Topics, cfg.Exclude)
	checkMirror(t, read(), want(t, h.blocks, f), false)
}

// TestTargetRestart: the target goes away in the middle of the mirroring
// and comes back (same port, same store); the bridge retries and the
// target ends up exact.
func TestTargetRestart(t *testing.T) {
	type target struct {
		name    string
		ordered bool
		// start (re)starts the target on its port and store.
		start func(t *testing.T, cfg *Config, port int, dir string) (stop func())
		read  func(t *testing.T, cfg *Config) []got
	}
	targets := []target{
		{name: "jetstream", start: func(t *testing.T, cfg *Config, port int, dir string) func() {
			s := startNATS(t, port, dir)
			cfg.NATS.URL = s.ClientURL()
			return func() { s.Shutdown(); s.WaitForShutdown() }
		}, read: func(t *testing.T, cfg *Config) []got { return readNATS(t, cfg.NATS.URL, cfg.NATS.Stream) }},
		{name: "kafka", ordered: true, start: func(t *testing.T, cfg *Config, port int, dir string) func() {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dir))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Kafka.Brokers = c.ListenAddrs()
			return c.Close
		}, read: func(t *testing.T, cfg *Config) []got {
			tg := NewKafkaTarget(cfg.Kafka)
			var topics []string
			for _, tp := range []string{"orders", "audit.log", "late"} {
				topics = append(topics, tg.KafkaTopic(tp))
			}
			return readKafka(t, cfg.Kafka.Brokers, topics...)
		}},
	}
	for _, tc := range targets {
		t.Run(tc.name, func(t *testing.T) {
			h := mixedHistory(4)
			first := len(h.blocks)
			for i := 0; i < 3; i++ {
				h.pub("orders", rec(fmt.Sprintf("late%d", i)), rec(fmt.Sprintf("late%d-b", i)))
			}
			m := startFakeMaster(t, h.blocks[:first])
			cfg := testConfig(m.addr())
			cfg.NATS.URL = "nats://placeholder:1"
			if tc.name == "kafka" {
				cfg.NATS.URL = ""
				cfg.Kafka.Brokers = []string{"placeholder:1"}
			}
			dir := t.TempDir()
			port := freePort(t)
			stopTarget := tc.start(t, &cfg, port, dir)
			var tg Target = NewNATSTarget(cfg.NATS, cfg.Identity)
			if tc.name == "kafka" {
				tg = NewKafkaTarget(cfg.Kafka)
			}
			b, stop := runBridge(t, cfg, tg)
			_, firstLast, _, _ := decodeSpan(h.blocks[first-1])
			smsstest.WaitFor(t, testDeadline, "the first part", func() bool { return b.Stats().Safe == firstLast })
			stopTarget()
			m.setBlocks(h.blocks)
			smsstest.WaitFor(t, testDeadline, "a failed session", func() bool { return b.Stats().TargetErrs >= 1 })
			stopTarget = tc.start(t, &cfg, port, dir)
			defer stopTarget()
			smsstest.WaitFor(t, testDeadline, "the bridge to catch up", func() bool { return b.Stats().Safe == lastID(h) })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			f, _ := NewFilter(cfg.Topics, cfg.Exclude)
			checkMirror(t, tc.read(t, &cfg), want(t, h.blocks, f), tc.ordered)
		})
	}
}
