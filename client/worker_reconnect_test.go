package client

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/client/internal/testserver"
	"github.com/smssmq/smss/internal/smsstest"
)

// TestWorkQueueReconnects: a worker whose connection is cut carries on
// after reconnecting; what its lost stream held comes back after the ack
// wait, and no message whose ack was confirmed is delivered again.
func TestWorkQueueReconnects(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "jobs", QueueConfig{Group: "g", AckWaitMs: 500, From: "oldest"}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	var msgs []*Message
	for i := range n {
		msgs = append(msgs, NewMessage([]byte(strconv.Itoa(i))))
	}
	if err := c.PublishBatch(ctx, "jobs", msgs); err != nil {
		t.Fatal(err)
	}
	px := smsstest.NewProxy(t, srv.Addr)
	log := newQueueLog()
	var handled atomic.Int32
	cut := make(chan struct{})
	w, err := NewWorker(px.Addr(), WorkerConfig{Topic: "jobs", Group: "g", Consumer: "w", MaxInFlight: 4,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, IdleTimeout: 2 * time.Second,
		OnConfirm: log.confirm,
		Handler: func(ctx context.Context, m *QueueMessage) error {
			log.delivered("w", m)
			if handled.Add(1) == n/2 {
				close(cut)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := runWorker(wctx, w)
	select {
	case <-cut:
	case <-time.After(20 * time.Second):
		qs, err := c.Queues(ctx, "jobs", "g")
		t.Fatalf("half the messages not handled (%d, %d acks confirmed); group %+v %v", handled.Load(), log.settled(QueueOpAck), qs, err)
	}
	px.Reset() // the stream drops; the worker reconnects at once
	if !smsstest.Poll(30*time.Second, func() bool { return log.settled(QueueOpAck) == n }) {
		t.Fatalf("%d of %d acks confirmed after the cut", log.settled(QueueOpAck), n)
	}
	if ids := log.redeliveredAfterAck(); len(ids) > 0 {
		t.Errorf("delivered again after a confirmed ack: %v", ids)
	}
	stop()
	if err := waitDone(t, done, 20*time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}

// TestWorkQueueMaxInFlightAboveConcurrency: a worker holding more
// messages than it handles at once (MaxInFlight 4, one handler) consumes
// every message: each ack frees a slot the server fills again.
func TestWorkQueueMaxInFlightAboveConcurrency(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "jobs", QueueConfig{Group: "g", From: "oldest"}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	var msgs []*Message
	for i := range n {
		msgs = append(msgs, NewMessage([]byte(strconv.Itoa(i))))
	}
	if err := c.PublishBatch(ctx, "jobs", msgs); err != nil {
		t.Fatal(err)
	}
	log := newQueueLog()
	w, err := c.NewWorker(WorkerConfig{Topic: "jobs", Group: "g", MaxInFlight: 4, OnConfirm: log.confirm,
		Handler: func(_ context.Context, m *QueueMessage) error {
			log.delivered("w", m)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := runWorker(wctx, w)
	if !smsstest.Poll(30*time.Second, func() bool { return log.settled(QueueOpAck) == n }) {
		qs, err := c.Queues(ctx, "jobs", "g")
		t.Fatalf("%d of %d acks confirmed; group %+v %v", log.settled(QueueOpAck), n, qs, err)
	}
	stop()
	if err := waitDone(t, done, 20*time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}
