package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/config"
)

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name  string
		args  string
		err   string // substring; empty = valid
		check func(t *testing.T, o *options)
	}{
		{name: "pub defaults", args: "pub", check: func(t *testing.T, o *options) {
			if o.workload != wPub || o.target != targetSmss || o.conns != 1 || o.size != 200 || o.records != 1 ||
				o.rate != 0 || o.duration != 10*time.Second || o.flush != 1 || o.batch != 32 || o.topic != "bench" ||
				o.runs != 1 || o.compare || o.freshTopic {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "pub knobs", args: "pub --conns 64 --size 100 --records 10 --rate 5000 --count 1000 --flush 2 --json --quiet",
			check: func(t *testing.T, o *options) {
				if o.conns != 64 || o.size != 100 || o.records != 10 || o.rate != 5000 || o.count != 1000 || o.flush != 2 || !o.json || !o.quiet {
					t.Fatalf("%+v", o)
				}
			}},
		{name: "sub default count", args: "sub --batch 255", check: func(t *testing.T, o *options) {
			if o.count != 1_000_000 || o.batch != 255 {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "e2e default rate", args: "e2e", check: func(t *testing.T, o *options) {
			if o.rate != 1000 {
				t.Fatalf("rate %v", o.rate)
			}
		}},
		{name: "repl", args: "repl --backlog 5000 --duration 2s", check: func(t *testing.T, o *options) {
			if o.backlog != 5000 || o.rate != 1000 || o.duration != 2*time.Second {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "compare", args: "compare --workload pub --conns 64 --duration 10s --flush 1 --runs 3", check: func(t *testing.T, o *options) {
			if !o.compare || o.workload != wPub || o.conns != 64 || o.runs != 3 {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "addr gets a fresh topic", args: "pub --addr 127.0.0.1:1 --pid 5", check: func(t *testing.T, o *options) {
			if !o.freshTopic || o.pid != 5 {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "addr with explicit topic", args: "pub --addr 127.0.0.1:1 --topic t1", check: func(t *testing.T, o *options) {
			if o.freshTopic || o.topic != "t1" {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "redis target", args: "sub --target redis", check: func(t *testing.T, o *options) {
			if o.target != targetRedis {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "compare defaults to redis", args: "compare --workload pub", check: func(t *testing.T, o *options) {
			if o.peer != targetRedis || o.jsReplicas != 0 {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "compare jetstream", args: "compare --workload sub --peer jetstream --js-ack explicit", check: func(t *testing.T, o *options) {
			if o.peer != targetJetStream || o.jsAck != jsAckExplicit || o.jsReplicas != 0 {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "compare jetstream replicated", args: "compare --workload pub --peer jetstream --with-slave --sync-slaves 1",
			check: func(t *testing.T, o *options) {
				if o.jsReplicas != 3 || !o.withSlave || o.syncSlaves != 1 {
					t.Fatalf("%+v", o)
				}
			}},
		{name: "jetstream target", args: "e2e --target jetstream", check: func(t *testing.T, o *options) {
			if o.target != targetJetStream || o.jsAck != jsAckNone {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "bad peer", args: "compare --workload pub --peer kafka", err: "--peer"},
		{name: "peer outside compare", args: "pub --peer jetstream", err: "compare only"},
		{name: "bad ack policy", args: "sub --target jetstream --js-ack all", err: "--js-ack"},
		{name: "ack policy on smss", args: "sub --js-ack explicit", err: "applies to JetStream"},
		{name: "compare redis with slave", args: "compare --workload pub --with-slave --sync-slaves 1", err: "--peer jetstream"},
		{name: "compare jetstream async slave", args: "compare --workload pub --peer jetstream --with-slave", err: "--sync-slaves 1"},
		{name: "compare jetstream replicated sub", args: "compare --workload sub --peer jetstream --with-slave --sync-slaves 1", err: "--workload pub"},
		{name: "compare jetstream cluster", args: "compare --workload pub --peer jetstream --cluster", check: func(t *testing.T, o *options) {
			if !o.cluster || o.jsReplicas != 3 || o.withSlave {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "smss cluster", args: "pub --cluster --conns 64"},
		{name: "cluster on sub", args: "sub --cluster", err: "pub workload"},
		{name: "cluster with slave", args: "pub --cluster --with-slave", err: "not with --with-slave"},
		{name: "cluster on redis compare", args: "compare --workload pub --cluster", err: "--peer jetstream"},
		{name: "cluster on jetstream target", args: "pub --cluster --target jetstream", err: "--target smss"},
		{name: "repl on jetstream", args: "repl --target jetstream", err: "smss only"},
		{name: "queue defaults", args: "compare --workload queue --conns 16 --batch 100", check: func(t *testing.T, o *options) {
			if !o.compare || o.workload != wQueue || o.conns != 16 || o.batch != 100 || o.count != 200_000 || o.peer != targetRedis {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "queue on jetstream", args: "compare --workload queue --peer jetstream", err: "--peer redis"},
		{name: "queue with rate", args: "queue --rate 100", err: "--rate does not apply to queue"},
		{name: "unknown workload", args: "push", err: "unknown workload"},
		{name: "compare without workload", args: "compare", err: "--workload"},
		{name: "compare repl", args: "compare --workload repl", err: "smss only"},
		{name: "compare with addr", args: "compare --workload pub --addr 127.0.0.1:1", err: "--addr"},
		{name: "workload outside compare", args: "pub --workload sub", err: "compare only"},
		{name: "bad target", args: "pub --target kafka", err: "--target"},
		{name: "repl on redis", args: "repl --target redis", err: "smss only"},
		{name: "flush 3", args: "pub --flush 3", err: "--flush"},
		{name: "conns 0", args: "pub --conns 0", err: "--conns"},
		{name: "size below stamp", args: "pub --size 7", err: "--size"},
		{name: "records above limit", args: "pub --records 10001", err: "--records"},
		{name: "payload above limit", args: "pub --records 1000 --size 10000", err: "8 MiB"},
		{name: "batch 256", args: "sub --batch 256", err: "--batch"},
		{name: "batch 0", args: "e2e --batch 0", err: "--batch"},
		{name: "zero duration", args: "pub --duration 0s", err: "--duration"},
		{name: "zero duration with count", args: "pub --duration 0s --count 10"},
		{name: "pid without addr", args: "pub --pid 3", err: "--pid"},
		{name: "slave on sub", args: "sub --with-slave", err: "--with-slave"},
		{name: "sync slaves", args: "pub --with-slave --sync-slaves 1"},
		{name: "sync slaves without slave", args: "pub --sync-slaves 1", err: "--sync-slaves needs --with-slave"},
		{name: "sync slaves with addr", args: "pub --with-slave --sync-slaves 1 --addr 127.0.0.1:1", err: "--sync-slaves needs"},
		{name: "sync slaves 2", args: "pub --with-slave --sync-slaves 2", err: "want 0 or 1"},
		{name: "e2e rate 0", args: "e2e --rate 0", err: "fixed --rate"},
		{name: "sub with rate", args: "sub --rate 10", err: "--rate"},
		{name: "repl with count", args: "repl --count 10", err: "--backlog"},
		{name: "runs 0", args: "pub --runs 0", err: "--runs"},
		{name: "bad topic", args: "pub --topic a/b", err: "--topic"},
		{name: "stray argument", args: "pub extra", err: "unexpected argument"},
		{name: "unknown flag", args: "pub --nope", err: "not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseOptions(strings.Fields(tc.args), io.Discard)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, o)
			}
		})
	}
	if _, err := parseOptions(nil, io.Discard); err == nil {
		t.Fatal("no workload accepted")
	}
	var usage strings.Builder
	if _, err := parseOptions([]string{"--help"}, &usage); !errors.Is(err, flag.ErrHelp) || !strings.Contains(usage.String(), "-conns") {
		t.Fatalf("--help: %v\n%s", err, usage.String())
	}
}

// The config the tool writes must be one the server accepts, with the
// flush level and data path it asked for.
func TestSmssConfigLoads(t *testing.T) {
	dir := t.TempDir()
	for _, flush := range []int{0, 1, 2} {
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, []byte(smssConfig(filepath.Join(dir, "data"), flush)), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		if cfg.Port != 0 || cfg.Host != "127.0.0.1" || cfg.Store.FlushLevel != flush || cfg.Store.Path != filepath.Join(dir, "data") || cfg.Log.Sample != 0 {
			t.Fatalf("flush %d: %+v", flush, cfg)
		}
	}
}

func TestAppendfsync(t *testing.T) {
	for flush, want := range map[int]string{0: "no", 1: "everysec", 2: "always"} {
		if got := appendfsync(flush); got != want {
			t.Errorf("appendfsync(%d) = %s, want %s", flush, got, want)
		}
	}
}

func TestParseProcStatus(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		rss, hwm int64
		err      bool
	}{
		{name: "typical", in: "Name:\tsmss\nVmPeak:\t  900 kB\nVmHWM:\t   24576 kB\nVmRSS:\t   12288 kB\nThreads:\t7\n", rss: 12288, hwm: 24576},
		{name: "missing hwm", in: "VmRSS:\t 1 kB\n", err: true},
		{name: "bad unit", in: "VmRSS:\t 1 MB\nVmHWM:\t 1 kB\n", err: true},
		{name: "bad number", in: "VmRSS:\t x kB\nVmHWM:\t 1 kB\n", err: true},
		{name: "empty (kernel thread)", in: "Name:\tkthreadd\n", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rss, hwm, err := parseProcStatus(tc.in)
			if (err != nil) != tc.err || rss != tc.rss || hwm != tc.hwm {
				t.Fatalf("got %d %d %v", rss, hwm, err)
			}
		})
	}
	// Our own process has both lines.
	if rss, hwm, err := procMem(os.Getpid()); err != nil || rss <= 0 || hwm < rss {
		t.Fatalf("self: %d %d %v", rss, hwm, err)
	}
}

func TestFmtNum(t *testing.T) {
	tests := map[float64]string{0: "0", 1.234: "1.23", 123.45: "123.5", 1234567.8: "1,234,568", 999.96: "1,000"}
	for in, want := range tests {
		if got := fmtNum(in); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	line := "1234 (smss bench) S 1 1234 1234 0 -1 4194560 2000 0 0 0 250 75 0 0 20 0 8 0 100 0 0\n"
	got, err := parseProcStat(line)
	if err != nil || got != 3250*time.Millisecond {
		t.Fatalf("got %v %v, want 3.25s", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 a b 0"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if cpu, err := procCPU(os.Getpid()); err != nil || cpu < 0 {
		t.Fatalf("self: %v %v", cpu, err)
	}
}
