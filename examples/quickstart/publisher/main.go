// Command publisher creates a topic (if it does not exist yet) and
// publishes a few messages to it, each with a header.
//
//	go run ./examples/quickstart/publisher -addr 127.0.0.1:12301 -topic order -n 3
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
	topic := flag.String("topic", "order", "topic to publish to")
	n := flag.Int("n", 3, "messages to publish")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, *addr, client.Options{})
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer c.Close()

	// A permanent topic; CreateTopicTTL makes one that deletes itself.
	if err := c.CreateTopic(ctx, *topic); err != nil && !errors.Is(err, client.ErrTopicExist) {
		log.Fatalf("create topic %s: %v", *topic, err)
	}
	for i := 1; i <= *n; i++ {
		msg := client.NewMessage(fmt.Appendf(nil, `{"order":%d}`, i)).SetHeader("type", "created")
		// Publish returns once the server stored the message; after a lost
		// reply it retries with the same message id (see client.Options).
		if err := c.Publish(ctx, *topic, msg); err != nil {
			log.Fatalf("publish: %v", err)
		}
	}
	fmt.Printf("published %d messages to %s\n", *n, *topic)
}
