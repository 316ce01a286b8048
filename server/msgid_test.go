package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// startRealServer serves a real broker in a temporary directory.
func startRealServer(t *testing.T) (*testServer, *broker.Broker) {
	t.Helper()
	return startRealServerWith(t, nil, nil)
}

// startRealServerWith is startRealServer with the broker's and the
// server's options edited by bo and so (either may be nil).
func startRealServerWith(t *testing.T, bo func(*broker.Options), so func(*Options, *broker.Broker)) (*testServer, *broker.Broker) {
	t.Helper()
	logs := &smsstest.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dir := filepath.Join(t.TempDir(), "data")
	bopts := broker.Options{Dir: dir, Logger: logger, MaxDelay: time.Hour,
		MinLifetime: protocol.MinLifetimeMs * time.Millisecond} // as cmd/smss
	if bo != nil {
		bo(&bopts)
	}
	b, err := broker.Open(bopts)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Backend: fzBackend{b}, Logger: logger, LogSample: 1, Epoll: epollMode}
	if epollMode {
		// As cmd/smss serves it: the loop's publishes go in batches.
		opts.Backend = &batchBackend{fzBackend: fzBackend{b}}
	}
	if so != nil {
		so(&opts, b)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, logs: logs, serveErr: make(chan error, 1)}
	go func() { ts.serveErr <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-ts.serveErr
		if err := b.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return ts, b
}

func idRecord(id, body string) []byte {
	return enc(protocol.AppendRecord(nil, protocol.Record{
		Headers: []protocol.KV{{Key: protocol.MsgIDHeader, Value: id}, {Key: "traceId", Value: "x1"}}, Body: []byte(body)}))
}

func delayReq(topic string, ms int64, records ...[]byte) []byte {
	var recs []byte
	for _, r := range records {
		recs = append(recs, r...)
	}
	return enc(protocol.AppendDelay(nil, []byte(topic), []byte("tid"), ms, recs))
}

// Over real TCP and a real broker: a malformed or oversized id is refused
// with a 400 naming the problem and the connection stays in sync; a valid
// id is stored once however often it is sent.
func TestMessageIDOverTCP(t *testing.T) {
	ts, b := startRealServer(t)
	if _, err := b.CreateTopic(context.Background(), []byte("order"), 0); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("L", 129)
	runSteps(t, ts, []step{
		{"pub with a 129-byte id", pubReq("order", idRecord(long, "x")), errReply("smss-msg-id must be 1 to 128 bytes, got 129"), false},
		{"pub with an empty id", pubReq("order", idRecord("", "x")), errReply("smss-msg-id must be 1 to 128 bytes, got 0"), false},
		{"delay with a 129-byte id", delayReq("order", 5000, idRecord(long, "x")), errReply("smss-msg-id must be 1 to 128 bytes, got 129"), false},
		{"batch whose first record's id is too long", pubReq("order", idRecord(long, "x"), record("y")), errReply("smss-msg-id must be 1 to 128 bytes, got 129"), false},
		{"pub with an id", pubReq("order", idRecord("id-1", "first")), okReply(), false},
		{"the same id again", pubReq("order", idRecord("id-1", "first")), okReply(), false},
		{"a 128-byte id", pubReq("order", idRecord(strings.Repeat("M", 128), "max")), okReply(), false},
		{"an id on the second record only is no id", pubReq("order", record("a"), idRecord(long, "b")), okReply(), false},
		{"delay with an id", delayReq("order", 60000, idRecord("id-d", "later")), okReply(), false},
		{"the delay again", delayReq("order", 60000, idRecord("id-d", "later")), okReply(), false},
		{"a pub without id after all that", pubReq("order", record("plain")), okReply(), false},
	})
	st, ok := b.TopicStats("order")
	for deadline := time.Now().Add(testDeadline); ok && st.Messages < 0 && time.Now().Before(deadline); st, ok = b.TopicStats("order") {
		time.Sleep(10 * time.Millisecond) // the background count of older files
	}
	// first, max, a, b, plain: the refused and duplicate requests stored
	// nothing.
	if !ok || st.Messages != 5 {
		t.Fatalf("topic holds %d messages (%v), want 5", st.Messages, ok)
	}
	if n := b.DedupeIDs(); n != 3 {
		t.Fatalf("window holds %d ids, want 3 (id-1, the 128-byte id, id-d)", n)
	}
}

// batchBackend is the real broker behind the server with its batch
// publish, as cmd/smss serves it; it counts the batches.
type batchBackend struct {
	fzBackend
	batches, pubs atomic.Int64
}

func (b *batchBackend) PublishBatch(ctx context.Context, ps []Pub) {
	b.batches.Add(1)
	b.pubs.Add(int64(len(ps)))
	bs := make([]broker.Pub, len(ps))
	for i, p := range ps {
		bs[i] = broker.Pub{Topic: p.Topic, Records: p.Records, Count: p.Count}
	}
	b.Broker.PublishBatch(ctx, bs)
	for i := range ps {
		ps[i].EventID, ps[i].Err = bs[i].EventID, bs[i].Err
	}
}
