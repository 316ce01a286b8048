package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/client/internal/testserver"
	"github.com/smssmq/smss/internal/smsstest"
)

// collector is a handler that records every delivery and signals when an
// eventId has been acknowledged.
type collector struct {
	mu    sync.Mutex
	got   []Delivery
	acked int64
	stop  func(d []Delivery) bool // AckAndStop when true
	cond  chan struct{}
}

func newCollector() *collector { return &collector{cond: make(chan struct{}, 1)} }

func (c *collector) handle(_ context.Context, batch []Delivery) AckAction {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, batch...)
	if c.stop != nil && c.stop(c.got) {
		return AckAndStop
	}
	return Ack
}

func (c *collector) afterAck(id int64) {
	c.mu.Lock()
	if id <= c.acked {
		panic(fmt.Sprintf("AfterAck went back from %d to %d", c.acked, id))
	}
	c.acked = id
	c.mu.Unlock()
	select {
	case c.cond <- struct{}{}:
	default:
	}
}

func (c *collector) bodies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.got))
	for i, d := range c.got {
		out[i] = string(d.Body)
	}
	return out
}

func (c *collector) lastAcked() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked
}

func (c *collector) waitCount(t *testing.T, n int) {
	t.Helper()
	smsstest.WaitFor(t, 20*time.Second, fmt.Sprintf("%d deliveries", n), func() bool { return len(c.bodies()) >= n })
}

func publishN(t *testing.T, c *Client, topic, prefix string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := c.Publish(ctxT(t, 10*time.Second), topic, NewMessage([]byte(prefix+strconv.Itoa(i)))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

func seq(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, prefix+strconv.Itoa(i))
	}
	return out
}

const fastAlive = "timeout:\n  server:\n    alive: 200\n"

func TestSubscribeDelivers(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "order"); err != nil {
		t.Fatal(err)
	}
	m := NewMessage([]byte("first")).SetHeader("traceId", "x1").SetHeader("empty", "")
	if err := c.Publish(ctx, "order", m); err != nil {
		t.Fatal(err)
	}
	batch := []*Message{NewMessage([]byte("b0")), NewMessage([]byte("b1")), {Headers: []Header{{"h", "only"}}}}
	if err := c.PublishBatch(ctx, "order", batch); err != nil {
		t.Fatal(err)
	}

	col := newCollector()
	col.stop = func(d []Delivery) bool { return len(d) >= 4 }
	s, err := c.NewSubscriber(SubscriberConfig{Topic: "order", Who: "w", BatchSize: 10, Handler: col.handle, AfterAck: col.afterAck})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := col.got
	if b := col.bodies(); !slices.Equal(b, []string{"first", "b0", "b1", ""}) {
		t.Fatalf("bodies %q", b)
	}
	// The client appends the call's message id after the caller's headers
	// of the first message only.
	if n := len(got[0].Headers); n != 3 || !slices.Equal(got[0].Headers[:2], []Header{{"traceId", "x1"}, {"empty", ""}}) ||
		got[0].Headers[2].Key != MessageIDHeader || !isMessageID(got[0].Headers[2].Value) ||
		!slices.Equal(got[3].Headers, []Header{{"h", "only"}}) {
		t.Errorf("headers %v / %v", got[0].Headers, got[3].Headers)
	}
	if id, ok := got[1].Header(MessageIDHeader); !ok || !isMessageID(id) || id == got[0].Headers[2].Value {
		t.Errorf("the batch's first message has id %q (present %v), want a new one", id, ok)
	}
	if _, ok := got[2].Header(MessageIDHeader); ok {
		t.Errorf("the batch's second message carries an id: %v", got[2].Headers)
	}
	// create is 1, the single pub 2, the batch 3..5.
	for i, want := range []int64{2, 3, 4, 5} {
		if got[i].EventID != want {
			t.Errorf("message %d has eventId %d, want %d", i, got[i].EventID, want)
		}
		if got[i].Time.Before(start.Add(-time.Minute)) {
			t.Errorf("message %d time %v", i, got[i].Time)
		}
	}
	if s.LastAcked() != 5 || col.lastAcked() != 5 {
		t.Errorf("LastAcked %d, AfterAck saw %d", s.LastAcked(), col.lastAcked())
	}

	// A new subscription from the persisted progress gets only newer messages.
	publishN(t, c, "order", "n", 0, 2)
	col2 := newCollector()
	col2.stop = func(d []Delivery) bool { return len(d) >= 2 }
	s2, _ := c.NewSubscriber(SubscriberConfig{Topic: "order", Who: "w", From: s.LastAcked(), Handler: col2.handle})
	if err := s2.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if b := col2.bodies(); !slices.Equal(b, []string{"n0", "n1"}) {
		t.Errorf("resumed subscription got %q", b)
	}
}

func TestDelayedPublishDelivered(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.PublishDelay(ctx, "t", time.Second, NewMessage([]byte("d0")), NewMessage([]byte("d1"))); err != nil {
		t.Fatal(err)
	}
	publishN(t, c, "t", "now", 0, 1)
	col := newCollector()
	col.stop = func(d []Delivery) bool { return len(d) >= 3 }
	s, _ := c.NewSubscriber(SubscriberConfig{Topic: "t", Who: "w", BatchSize: 10, Handler: col.handle})
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if b := col.bodies(); !slices.Equal(b, []string{"now0", "d0", "d1"}) {
		t.Fatalf("bodies %q", b)
	}
	// create 1, delay command 2, pub 3, then the delayed batch as one
	// publication of 2 consecutive ids (after 4..5 when the server wrote
	// the subscriber's stored position in between: its writes take ids).
	if ids := []int64{col.got[0].EventID, col.got[1].EventID, col.got[2].EventID}; ids[0] != 3 || ids[1] < 4 || ids[2] != ids[1]+1 {
		t.Errorf("eventIds %v", ids)
	}
	if d := col.got[1].Time.Sub(start); d < 900*time.Millisecond {
		t.Errorf("delayed messages stored %v after the request", d)
	}
}

func TestSubscriberResumesAcrossServerRestart(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 120*time.Second)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	publishN(t, c, "t", "a", 0, 20)
	col := newCollector()
	s, _ := c.NewSubscriber(SubscriberConfig{Topic: "t", Who: "w", BatchSize: 3, Handler: col.handle, AfterAck: col.afterAck,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() {
		cancel()
		<-done
	}()
	col.waitCount(t, 20)
	smsstest.WaitFor(t, 10*time.Second, "last batch acknowledged", func() bool { return col.lastAcked() == s.LastAcked() && s.LastAcked() == 21 })

	srv.Kill()
	srv.Restart()
	publishN(t, c, "t", "b", 0, 10)
	col.waitCount(t, 30)

	// A second restart while messages keep arriving: nothing is lost;
	// only a batch whose ack did not get out may be seen twice.
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		for i := 0; i < 30; i++ {
			if err := c.Publish(ctx, "t", NewMessage([]byte("c"+strconv.Itoa(i)))); err != nil {
				t.Errorf("publish c%d: %v", i, err)
				return
			}
		}
	}()
	<-done2
	srv.Stop()
	srv.Restart()
	publishN(t, c, "t", "d", 0, 5)
	smsstest.WaitFor(t, 30*time.Second, "all 65 messages", func() bool {
		b := col.bodies()
		return len(b) > 0 && b[len(b)-1] == "d4"
	})
	want := append(append(append(seq("a", 0, 20), seq("b", 0, 10)...), seq("c", 0, 30)...), seq("d", 0, 5)...)
	if b := col.bodies(); !slices.Equal(b, want) {
		t.Errorf("deliveries across restarts:\n got %q\nwant %q", b, want)
	}
}

func TestSubscriberEndsWhenTopicDeleted(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	publishN(t, c, "t", "m", 0, 3)
	col := newCollector()
	s, _ := c.NewSubscriber(SubscriberConfig{Topic: "t", Who: "w", Handler: col.handle, AfterAck: col.afterAck})
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	col.waitCount(t, 3)
	if err := c.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrTopicDeleted) {
			t.Fatalf("Run: %v, want ErrTopicDeleted", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("subscription did not end after delete")
	}
}

func TestSubscriberSameWhoWaitsForTheFirst(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	publishN(t, c, "t", "m", 0, 1)
	first := newCollector()
	s1, _ := c.NewSubscriber(SubscriberConfig{Topic: "t", Who: "w", Handler: first.handle})
	ctx1, cancel1 := context.WithCancel(ctx)
	done1 := make(chan error, 1)
	go func() { done1 <- s1.Run(ctx1) }()
	first.waitCount(t, 1)

	second := newCollector()
	second.stop = func(d []Delivery) bool { return true }
	s2, _ := c.NewSubscriber(SubscriberConfig{Topic: "t", Who: "w", Handler: second.handle,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	done2 := make(chan error, 1)
	go func() { done2 <- s2.Run(ctx) }()
	select {
	case err := <-done2:
		t.Fatalf("second subscriber with the same who ended while the first runs: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if n := len(second.bodies()); n != 0 {
		t.Fatalf("second subscriber got %d messages while the first is active", n)
	}
	cancel1()
	<-done1
	select {
	case err := <-done2:
		if err != nil {
			t.Fatalf("second subscriber: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("second subscriber did not take over")
	}
	if b := second.bodies(); !slices.Equal(b, []string{"m0"}) {
		t.Errorf("second got %q", b)
	}
}

func TestSubscribeRefusals(t *testing.T) {
	srv := testserver.Start(t, "")
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, []Delivery) AckAction { return Ack }
	s, _ := c.NewSubscriber(SubscriberConfig{Topic: "nope", Who: "w", Handler: h})
	if err := s.Run(ctx); !errors.Is(err, ErrTopicNotExist) {
		t.Errorf("unknown topic: %v", err)
	}
	s, _ = c.NewSubscriber(SubscriberConfig{Topic: "t", Who: "w", From: 1000, Handler: h})
	if err := s.Run(ctx); !errors.Is(err, ErrEventIDUnavailable) {
		t.Errorf("start beyond the last eventId: %v", err)
	}
	if _, err := c.NewSubscriber(SubscriberConfig{Topic: "t", Who: "w", From: -1, Handler: h}); err == nil {
		t.Error("negative From accepted")
	}
}
