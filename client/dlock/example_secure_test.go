package dlock_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/client/dlock"
	"github.com/smssmq/smss/client/dlock/redislock"
)

// A group subscriber where both smss and Redis require a login and TLS:
// the smss client logs in with SCRAM-SHA-256 over its TLS listener, and the
// Redis lock gets a go-redis client configured for AUTH and TLS.
func ExampleGroupSubscriber_secured() {
	ctx := context.Background()
	smssTLS, err := auth.ClientTLSConfig("/etc/smss/ca.pem", "mq.example.com", "", "")
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial(ctx, "mq.example.com:12302", client.Options{
		TLS:         smssTLS,
		Credentials: &client.Credentials{User: "billing", Password: os.Getenv("SMSS_PASSWORD")},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	redisTLS, err := auth.ClientTLSConfig("/etc/redis/ca.pem", "", "/etc/redis/client.pem", "/etc/redis/client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "redis.example.com:6380",
		Username:              "smss-locks", // an ACL user allowed ~smss:*
		Password:              os.Getenv("REDIS_PASSWORD"),
		TLSConfig:             redisTLS,
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()

	g, err := dlock.NewGroupSubscriber(c, dlock.GroupConfig{
		Store: redislock.NewGroup(rdb, "order", "billing", redislock.Options{TTL: 15 * time.Second}),
		Sub: client.SubscriberConfig{Topic: "order", Who: "billing",
			Handler: func(context.Context, []client.Delivery) client.AckAction { return client.Ack }},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := g.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
