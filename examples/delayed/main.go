// Command delayed publishes a message that the server delivers only after
// -delay, then subscribes and reports when it arrived.
//
//	go run ./examples/delayed -addr 127.0.0.1:12301 -delay 5s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/smssmq/smss/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:12301", "smss server")
	topic := flag.String("topic", "reminders", "topic (created with a one-hour lifetime)")
	delay := flag.Duration("delay", 5*time.Second, "delay, 1s up to the server's delay.maxDelay")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *delay+time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, *addr, client.Options{})
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer c.Close()
	if err := c.CreateTopicTTL(ctx, *topic, time.Hour); err != nil && !errors.Is(err, client.ErrTopicExist) {
		log.Fatalf("create topic: %v", err)
	}
	sent := time.Now()
	id := fmt.Sprintf("reminder-%d", sent.UnixNano())
	// The server stores it now (it survives a restart) and appends it to
	// the topic when it is due; subscribers see it only then.
	if err := c.PublishDelay(ctx, *topic, *delay, client.NewMessage([]byte(id))); err != nil {
		log.Fatalf("publish delayed: %v", err)
	}
	fmt.Printf("published %s, due in %s\n", id, *delay)

	s, err := c.NewSubscriber(client.SubscriberConfig{
		Topic: *topic, Who: "delayed-example", From: 0, // earlier messages are skipped below
		Handler: func(_ context.Context, batch []client.Delivery) client.AckAction {
			for _, d := range batch {
				if string(d.Body) == id {
					fmt.Printf("delivered %s after %s\n", d.Body, time.Since(sent).Round(100*time.Millisecond))
					return client.AckAndStop
				}
			}
			return client.Ack
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Run(ctx); err != nil {
		log.Fatalf("subscription: %v", err)
	}
}
