package main

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/protocol"
)

func record(t *testing.T, body string, headers ...protocol.KV) []byte {
	t.Helper()
	r, err := protocol.AppendRecord(nil, protocol.Record{Headers: headers, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// movedDir makes a real rejoin directory: a data directory takes writes
// after a point, then broker.Rewind moves them aside.
func movedDir(t *testing.T) string {
	t.Helper()
	dir, ctx := t.TempDir(), context.Background()
	b, err := broker.Open(broker.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	check := func(_ int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	check(b.CreateTopic(ctx, []byte("t"), 0))
	check(b.Publish(ctx, []byte("t"), record(t, "kept"), 1))
	check(b.PublishDelay(ctx, []byte("t"), record(t, "old delay"), 1, 3_600_000))
	ds, err := b.ScanDelays(0, math.MaxInt64, 10)
	if err != nil || len(ds.Due) != 1 {
		t.Fatalf("delays %v %v", ds, err)
	}
	common := b.LastEventID()
	// The tail: two messages, a topic of its own, a delay, and the apply
	// of the delay stored before the point (its master fires that one).
	check(b.Publish(ctx, []byte("t"), append(record(t, "x1", protocol.KV{Key: "k", Value: "v"}), record(t, "x2")...), 2))
	check(b.CreateTopic(ctx, []byte("n"), 0))
	check(b.Publish(ctx, []byte("n"), record(t, "y"), 1))
	check(b.PublishDelay(ctx, []byte("t"), record(t, "later"), 1, 3_600_000))
	check(b.ApplyDelay(ctx, "t", ds.Due[0].Value))
	// The rewind point: where the first block after the common prefix
	// starts, as a divergence check finds it.
	first, ok, err := b.BinlogBlockAt(common + 1)
	if err != nil || !ok || first.First != common+1 {
		t.Fatalf("first tail block %+v %v %v", first, ok, err)
	}
	at := first.Pos
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, out, err := broker.Rewind(broker.Options{Dir: dir}, broker.RewindRequest{At: at, CommonLast: common})
	if err != nil || out == "" {
		t.Fatalf("rewind: %q %v", out, err)
	}
	return out
}

func TestDiverged(t *testing.T) {
	moved := movedDir(t)
	addr := startServer(t)
	ctl(t, addr, "", "diverged", moved).expect(t, 0,
		"pub t: 2 message(s); republish: publish", `body "x1"`, "create n: 0 message(s); republish: skip",
		"delay t: 1 message(s); republish: delay", "delay-apply t: 1 message(s); republish: skip")

	// The server lacks both topics: refused, naming the way out.
	if r := ctl(t, addr, "", "diverged", moved, "--republish", "--no-check"); r.code != 1 || !strings.Contains(r.stderr, "--create-topics") {
		t.Fatalf("republish without the topics: %+v", r)
	}
	ctl(t, addr, "", "diverged", moved, "--republish", "--create-topics", "--no-check").expect(t, 0, "republished 4 message(s)")
	r := ctl(t, addr, "", "sub", "t", "--who", "w", "--count", "2")
	// The client marks the republished request with a message id.
	r.expect(t, 0, "k=v smss-msg-id=", "\tx1", "\tx2")
	ctl(t, addr, "", "sub", "n", "--who", "w", "--count", "1").expect(t, 0, "\ty")
	ctl(t, addr, "", "topic", "info", "--json", "t").expect(t, 0)
}
