package client

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/client/internal/testserver"
	"github.com/smssmq/smss/protocol"
)

func TestTopicCalls(t *testing.T) {
	srv := testserver.Start(t, "")
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 30*time.Second)

	if err := c.Alive(ctx); err != nil {
		t.Fatalf("alive: %v", err)
	}
	topics, err := c.Topics(ctx)
	if err != nil || len(topics) != 0 {
		t.Fatalf("list on empty server: %v %v", topics, err)
	}
	if err := c.CreateTopic(ctx, "order"); err != nil {
		t.Fatalf("create: %v", err)
	}
	before := time.Now()
	if err := c.CreateTopicTTL(ctx, "ttl", 2*time.Hour); err != nil {
		t.Fatalf("create with ttl: %v", err)
	}
	until := time.Now().Add(24 * time.Hour).Truncate(time.Millisecond)
	if err := c.CreateTopicUntil(ctx, "until", until); err != nil {
		t.Fatalf("create until: %v", err)
	}

	info, err := c.TopicInfo(ctx, "order")
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if info.Name != "order" || !info.Permanent() || info.CreateEventID <= 0 || info.State != TopicNormal ||
		info.Root != "/3/3/order" || time.Since(info.CreatedAt) > time.Minute {
		t.Errorf("info: %+v", info)
	}
	ttl, err := c.TopicInfo(ctx, "ttl")
	if err != nil {
		t.Fatal(err)
	}
	if ttl.Permanent() || ttl.ExpireAt.Before(before.Add(2*time.Hour-time.Second)) ||
		ttl.ExpireAt.After(time.Now().Add(2*time.Hour+time.Second)) || ttl.Expired(time.Now()) {
		t.Errorf("ttl topic expires at %v, want about 2h from now", ttl.ExpireAt)
	}
	if u, err := c.TopicInfo(ctx, "until"); err != nil || !u.ExpireAt.Equal(until) {
		t.Errorf("until topic: %+v %v, want expiry %v", u, err, until)
	}

	topics, err = c.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ti := range topics {
		names = append(names, ti.Name)
	}
	if strings.Join(names, ",") != "order,ttl,until" {
		t.Errorf("list: %v", names)
	}

	if err := c.DeleteTopic(ctx, "until"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := c.TopicInfo(ctx, "until"); !errors.Is(err, ErrTopicNotExist) {
		t.Errorf("info after delete: %v", err)
	}
}

func TestPublishCalls(t *testing.T) {
	srv := testserver.Start(t, "")
	c := dialT(t, srv.Addr, Options{})
	ctx := WithTraceID(ctxT(t, 30*time.Second), "trace-publish")
	if err := c.CreateTopic(ctx, "order"); err != nil {
		t.Fatal(err)
	}
	m := NewMessage([]byte("hello")).SetHeader("traceId", "x1").SetHeader("k", "v").SetHeader("traceId", "x2")
	if got := m.Headers; len(got) != 2 || got[0] != (Header{"traceId", "x2"}) || got[1] != (Header{"k", "v"}) {
		t.Fatalf("SetHeader keeps order and replaces in place: %v", got)
	}
	if err := c.Publish(ctx, "order", m); err != nil {
		t.Fatalf("publish: %v", err)
	}
	batch := []*Message{NewMessage([]byte("a")), NewMessage([]byte("b")), {Headers: []Header{{"only", "header"}}}}
	if err := c.PublishBatch(ctx, "order", batch); err != nil {
		t.Fatalf("publish batch: %v", err)
	}
	if err := c.PublishDelay(ctx, "order", 2*time.Second, NewMessage([]byte("later"))); err != nil {
		t.Fatalf("delay publish: %v", err)
	}
	// The contents and eventIds are checked by the subscriber tests; here
	// the server's view of the topic must show the writes.
	info, err := c.TopicInfo(ctx, "order")
	if err != nil {
		t.Fatal(err)
	}
	if info.CreateEventID != 1 {
		t.Errorf("create eventId %d", info.CreateEventID)
	}
}

func TestErrorSentinels(t *testing.T) {
	srv := testserver.Start(t, "")
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 30*time.Second)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	msg := NewMessage([]byte("x"))
	cases := []struct {
		name  string
		call  func() error
		want  error
		proto error // the protocol sentinel with the same text, if any
	}{
		{"create existing", func() error { return c.CreateTopic(ctx, "t") }, ErrTopicExist, protocol.ErrTopicExist},
		{"publish missing topic", func() error { return c.Publish(ctx, "nope", msg) }, ErrTopicNotExist, protocol.ErrTopicNotExist},
		{"delete missing topic", func() error { return c.DeleteTopic(ctx, "nope") }, ErrTopicNotExist, protocol.ErrTopicNotExist},
		{"info missing topic", func() error { _, err := c.TopicInfo(ctx, "nope"); return err }, ErrTopicNotExist, protocol.ErrTopicNotExist},
		{"delay missing topic", func() error { return c.PublishDelay(ctx, "nope", 2*time.Second, msg) }, ErrTopicNotExist, protocol.ErrTopicNotExist},
		{"ttl too short", func() error { return c.CreateTopicTTL(ctx, "short", 5*time.Second) }, ErrExpireTooSoon, protocol.ErrExpireTooSoon},
		{"delay too short", func() error { return c.PublishDelay(ctx, "t", 500*time.Millisecond, msg) }, ErrDelayTooShort, protocol.ErrDelayTooShort},
		{"bad topic name", func() error { return c.CreateTopic(ctx, "a b") }, ErrInvalidTopicName, nil},
		{"dot-dot topic name", func() error { return c.CreateTopic(ctx, "..") }, ErrInvalidTopicName, nil},
		{"info without name", func() error { _, err := c.TopicInfo(ctx, ""); return err }, ErrInvalidTopicName, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var se *ServerError
			if !errors.As(err, &se) || se.Msg == "" {
				t.Fatalf("not a *ServerError: %T %v", err, err)
			}
			if tc.proto != nil && !errors.Is(err, tc.proto) {
				t.Errorf("does not match the protocol sentinel %q", tc.proto)
			}
			for _, other := range []error{ErrTopicExist, ErrTopicNotExist, ErrExpireTooSoon, ErrDelayTooShort, ErrInvalidTopicName} {
				if other != tc.want && errors.Is(err, other) {
					t.Errorf("also matches %v", other)
				}
			}
		})
	}
	// After all those refusals the pooled connection is still in step.
	if err := c.Alive(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestClientSideRefusals(t *testing.T) {
	srv := testserver.Start(t, "")
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 30*time.Second)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, "t", NewMessage(nil)); !errors.Is(err, ErrEmptyMessage) {
		t.Errorf("empty message: %v", err)
	}
	if err := c.PublishBatch(ctx, "t", nil); !errors.Is(err, ErrNoMessages) {
		t.Errorf("empty batch: %v", err)
	}
	// A traceId or topic that does not fit its length field is refused
	// before anything is sent, instead of corrupting the stream (§10.28).
	long := WithTraceID(ctx, strings.Repeat("x", 256))
	if err := c.Publish(long, "t", NewMessage([]byte("b"))); !errors.Is(err, protocol.ErrFieldTooLong) {
		t.Errorf("256-byte traceId: %v", err)
	}
	if err := c.Publish(ctx, strings.Repeat("t", 70000), NewMessage([]byte("b"))); !errors.Is(err, protocol.ErrFieldTooLong) {
		t.Errorf("70000-byte topic: %v", err)
	}
	if err := c.Publish(WithTraceID(ctx, strings.Repeat("x", 255)), "t", NewMessage([]byte("b"))); err != nil {
		t.Errorf("255-byte traceId: %v", err)
	}
}

// After a server restart, idle connections of the pool are dead; the next
// call must notice before writing and succeed on a fresh connection.
func TestRecoveryAfterServerRestart(t *testing.T) {
	srv := testserver.Start(t, "")
	var d countingDialer
	c := dialT(t, srv.Addr, Options{MaxConns: 4, HealthCheckInterval: -1, DialContext: d.dial})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	// Fill the pool with several idle connections.
	held := make([]*conn, 0, 4)
	for i := 0; i < 4; i++ {
		cn, err := c.pool.get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, cn)
	}
	for _, cn := range held {
		c.pool.put(cn, false)
	}

	srv.Kill()
	srv.Restart()
	for i := 0; i < 6; i++ {
		if err := c.Publish(ctx, "t", NewMessage([]byte("after restart"))); err != nil {
			t.Fatalf("publish %d after restart: %v", i, err)
		}
	}
	if n := c.pool.idleCount(); n != 1 {
		t.Errorf("%d idle connections, want the 4 dead ones replaced by 1", n)
	}

	// While the server is down calls fail with a network error, and work
	// again once it is back.
	srv.Stop()
	if err := c.Alive(ctx); err == nil || IsServerError(err) {
		t.Fatalf("alive with the server down: %v", err)
	}
	srv.Restart()
	if err := c.Alive(ctx); err != nil {
		t.Fatalf("alive after second restart: %v", err)
	}
}

func TestDialUnreachable(t *testing.T) {
	port := testserver.FreePort(t)
	_, err := Dial(context.Background(), "127.0.0.1:"+strconv.Itoa(port), Options{DialTimeout: time.Second})
	if err == nil {
		t.Fatal("dial to a closed port succeeded")
	}
}

func TestConcurrentCalls(t *testing.T) {
	srv := testserver.Start(t, "")
	var d countingDialer
	c := dialT(t, srv.Addr, Options{MaxConns: 4, WaitTimeout: 20 * time.Second, DialContext: d.dial})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 32)
	for g := 0; g < 32; g++ {
		go func() {
			for i := 0; i < 20; i++ {
				var err error
				switch i % 3 {
				case 0:
					err = c.Publish(ctx, "t", NewMessage([]byte("m")))
				case 1:
					_, err = c.TopicInfo(ctx, "t")
				default:
					err = c.CreateTopic(ctx, "t")
					if errors.Is(err, ErrTopicExist) {
						err = nil
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < 32; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := d.n.Load(); n > 4 {
		t.Errorf("%d connections dialled with MaxConns 4", n)
	}
}
