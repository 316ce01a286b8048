// Command redisgroup is one member of a consumer group: run it several
// times with the same -topic and -who, and exactly one instance consumes
// while the others stand by. A Redis lease decides which; the group's
// progress lives in Redis beside it, so the next holder resumes where the
// group stopped.
//
//	go run ./examples/redisgroup -addr 127.0.0.1:12301 -redis 127.0.0.1:6379 -topic order -who billing
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/client/dlock"
	"github.com/smssmq/smss/client/dlock/redislock"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:12301", "smss server")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis server holding the lock and the group's progress")
	topic := flag.String("topic", "order", "topic to consume")
	who := flag.String("who", "billing", "the group's subscriber name")
	batch := flag.Int("batch", 16, "messages per batch, 1..255")
	count := flag.Int("count", 0, "leave the group after the batch that reaches this many messages (0: until Ctrl-C)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := client.Dial(dctx, *addr, client.Options{})
	cancel()
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer c.Close()
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	seen := 0
	g, err := dlock.NewGroupSubscriber(c, dlock.GroupConfig{
		// The lease lasts 15 s and is renewed every 5 s; a holder that dies
		// is replaced at the latest 15 s later.
		Store: redislock.NewGroup(rdb, *topic, *who, redislock.Options{TTL: 15 * time.Second}),
		Sub: client.SubscriberConfig{
			Topic:     *topic,
			Who:       *who,
			BatchSize: uint8(*batch),
			Handler: func(ctx context.Context, msgs []client.Delivery) client.AckAction {
				for _, d := range msgs {
					fmt.Printf("%d %s\n", d.EventID, d.Body)
				}
				seen += len(msgs)
				// The group saves the progress of the whole batch before the
				// ack, so stop only at a batch's end.
				if *count > 0 && seen >= *count {
					return client.AckAndStop
				}
				return client.Ack
			},
		},
		OnLockChange: func(held bool) { fmt.Fprintln(os.Stderr, "consuming:", held) },
	})
	if err != nil {
		log.Fatal(err)
	}
	// Run returns nil when the handler stopped, ctx's error on Ctrl-C.
	if err := g.Run(ctx); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}
