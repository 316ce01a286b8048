package redislock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

func newRedis(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
		MaxRetries: -1})
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// go-redis logs every failed dial; the outage tests cause many on purpose.
func init() { redis.SetLogger(quietRedis{}) }
