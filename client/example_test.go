package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/smssmq/smss/client"
)

// Publishing: one message, a batch with consecutive eventIds, and a delayed
// message. Needs a server on 127.0.0.1:12301.
func ExampleClient_Publish() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "127.0.0.1:12301", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if err := c.CreateTopicTTL(ctx, "order", 24*time.Hour); err != nil && !errors.Is(err, client.ErrTopicExist) {
		log.Fatal(err)
	}
	ctx = client.WithTraceID(ctx, "checkout-42")
	msg := client.NewMessage([]byte(`{"id":42}`)).SetHeader("type", "created")
	if err := c.Publish(ctx, "order", msg); err != nil {
		log.Fatal(err)
	}
	batch := []*client.Message{client.NewMessage([]byte("a")), client.NewMessage([]byte("b"))}
	if err := c.PublishBatch(ctx, "order", batch); err != nil {
		log.Fatal(err)
	}
	if err := c.PublishDelay(ctx, "order", 5*time.Second, client.NewMessage([]byte("reminder"))); err != nil {
		log.Fatal(err)
	}
	info, err := c.TopicInfo(ctx, "order")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Name, "expires", info.ExpireAt)
}

// Subscribing: the handler gets batches; AfterAck is the place to persist
// progress, which is passed back as From after a restart. Needs a server on
// 127.0.0.1:12301.
func ExampleSubscriber() {
	var progress int64 // load from durable storage in a real consumer
	s, err := client.NewSubscriber("127.0.0.1:12301", client.SubscriberConfig{
		Topic:     "order",
		Who:       "billing",
		From:      progress,
		BatchSize: 16,
		Handler: func(ctx context.Context, batch []client.Delivery) client.AckAction {
			for _, d := range batch {
				typ, _ := d.Header("type")
				fmt.Println(d.EventID, typ, string(d.Body))
			}
			return client.Ack
		},
		AfterAck: func(lastEventID int64) { progress = lastEventID },
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = s.Run(ctx) // reconnects with backoff until ctx ends
	switch {
	case errors.Is(err, client.ErrTopicDeleted):
		fmt.Println("topic deleted; resume point was", s.LastAcked())
	case err != nil && !errors.Is(err, context.DeadlineExceeded):
		log.Fatal(err)
	}
}

// Several servers of a master/slave group: writes go to the master found
// among them, and follow it after a failover. Each publish carries a
// message id and is retried with it after a lost reply. Needs servers on
// the three addresses.
func ExampleOptions_addrs() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "", client.Options{
		Addrs: []string{"10.0.0.1:12301", "10.0.0.2:12301", "10.0.0.3:12301"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// An id of your own makes the publish recognisable across restarts of
	// this process too (within the server's dedupe window).
	msg := client.NewMessage([]byte(`{"id":42}`)).SetHeader(client.MessageIDHeader, "order-42-created")
	err = c.Publish(ctx, "order", msg)
	switch {
	case errors.Is(err, client.ErrRetriesExhausted):
		log.Printf("gave up after retrying (stored at most once with dedupe): %v", err)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println("master:", c.Master())
}

// A work queue: the group "billing" shares the messages of "order" among
// every process running this; a handler error has the message delivered
// again (after the group's backoff), Term sends it to the dead-letter
// topic. Needs a server on 127.0.0.1:12301.
func ExampleClient_Work() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the worker cleanly: outcomes sent, stop confirmed
	c, err := client.Dial(ctx, "127.0.0.1:12301", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// Creating the group again with the same settings succeeds, so every
	// instance may do it at start.
	_, err = c.CreateQueue(ctx, "order", client.QueueConfig{Group: "billing", AckWaitMs: 30000,
		MaxDeliver: 5, BackoffMs: []int64{1000, 5000, 30000}, DeadLetter: "order.dead", From: "oldest"})
	if err != nil {
		log.Fatal(err)
	}
	err = c.Work(ctx, "order", "billing", client.WorkerConfig{Concurrency: 4},
		func(ctx context.Context, m *client.QueueMessage) error {
			if len(m.Body) == 0 {
				return client.Term(errors.New("empty order")) // never retried
			}
			if m.Attempt > 1 {
				log.Printf("order %d: attempt %d", m.EventID, m.Attempt)
			}
			// A long step ahead: restart the ack deadline first.
			m.InProgress()
			return charge(ctx, m.Body) // nil acks; an error redelivers
		})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// charge stands for the work a message asks for.
func charge(ctx context.Context, order []byte) error { return ctx.Err() }
