package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// smssBin is built once for the package by the tool's own build step.
var smssBin string

// testEnv holds the package's binaries; it is removed when the tests end.
var testEnv *env

func TestMain(m *testing.M) {
	e, err := newEnv(false)
	testEnv = e
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	smssBin, err = e.buildSmss(context.Background())
	if err != nil {
		e.close()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	e.close()
	os.Exit(code)
}

// needRedis skips a test when redis-server is missing, except in CI, where
// it must be installed (.ci/run does it).
func needRedis(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not installed in CI: %v", err)
		}
		t.Skip("redis-server not installed")
	}
}

// bench runs the tool in-process and returns stdout; a non-zero exit fails
// the test unless allowFail.
func bench(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	// Every temp dir the tool makes lands here, so the test can check that
	// it is cleaned up.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := run(ctx, append(args, "--smss-bin", smssBin, "--quiet"), &out, &errb)
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temp dir not cleaned up: %v", left)
	}
	return out.String(), errb.String(), code
}

func benchJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, stderr, code := bench(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
}

// checkResult asserts what every started-server result must carry.
func checkResult(t *testing.T, r *Result, system, workload string, minMsgs int64, unit string) {
	t.Helper()
	if r.System != system || r.Workload != workload {
		t.Fatalf("result for %s %s", r.System, r.Workload)
	}
	if r.Messages < minMsgs || r.Seconds <= 0 || r.MsgsPerSec <= 0 || r.MBPerSec <= 0 {
		t.Fatalf("throughput: %+v", r)
	}
	if r.Latency == nil || r.Latency.Unit != unit || r.Latency.Count == 0 || r.Latency.P50 <= 0 ||
		r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.P999 || r.Latency.P999 > r.Latency.Max {
		t.Fatalf("latency: %+v", r.Latency)
	}
	if r.RSS == nil || r.RSS.IdleKiB <= 0 || r.RSS.MaxKiB < r.RSS.IdleKiB || r.RSS.HWMKiB < r.RSS.MaxKiB || r.RSS.SampledAt == 0 {
		t.Fatalf("rss: %+v", r.RSS)
	}
	if r.Disk == nil || r.Disk.Bytes <= 0 || r.Disk.BytesPerMsg < float64(r.Params.Size) {
		t.Fatalf("disk: %+v", r.Disk)
	}
}

func TestSmokePub(t *testing.T) {
	var r Result
	benchJSON(t, &r, "pub", "--conns", "3", "--duration", "300ms")
	checkResult(t, &r, "smss", wPub, 10, "request")
	if r.Params.Durable != "flushLevel 1" || r.Requests != r.Messages {
		t.Fatalf("%+v", r)
	}
}

func TestSmokePubCountRecordsRate(t *testing.T) {
	var r Result
	// 2 conns × 10 records at 2,000 msgs/s: 100 requests in about 0.5 s.
	benchJSON(t, &r, "pub", "--conns", "2", "--records", "10", "--count", "1000", "--rate", "2000", "--flush", "2")
	checkResult(t, &r, "smss", wPub, 1000, "request")
	if r.Messages != 1000 || r.Requests != 100 || r.Seconds < 0.4 || r.Params.Durable != "flushLevel 2" {
		t.Fatalf("messages %d requests %d in %.2fs (%s)", r.Messages, r.Requests, r.Seconds, r.Params.Durable)
	}
}

func TestSmokeSub(t *testing.T) {
	var r Result
	benchJSON(t, &r, "sub", "--count", "3000", "--batch", "7")
	checkResult(t, &r, "smss", wSub, 3000, "batch")
	if r.Messages != 3000 || r.Requests < 3000/7 {
		t.Fatalf("messages %d batches %d", r.Messages, r.Requests)
	}
}

func TestSmokeE2E(t *testing.T) {
	var r Result
	// A count, not a duration: how many messages fit in a time depends on
	// the machine's load (see TestSmokeRepl), while every one of a count
	// must arrive, whatever the load. Paced at 1,000/s it takes about 0.2 s.
	const n = 200
	benchJSON(t, &r, "e2e", "--rate", "1000", "--count", strconv.Itoa(n))
	checkResult(t, &r, "smss", wE2E, n, "message")
	if r.Messages != n || r.Requests != n || r.Latency.Count != n {
		t.Fatalf("%d messages, %d requests, %d latencies; want %d of each", r.Messages, r.Requests, r.Latency.Count, n)
	}
}

func TestSmokeRepl(t *testing.T) {
	var r Result
	out, stderr, code := bench(t, "repl", "--backlog", "2000", "--duration", "300ms", "--rate", "500", "--timeout", "10s", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	// As for e2e: how many messages a paced 300 ms run delivers through a
	// slave depends on the machine's load (5 of 150 at a load of 11).
	checkResult(t, &r, "smss", wRepl, 1, "message")
	if r.Extra["catch-up s"] <= 0 || r.Extra["backlog msgs"] != 2000 || r.RSS.SlaveKiB <= 0 {
		t.Fatalf("extra %v rss %+v", r.Extra, r.RSS)
	}
}

func TestSmokePubWithSlave(t *testing.T) {
	out, stderr, code := bench(t, "pub", "--with-slave", "--duration", "300ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	checkResult(t, &r, "smss", wPub, 10, "request")
	if !r.Params.WithSlave || r.RSS.SlaveKiB <= 0 {
		t.Fatalf("%+v %+v", r.Params, r.RSS)
	}
}

// TestSmokePubSemiSync: --sync-slaves 1 runs against a master whose
// publishes wait for the slave's confirmation.
func TestSmokePubSemiSync(t *testing.T) {
	out, stderr, code := bench(t, "pub", "--with-slave", "--sync-slaves", "1", "--conns", "4", "--duration", "300ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	checkResult(t, &r, "smss", wPub, 10, "request")
	if !r.Params.WithSlave || r.Params.SyncSlaves != 1 {
		t.Fatalf("%+v", r.Params)
	}
}

func TestSmokeRedis(t *testing.T) {
	needRedis(t)
	for _, tc := range []struct {
		args     []string
		workload string
		min      int64
		unit     string
	}{
		{[]string{"pub", "--conns", "2", "--records", "5", "--duration", "300ms"}, wPub, 10, "request"},
		{[]string{"sub", "--count", "2000", "--batch", "32"}, wSub, 2000, "batch"},
		// e2e by count, as in TestSmokeE2E: every message must arrive.
		{[]string{"e2e", "--rate", "1000", "--count", "200", "--flush", "2"}, wE2E, 200, "message"},
	} {
		t.Run(tc.workload, func(t *testing.T) {
			var r Result
			benchJSON(t, &r, append(tc.args, "--target", "redis")...)
			checkResult(t, &r, "redis", tc.workload, tc.min, tc.unit)
		})
	}
}

func TestSmokeCompare(t *testing.T) {
	needRedis(t)
	out, stderr, code := bench(t, "compare", "--workload", "pub", "--conns", "2", "--duration", "250ms", "--runs", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"smss pub", "redis pub", "appendfsync everysec", "msgs/s", "ratio", "lat p99 µs", "RSS max MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("compare output lacks %q:\n%s", want, out)
		}
	}
	var c compareJSON
	benchJSON(t, &c, "compare", "--workload", "sub", "--count", "1000", "--batch", "255")
	if len(c.Smss) != 1 || len(c.Redis) != 1 || c.Ratio["msgs/s"] <= 0 || c.SmssMedian["msgs/s"] <= 0 {
		t.Fatalf("%+v", c)
	}
}

// Cancelling (what Ctrl-C does) stops the run, kills the server and removes
// the temp dir.
func TestInterrupt(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"pub", "--duration", "1h", "--smss-bin", smssBin, "--quiet"}, &out, &errb)
	}()
	// Cancel once the server is up and the run is under way.
	deadline := time.After(30 * time.Second)
	for {
		if logs, _ := filepath.Glob(filepath.Join(tmp, "smss-bench-*", "smss-*", "server.log")); len(logs) > 0 {
			if b, _ := os.ReadFile(logs[0]); bytes.Contains(b, []byte("smss listening")) {
				break
			}
		}
		select {
		case <-deadline:
			t.Fatal("server did not start")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 130 {
			t.Fatalf("exit %d, want 130: %s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop after cancel")
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("temp dir not cleaned up: %v", left)
	}
}

// natsBin is nats-server, built on first use into the package's temp dir
// by the tool's own build step (from the version go.mod pins).
var (
	natsOnce   sync.Once
	natsBin    string
	natsBinErr error
)

func natsBinary(t *testing.T) string {
	t.Helper()
	natsOnce.Do(func() { natsBin, natsBinErr = testEnv.buildNats(context.Background()) })
	if natsBinErr != nil {
		t.Fatal(natsBinErr)
	}
	return natsBin
}

// TestSmokeJetStream runs every JetStream code path on a tiny workload:
// compare --peer jetstream (single and batched publish, fsync before ack),
// stored consumption with both ack policies, live delivery, and the
// replicated row: a three-node smss cluster against an R3 stream on three
// nats-servers. (master + semi-synchronous slave is TestSmokePubSemiSync's
// path; what its 200 means is TestCopies'.)
func TestSmokeJetStream(t *testing.T) {
	nb := natsBinary(t)
	js := func(args ...string) []string { return append(args, "--nats-bin", nb) }

	var c compareJSON
	benchJSON(t, &c, js("compare", "--workload", "pub", "--peer", "jetstream", "--conns", "2", "--records", "10", "--count", "300")...)
	if len(c.Smss) != 1 || len(c.JetStream) != 1 || len(c.Redis) != 0 || c.RatioJetStream["msgs/s"] <= 0 {
		t.Fatalf("%+v", c)
	}
	checkResult(t, c.JetStream[0], "jetstream", wPub, 300, "request")
	if d := c.JetStream[0].Params.Durable; !strings.Contains(d, "2m default") {
		t.Fatalf("durability %q", d)
	}

	var r Result
	benchJSON(t, &r, js("pub", "--target", "jetstream", "--conns", "2", "--count", "100", "--flush", "2")...)
	checkResult(t, &r, "jetstream", wPub, 100, "request")
	if !strings.Contains(r.Params.Durable, "always") || r.Requests != 100 {
		t.Fatalf("%+v", r)
	}

	for _, ack := range []string{jsAckNone, jsAckExplicit} {
		var r Result
		benchJSON(t, &r, js("sub", "--target", "jetstream", "--count", "300", "--batch", "7", "--js-ack", ack)...)
		checkResult(t, &r, "jetstream", wSub, 300, "batch")
		if r.Messages != 300 || r.Requests < 300/7 || r.Params.Ack != ack {
			t.Fatalf("messages %d batches %d ack %q", r.Messages, r.Requests, r.Params.Ack)
		}
	}

	r = Result{}
	benchJSON(t, &r, js("e2e", "--target", "jetstream", "--rate", "1000", "--count", "200")...)
	checkResult(t, &r, "jetstream", wE2E, 200, "message")
	if r.Messages != 200 || r.Latency.Count != 200 {
		t.Fatalf("%d messages, %d latencies", r.Messages, r.Latency.Count)
	}

	c = compareJSON{}
	benchJSON(t, &c, js("compare", "--workload", "pub", "--peer", "jetstream", "--cluster", "--conns", "2", "--count", "100")...)
	if len(c.Smss) != 1 || len(c.JetStream) != 1 || c.RatioJetStream["msgs/s"] <= 0 {
		t.Fatalf("%+v", c)
	}
	checkResult(t, c.Smss[0], "smss", wPub, 100, "request")
	checkResult(t, c.JetStream[0], "jetstream", wPub, 100, "request")
	// Each side says what its acknowledgement stands for, beside the figures.
	if d := describe(c.Smss[0]); !strings.Contains(d, "cluster of 3 (-role auto, syncSlaves 1): a 200 means every in-sync member") {
		t.Errorf("smss side: %s", d)
	}
	if d := describe(c.JetStream[0]); !strings.Contains(d, "R3: a PubAck means a quorum of 2 of 3") {
		t.Errorf("jetstream side: %s", d)
	}
}

// TestCopies: what an acknowledgement stands for, per setup.
func TestCopies(t *testing.T) {
	for _, tc := range []struct {
		c    copier
		want string
	}{
		{&smssSys{}, ""},
		{&smssSys{syncSlaves: 1}, "a 200 means the master and 1 slave(s) stored it (2 copies"},
		{&smssSys{cluster: true}, "every in-sync member stored it (3 copies"},
		{&jsSys{replicas: 1}, ""},
		{&jsSys{replicas: 3}, "quorum of 2 of 3"},
	} {
		got := tc.c.copies()
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
}

// TestSmokeQueue runs the queue workload against both systems, acks one
// by one and in batches: every preloaded message's ack is confirmed, and
// nothing more is counted.
func TestSmokeQueue(t *testing.T) {
	needRedis(t)
	for _, tc := range []struct {
		name         string
		conns, batch string
	}{
		{"one by one", "4", "1"},
		{"batched", "3", "50"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2000
			var c compareJSON
			benchJSON(t, &c, "compare", "--workload", "queue", "--count", strconv.Itoa(n), "--conns", tc.conns, "--batch", tc.batch)
			if len(c.Smss) != 1 || len(c.Redis) != 1 || c.Ratio["msgs/s"] <= 0 {
				t.Fatalf("%+v", c)
			}
			for _, r := range []*Result{c.Smss[0], c.Redis[0]} {
				checkResult(t, r, r.System, wQueue, n, "ack")
				if r.Messages != n || strconv.Itoa(r.Params.Conns) != tc.conns || strconv.Itoa(r.Params.Batch) != tc.batch {
					t.Fatalf("%s: %d messages, params %+v", r.System, r.Messages, r.Params)
				}
				// Present, but possibly 0: /proc counts in 10 ms ticks,
				// more than Redis needs for 2,000 messages in batches.
				if r.CPU == nil {
					t.Fatalf("%s: no server CPU", r.System)
				}
				// Each worker takes at most a batch per delivery.
				if b, _ := strconv.Atoi(tc.batch); r.Requests < int64(n/b) {
					t.Fatalf("%s: %d batches for %d messages of batch %d", r.System, r.Requests, n, b)
				}
			}
		})
	}
}
