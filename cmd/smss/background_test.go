package main

import (
	"context"
	"log/slog"
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
