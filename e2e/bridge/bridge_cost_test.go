package bridge

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

var (
	benchBinary      = "./cmd/smss-bench"
	replReaderBinary = "./e2e/bridge/testdata/replreader"
)

// pin sets the CPU affinity of every thread of pid (and so of the threads
// it starts later) to cpus.
func pin(t *testing.T, pid int, cpus string) {
	t.Helper()
	if out, err := exec.Command("taskset", "-a", "-cp", cpus, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		t.Fatalf("taskset %s %d: %v\n%s", cpus, pid, err, out)
	}
}

// cpuOf is the user+system CPU time of pid so far (0 if it is gone).
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}

// benchRun is one smss-bench pub run as its --json prints it.
type benchRun struct {
	Messages   int64   `json:"messages"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	LateSends  int64   `json:"late_sends"`
	CPU        *struct {
		USPerMsg float64 `json:"us_per_msg"`
	} `json:"server_cpu"`
}

// TestBridgeMasterCost measures, for BENCHMARKS.md, what a replica reader
// costs the master, with the master's CPU separated from the reader's:
// the master and the publishing benchmark (smss-bench) are pinned to CPU 0,
// whatever is attached (a slave, a bare replica reader, or smss-bridge and
// its nats-server with JetStream) to CPU 1, and this test process, which
// only watches, to CPU 1 too. Each setting is measured flat out (publish
// rate) and at fixed publish rates (master CPU per message at the same
// group sizes), in rotating rounds. It runs only with SMSS_BRIDGE_COST=1
// (SMSS_BRIDGE_COST_ROUNDS, default 3; about 100 s per round) and needs
// taskset and at least 2 CPUs.
func TestBridgeMasterCost(t *testing.T) {
	if os.Getenv("SMSS_BRIDGE_COST") == "" {
		t.Skip("set SMSS_BRIDGE_COST=1 to run the bridge cost benchmark")
	}
	rounds := 3
	if v := os.Getenv("SMSS_BRIDGE_COST_ROUNDS"); v != "" {
		rounds, _ = strconv.Atoi(v)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("needs taskset")
	}
	dur := 5 * time.Second
	if v := os.Getenv("SMSS_BRIDGE_COST_SECONDS"); v != "" {
		n, _ := strconv.Atoi(v)
		dur = time.Duration(n) * time.Second
	}
	bridgeBin, benchBin, readerBin := buildBridge(t), smsstest.Binary(t, benchBinary), smsstest.Binary(t, replReaderBinary)
	pin(t, os.Getpid(), "1")

	ns := &natsProc{bin: buildNATS(t), storeDir: t.TempDir(), port: kit.FreePort(t), out: &smsstest.SyncBuffer{}}
	ns.start(t)
	t.Cleanup(ns.p.kill)
	pin(t, ns.p.cmd.Process.Pid, "1")

	port := kit.FreePort(t)
	mdir, sdir := t.TempDir(), t.TempDir()
	kit.ReplConfig(t, mdir, port, "")
	m := kit.StartArgs(t, mdir, "-role", "master")
	pin(t, m.Cmd.Process.Pid, "0")
	kit.ReplConfig(t, sdir, kit.FreePort(t), "")
	addr := m.Addr
	cfgPath := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(cfgPath, []byte("nats:\n  fileStorage: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	var published int64
	type attached struct {
		pid  func() int
		stop func()
	}
	attach := map[string]func() attached{
		"nothing": func() attached { return attached{pid: func() int { return 0 }, stop: func() {}} },
		"slave": func() attached {
			sl := kit.StartReplSlave(t, sdir, port, 0)
			pin(t, sl.Cmd.Process.Pid, "1")
			kit.WaitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), sl, 120*time.Second)
			return attached{pid: func() int { return sl.Cmd.Process.Pid }, stop: sl.Term}
		},
		"reader": func() attached {
			out := &smsstest.SyncBuffer{}
			p := startBridge(t, readerBin, out, "-addr", addr)
			pin(t, p.cmd.Process.Pid, "1")
			if !smsstest.Poll(20*time.Second, func() bool { return strings.Contains(out.String(), "following after") }) {
				t.Fatalf("the replica reader did not start:\n%s", out.String())
			}
			return attached{pid: func() int { return p.cmd.Process.Pid }, stop: p.kill}
		},
		"bridge": func() attached {
			out := &smsstest.SyncBuffer{}
			p := startBridge(t, bridgeBin, out, "--nats", ns.url(), "--config", cfgPath, "--master", addr, "--topics", "*")
			pin(t, p.cmd.Process.Pid, "1")
			if !smsstest.Poll(5*time.Minute, func() bool { return int64(streamMsgs(ns.url())) >= published }) {
				t.Fatalf("the bridge did not catch up: %d of %d\n%s", streamMsgs(ns.url()), published, kit.Tail(out.String(), 3000))
			}
			return attached{pid: func() int { return p.cmd.Process.Pid }, stop: func() {
				// The stream must hold what was published while attached:
				// the bridge kept up (else it would not be a live mirror).
				if !smsstest.Poll(5*time.Minute, func() bool { return int64(streamMsgs(ns.url())) >= published }) {
					t.Errorf("the bridge did not mirror everything: %d of %d", streamMsgs(ns.url()), published)
				}
				p.kill()
			}}
		},
	}
	settings := []string{"nothing", "slave", "reader", "bridge"}
	type key struct{ setting, load string }
	type sample struct {
		rate, masterUS, otherUS, natsUS float64
		late                            int64
		load                            string
	}
	results := map[key][]sample{}
	loads := []struct {
		name string
		args []string
	}{
		{"flat out", nil},
		{"5,000/s", []string{"--rate", "5000"}},
		{"20,000/s", []string{"--rate", "20000"}},
	}
	for r := 0; r < rounds; r++ {
		order := append(settings[r%len(settings):], settings[:r%len(settings)]...)
		for _, s := range order {
			a := attach[s]()
			for _, l := range loads {
				up, _ := os.ReadFile("/proc/loadavg")
				// The attached process's CPU, and for the bridge its
				// nats-server's, over the run.
				var o0, n0 time.Duration
				if p := a.pid(); p != 0 {
					o0 = cpuOf(p)
				}
				n0 = cpuOf(ns.p.cmd.Process.Pid)
				args := append([]string{"-c", "0", benchBin, "pub", "--addr", addr, "--pid", strconv.Itoa(m.Cmd.Process.Pid),
					"--conns", "8", "--records", "1", "--size", "200", "--duration", dur.String(), "--json", "--quiet"}, l.args...)
				cmd := exec.Command("taskset", args...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				outb, err := cmd.Output()
				if err != nil {
					t.Fatalf("smss-bench %v: %v\n%s\n%s", args, err, outb, stderr.String())
				}
				var o1 time.Duration
				if p := a.pid(); p != 0 {
					o1 = cpuOf(p)
				}
				n1 := cpuOf(ns.p.cmd.Process.Pid)
				var res benchRun
				if err := json.Unmarshal(outb, &res); err != nil {
					t.Fatalf("smss-bench output: %v\n%s", err, outb)
				}
				published += res.Messages
				smp := sample{rate: res.MsgsPerSec, late: res.LateSends, load: strings.Fields(string(up))[0]}
				if res.CPU != nil {
					smp.masterUS = res.CPU.USPerMsg
				}
				if res.Messages > 0 {
					smp.otherUS = float64((o1 - o0).Microseconds()) / float64(res.Messages)
					smp.natsUS = float64((n1 - n0).Microseconds()) / float64(res.Messages)
				}
				results[key{s, l.name}] = append(results[key{s, l.name}], smp)
				t.Logf("round %d %-8s %-9s %8.0f msgs/s  master %5.2f µs/msg  attached (CPU 1) %5.2f µs/msg  nats-server %5.2f µs/msg  late %d  load %s",
					r+1, s, l.name, smp.rate, smp.masterUS, smp.otherUS, smp.natsUS, smp.late, smp.load)
			}
			a.stop()
		}
	}
	med := func(v []float64) (float64, float64, float64) {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[len(s)/2], s[0], s[len(s)-1]
	}
	for _, l := range loads {
		var base, baseCPU float64
		for _, s := range settings {
			var rates, cpus, others, natss []float64
			for _, x := range results[key{s, l.name}] {
				rates = append(rates, x.rate)
				cpus = append(cpus, x.masterUS)
				others = append(others, x.otherUS)
				natss = append(natss, x.natsUS)
			}
			rm, rlo, rhi := med(rates)
			cm, clo, chi := med(cpus)
			om, _, _ := med(others)
			nm, _, _ := med(natss)
			if s == "nothing" {
				base, baseCPU = rm, cm
			}
			t.Logf("BENCH %-9s %-8s rate %8.0f (%+.1f%%) [%0.f–%0.f]  master µs/msg %5.2f (%+.1f%%) [%.2f–%.2f]  attached µs/msg %5.2f  nats-server µs/msg %5.2f",
				l.name, s, rm, 100*(rm-base)/base, rlo, rhi, cm, 100*(cm-baseCPU)/baseCPU, clo, chi, om, nm)
		}
	}
}

// TestBridgeMirrorCPU measures, for BENCHMARKS.md, the CPU the smss-bridge
// process spends per mirrored message, and its target's, with each in a
// process of its own: a backlog of 200-byte messages (100 records per
// publish) mirrored into nats-server (JetStream, file storage) and into
// kfake (e2e/bridge/testdata/kfakeproc, with a data directory), alternating, in
// SMSS_BRIDGE_COST_ROUNDS rounds (default 3). SMSS_BRIDGE_BIN runs another
// smss-bridge binary (for a before/after). It runs only with
// SMSS_BRIDGE_COST=1.
func TestBridgeMirrorCPU(t *testing.T) {
	if os.Getenv("SMSS_BRIDGE_COST") == "" {
		t.Skip("set SMSS_BRIDGE_COST=1 to run the bridge cost benchmark")
	}
	rounds := 3
	if v := os.Getenv("SMSS_BRIDGE_COST_ROUNDS"); v != "" {
		rounds, _ = strconv.Atoi(v)
	}
	bin := os.Getenv("SMSS_BRIDGE_BIN")
	if bin == "" {
		bin = buildBridge(t)
	}
	const backlog = 200_000
	dir := t.TempDir()
	kit.ReplConfig(t, dir, kit.FreePort(t), "")
	m := kit.StartArgs(t, dir, "-role", "master")
	c := kit.Dial(t, m.Addr)
	if err := c.Create("bench", 0); err != nil {
		t.Fatal(err)
	}
	var batch [][]byte
	for i := 0; i < 100; i++ {
		batch = append(batch, kit.Record([][2]string{{"traceId", fmt.Sprintf("t-%04d", i)}}, strings.Repeat("b", 200)))
	}
	for i := 0; i < backlog/100; i++ {
		if err := c.Pub("bench", batch...); err != nil {
			t.Fatal(err)
		}
	}
	type sample struct{ rate, bridgeUS, targetUS float64 }
	results := map[string][]sample{}
	for r := 0; r < rounds; r++ {
		for _, target := range []string{"jetstream", "kafka"} {
			var args []string
			var count func() int64
			var tp *bridgeProc
			switch target {
			case "jetstream":
				ns := &natsProc{bin: buildNATS(t), storeDir: t.TempDir(), port: kit.FreePort(t), out: &smsstest.SyncBuffer{}}
				ns.start(t)
				tp = ns.p
				args = []string{"--nats", ns.url()}
				count = func() int64 { return int64(streamMsgs(ns.url())) }
			case "kafka":
				kp := &kfakeProc{bin: smsstest.Binary(t, kfakeBinary), dataDir: t.TempDir(), port: kit.FreePort(t), out: &smsstest.SyncBuffer{}}
				kp.start(t)
				tp = kp.p
				args = []string{"--kafka", kp.addr()}
				count = func() int64 { return kafkaHeld(kp.addr()) }
			}
			up, _ := os.ReadFile("/proc/loadavg")
			t0 := cpuOf(tp.cmd.Process.Pid)
			out := &smsstest.SyncBuffer{}
			start := time.Now()
			br := startBridge(t, bin, out, append(args, "--master", m.Addr, "--topics", "bench")...)
			if !smsstest.Poll(5*time.Minute, func() bool { return count() >= backlog }) {
				t.Fatalf("%s: mirrored %d of %d\n%s", target, count(), backlog, kit.Tail(out.String(), 3000))
			}
			el := time.Since(start)
			s := sample{rate: backlog / el.Seconds(),
				bridgeUS: float64(cpuOf(br.cmd.Process.Pid).Microseconds()) / backlog,
				targetUS: float64((cpuOf(tp.cmd.Process.Pid) - t0).Microseconds()) / backlog}
			br.kill()
			tp.kill()
			results[target] = append(results[target], s)
			t.Logf("round %d %-9s %7.0f msgs/s  bridge %5.2f µs/msg  target %5.2f µs/msg  load %s",
				r+1, target, s.rate, s.bridgeUS, s.targetUS, strings.Fields(string(up))[0])
		}
	}
	for _, target := range []string{"jetstream", "kafka"} {
		var rates, bus, tus []float64
		for _, s := range results[target] {
			rates, bus, tus = append(rates, s.rate), append(bus, s.bridgeUS), append(tus, s.targetUS)
		}
		sort.Float64s(rates)
		sort.Float64s(bus)
		sort.Float64s(tus)
		t.Logf("BENCH %-9s %7.0f msgs/s [%.0f–%.0f]  bridge %5.2f µs/msg [%.2f–%.2f]  target %5.2f µs/msg [%.2f–%.2f]",
			target, median(rates), rates[0], rates[len(rates)-1], median(bus), bus[0], bus[len(bus)-1], median(tus), tus[0], tus[len(tus)-1])
	}
}
