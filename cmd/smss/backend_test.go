package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/server"
)

// The adapter hands the broker's subscriptions to the server, and a failed
// Subscribe as a nil interface (not a typed nil the server would use).
func TestBackendAdapter(t *testing.T) {
	b, err := broker.Open(broker.Options{Dir: filepath.Join(t.TempDir(), "data"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var be server.Backend = backend{b}
	s, err := be.Subscribe([]byte("nope"), []byte("w"), 0)
	if s != nil || !errors.Is(err, protocol.ErrTopicNotExist) {
		t.Fatalf("Subscribe on a missing topic: %v, %v", s, err)
	}
	ctx := context.Background()
	if _, err := be.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	rec, err := protocol.AppendRecord(nil, protocol.Record{Body: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	id, err := be.Publish(ctx, []byte("t"), rec, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err = be.Subscribe([]byte("t"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, n, err := s.Next(ctx, nil, 10, time.Second)
	if err != nil || n != 1 {
		t.Fatalf("Next: %d messages, %v", n, err)
	}
	msgs, err := protocol.ParseSubMessages(out, n)
	if err != nil || msgs[0].EventID != id || string(msgs[0].Body) != "hello" {
		t.Fatalf("message %+v, %v", msgs, err)
	}
	if _, err := be.PublishDelay(ctx, []byte("t"), rec, 1, 1500); err != nil {
		t.Fatalf("PublishDelay: %v", err)
	}

	// The epoll loop's batch publish (server.epoll): each publish gets its
	// eventId or its refusal, in order.
	bp, ok := be.(server.BatchPublisher)
	if !ok {
		t.Fatal("the adapter does not serve batch publishes")
	}
	ps := []server.Pub{{Topic: []byte("t"), Records: rec, Count: 1}, {Topic: []byte("nope"), Records: rec, Count: 1},
		{Topic: []byte("t"), Records: rec, Count: 1}}
	bp.PublishBatch(ctx, ps)
	if ps[0].Err != nil || ps[2].Err != nil || ps[0].EventID <= id || ps[2].EventID <= ps[0].EventID {
		t.Fatalf("batch: %+v", ps)
	}
	if !errors.Is(ps[1].Err, protocol.ErrTopicNotExist) {
		t.Fatalf("batch publish to a missing topic: %v", ps[1].Err)
	}
}
