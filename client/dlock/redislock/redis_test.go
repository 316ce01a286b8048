package redislock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// newRedis returns a client configured as the package documentation asks
// (ContextTimeoutEnabled), so the lock's own deadlines bound every call,
// also while Redis is paused. The socket timeouts are only a backstop: long
// enough that a loaded machine's scheduling pauses never fail a call to a
// healthy Redis, which would cost a holder its lease.
func newRedis(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		DialTimeout: 5 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
		MaxRetries: -1})
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// go-redis logs every failed dial; the outage tests cause many on purpose.
func init() { redis.SetLogger(quietRedis{}) }

// grantSpy is a Redis client that notes when the last grant of a lease was
// sent: an acquire (SET) or a renewal that Redis accepted. Redis applied it
// after that moment, so the key cannot expire before the moment plus the
// TTL; that is the bound a lease's Lost (and a group member's stop) must
// beat, measured without guessing when the lease last renewed.
type grantSpy struct {
	*redis.Client
	mu   sync.Mutex
	last time.Time
}

func newGrantSpy(rdb *redis.Client) *grantSpy { return &grantSpy{Client: rdb} }

// lastGrant is when the last accepted acquire or renewal was sent (zero
// before any).
func (s *grantSpy) lastGrant() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func (s *grantSpy) granted(sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sent.After(s.last) {
		s.last = sent
	}
}

func (s *grantSpy) Do(ctx context.Context, args ...any) *redis.Cmd {
	sent := time.Now()
	cmd := s.Client.Do(ctx, args...)
	if len(args) > 0 && args[0] == "SET" && cmd.Err() == nil {
		s.granted(sent)
	}
	return cmd
}

func (s *grantSpy) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	sent := time.Now()
	cmd := s.Client.EvalSha(ctx, sha, keys, args...)
	s.renewal(sha, sent, cmd)
	return cmd
}

func (s *grantSpy) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	sent := time.Now()
	cmd := s.Client.Eval(ctx, script, keys, args...)
	sum := sha1.Sum([]byte(script))
	s.renewal(hex.EncodeToString(sum[:]), sent, cmd)
	return cmd
}

// renewal notes a renewal script that extended the key.
func (s *grantSpy) renewal(sha string, sent time.Time, cmd *redis.Cmd) {
	if sha != renewScript.Hash() {
		return
	}
	if n, err := cmd.Int64(); err == nil && n == 1 {
		s.granted(sent)
	}
}
