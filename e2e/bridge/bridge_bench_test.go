package bridge

import (
	"context"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBridgeBench measures, for BENCHMARKS.md, (1) how fast smss-bridge
// mirrors a backlog of 200-byte messages into JetStream and into kfake,
// and (2) the master's publish rate with and without a bridge attached.
// It runs only with SMSS_BRIDGE_BENCH=1 (it takes about a minute).
func TestBridgeBench(t *testing.T) {
	if os.Getenv("SMSS_BRIDGE_BENCH") == "" {
		t.Skip("set SMSS_BRIDGE_BENCH=1 to run the bridge benchmark")
	}
	bin := buildBridge(t)
	const backlog = 200_000
	body := strings.Repeat("b", 200)

	for _, target := range []string{"jetstream", "kafka"} {
		dir := t.TempDir()
		kit.ReplConfig(t, dir, kit.FreePort(t), "")
		m := kit.StartArgs(t, dir, "-role", "master")
		c := kit.Dial(t, m.Addr)
		if err := c.Create("bench", 0); err != nil {
			t.Fatal(err)
		}
		// The backlog, 100 records per request (not timed).
		var batch [][]byte
		for i := 0; i < 100; i++ {
			batch = append(batch, kit.Record(nil, body))
		}
		for i := 0; i < backlog/100; i++ {
			if err := c.Pub("bench", batch...); err != nil {
				t.Fatal(err)
			}
		}
		args, count := benchTarget(t, target)
		out := &smsstest.SyncBuffer{}
		start := time.Now()
		br := startBridge(t, bin, out, append(args, "--master", m.Addr, "--topics", "bench")...)
		if !smsstest.Poll(5*time.Minute, func() bool { return count() >= backlog }) {
			t.Fatalf("%s: mirrored %d of %d\n%s", target, count(), backlog, kit.Tail(out.String(), 3000))
		}
		el := time.Since(start)
		t.Logf("BENCH mirror %s: %d msgs of 200 B in %v = %.0f msgs/s (including start-up and resume)", target, backlog, el.Round(time.Millisecond), float64(backlog)/el.Seconds())

		if target == "jetstream" {
			br.kill()
			// Alternating 3 s runs, medians of 3: without anything attached,
			// with the bridge attached (mirroring live into JetStream), and
			// with a slave attached, for reference.
			sdir := t.TempDir()
			kit.ReplConfig(t, sdir, kit.FreePort(t), "")
			var without, withBridge, withSlave, withReader []float64
			var cpuWithout, cpuBridge, cpuSlave, cpuReader []float64
			measure := func(rates, cpus *[]float64) {
				c0 := kit.ProcCPU(m)
				n0 := pubTotal.Load()
				*rates = append(*rates, pubRate(t, m.Addr, 8, 3*time.Second, body))
				*cpus = append(*cpus, float64((kit.ProcCPU(m)-c0).Microseconds())/float64(pubTotal.Load()-n0))
			}
			published := func() int { return backlog + int(pubTotal.Load()) }
			for i := 0; i < 3; i++ {
				measure(&without, &cpuWithout)
				br = startBridge(t, bin, out, append(args, "--master", m.Addr, "--topics", "bench")...)
				if !smsstest.Poll(5*time.Minute, func() bool { return count() >= published() }) {
					t.Fatalf("bridge did not catch up: %d of %d", count(), published())
				}
				measure(&withBridge, &cpuBridge)
				br.kill()
				sl := kit.StartReplSlave(t, sdir, kit.PortOf(t, m.Addr), 0)
				measure(&withSlave, &cpuSlave)
				sl.Term()
				stopReader := rawReplicaReader(t, m.Addr)
				measure(&withReader, &cpuReader)
				stopReader()
			}
			w, b, sv, rd := median(without), median(withBridge), median(withSlave), median(withReader)
			t.Logf("BENCH master publish rate, 8 connections, 1 record of 200 B per request (medians of 3 x 3 s): without %.0f/s, bridge+JetStream attached %.0f/s (%+.1f%%), slave attached %.0f/s (%+.1f%%), bare replica reader %.0f/s (%+.1f%%); runs %v / %v / %v / %v",
				w, b, 100*(b-w)/w, sv, 100*(sv-w)/w, rd, 100*(rd-w)/w, without, withBridge, withSlave, withReader)
			t.Logf("BENCH master CPU per published message (utime+stime, medians of 3): without %.1f µs, bridge attached %.1f µs, slave attached %.1f µs, bare replica reader %.1f µs",
				median(cpuWithout), median(cpuBridge), median(cpuSlave), median(cpuReader))
		}
		br.kill()
		m.Term()
	}
}

func benchTarget(t *testing.T, target string) ([]string, func() int) {
	switch target {
	case "jetstream":
		ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		if !ns.ReadyForConnections(20 * time.Second) {
			t.Fatal("nats not ready")
		}
		t.Cleanup(ns.Shutdown)
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		return []string{"--nats", ns.ClientURL()}, func() int {
			st, err := js.Stream(context.Background(), "SMSS")
			if err != nil {
				return 0
			}
			return int(st.CachedInfo().State.Msgs)
		}
	default:
		kc, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(kc.Close)
		cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.MetadataMinAge(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		adm := kadm.NewClient(cl)
		return []string{"--kafka", strings.Join(kc.ListenAddrs(), ",")}, func() int {
			ends, err := adm.ListEndOffsets(context.Background(), "smss.bench")
			if err != nil {
				return 0
			}
			n := 0
			ends.Each(func(o kadm.ListedOffset) {
				if o.Err == nil {
					n += int(o.Offset)
				}
			})
			return n
		}
	}
}

// pubRate publishes single 200-byte records on conns connections for d and
// returns requests per second.
func pubRate(t *testing.T, addr string, conns int, d time.Duration, body string) float64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	rec := kit.Record(nil, body)
	for i := 0; i < conns; i++ {
		c := kit.Dial(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if err := c.Pub("bench", rec); err != nil {
					t.Error(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	pubTotal.Add(n.Load())
	return float64(n.Load()) / d.Seconds()
}

var pubTotal atomic.Int64

// rawReplicaReader follows the master's binlog from its end and discards
// it: what serving a replica reader costs the master, without the
// reader's own CPU (the bridge's publishing, the target's storing).
func rawReplicaReader(t *testing.T, addr string) func() {
	c := kit.Dial(t, addr)
	req, _ := protocol.AppendReplica(nil, int64(backlogEnd.Load()))
	c.C.SetDeadline(time.Time{})
	if _, err := c.C.Write(req); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			f, err := protocol.ReadReplicaFrame(c.R, 64<<20)
			if err != nil {
				return
			}
			if f.Code == protocol.StatusOK {
				if _, last, _, err := binlog.DecodeSpan(f.Body); err == nil {
					backlogEnd.Store(last)
				}
			}
		}
	}()
	return func() { c.C.Close(); <-done }
}

var backlogEnd atomic.Int64

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
