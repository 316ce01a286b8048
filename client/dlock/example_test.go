package dlock_test

import (
	"context"
	"fmt"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/client/dlock"
	"github.com/smssmq/smss/client/dlock/redislock"
)

// Run the same program several times: one instance consumes, the others
// stand by and take over, from the group's saved progress, when it stops or
// dies. Needs smss on 127.0.0.1:12301 and Redis on 127.0.0.1:6379.
func ExampleGroupSubscriber() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	c, err := client.Dial(ctx, "127.0.0.1:12301", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()

	g, err := dlock.NewGroupSubscriber(c, dlock.GroupConfig{
		Store: redislock.NewGroup(rdb, "order", "billing", redislock.Options{TTL: 15 * time.Second}),
		Sub: client.SubscriberConfig{
			Topic:     "order",
			Who:       "billing",
			BatchSize: 16,
			Handler: func(ctx context.Context, batch []client.Delivery) client.AckAction {
				for _, d := range batch {
					fmt.Println(d.EventID, string(d.Body))
				}
				return client.Ack
			},
		},
		OnLockChange: func(held bool) { log.Println("consuming:", held) },
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := g.Run(ctx); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}
