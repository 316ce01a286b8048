package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/protocol"
)

// TestBackgroundWiring: on a master the delay scheduler and the reaper run
// and are armed by the broker's hooks; on a slave only retention runs.
func TestBackgroundWiring(t *testing.T) {
	ctx := context.Background()
	cfg := config.Default()
	log := slog.New(slog.DiscardHandler)

	b, err := broker.Open(broker.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bg, err := startBackground(cfg, b, log)
	if err != nil {
		t.Fatal(err)
	}
	if bg.delay == nil || bg.reaper == nil || bg.retention == nil {
		t.Fatalf("master background %+v", bg)
	}
	rec, _ := protocol.AppendRecord(nil, protocol.Record{Body: []byte("x")})
	if _, err := b.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateTopic(ctx, []byte("short"), time.Now().UnixMilli()+1500); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishDelay(ctx, []byte("t"), rec, 1, 1000); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for bg.delay.Fired() < 1 || bg.reaper.Reaped() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d delays fired, %d topics reaped", bg.delay.Fired(), bg.reaper.Reaped())
		}
		time.Sleep(5 * time.Millisecond)
	}
	bg.stop()

	s, err := broker.Open(broker.Options{Dir: t.TempDir(), Logger: log, Slave: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bg, err = startBackground(cfg, s, log)
	if err != nil {
		t.Fatal(err)
	}
	if bg.delay != nil || bg.reaper != nil || bg.retention == nil {
		t.Fatalf("slave background %+v", bg)
	}
	bg.stop()
}

// TestReadOnlyStartWiring: after a read-only start on a full disk no
// background job runs (each writes), promote and follow are refused with
// the read-only 400, and readiness names the read-only start.
func TestReadOnlyStartWiring(t *testing.T) {
	cfg := config.Default()
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	var free atomic.Uint64
	free.Store(1 << 30)
	opts := broker.Options{Dir: dir, Logger: log, Slave: true, MinFreeBytes: 16 << 20, DiskCheckInterval: time.Hour,
		Statfs: func(string) (uint64, error) { return free.Load(), nil }}
	b, err := broker.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	free.Store(4 << 10)
	b, err = broker.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.ReadOnly() == nil {
		t.Fatal("not read-only")
	}
	bg, err := startBackground(cfg, b, log)
	if err != nil {
		t.Fatal(err)
	}
	if bg.delay != nil || bg.reaper != nil || bg.retention != nil || bg.gcStop != nil {
		t.Fatalf("read-only background %+v", bg)
	}
	if err := bg.startMaster(); err == nil {
		t.Fatal("the master's jobs started on a read-only broker")
	}
	bg.stop()

	n := &node{cfg: cfg, b: b, bg: bg, log: log}
	if _, err := n.Promote(context.Background()); !errors.Is(err, broker.ErrReadOnly) {
		t.Errorf("promote: %v", err)
	}
	if err := n.Follow(context.Background(), "127.0.0.1:1"); !errors.Is(err, broker.ErrReadOnly) {
		t.Errorf("follow: %v", err)
	}
	src := &adminSource{}
	src.b.Store(b)
	if ok, why := src.ready(); ok || !strings.HasPrefix(why, "started read-only on a full disk, not ready for writes") {
		t.Errorf("ready %v %q", ok, why)
	}
}
