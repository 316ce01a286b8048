package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smssmq/smss/client/dlock"
)

// Client is the part of a go-redis client the lock uses; *redis.Client,
// *redis.ClusterClient and *redis.Ring satisfy it. The lock never closes it.
type Client interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
	Get(ctx context.Context, key string) *redis.StringCmd
}

// Options configure a Lock. Zero fields take the defaults.
type Options struct {
	// TTL of the lock key. Default 30 s; at least 30 ms.
	TTL time.Duration
	// KeyPrefix of the group keys. Default "smss:".
	KeyPrefix string
	// Logger for renewal problems; nil means slog.Default().
	Logger *slog.Logger
}

const minTTL = 30 * time.Millisecond

func (o Options) withDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = 30 * time.Second
	}
	if o.TTL < minTTL {
		o.TTL = minTTL
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "smss:"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

var (
	renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// Lock is a Redis lock on one key. It implements dlock.Locker.
type Lock struct {
	rdb  Client
	key  string
	opts Options
}

var _ dlock.Locker = (*Lock)(nil)

// New returns a lock on key.
func New(rdb Client, key string, opts Options) *Lock {
	return &Lock{rdb: rdb, key: key, opts: opts.withDefaults()}
}

// Key is the Redis key of the lock.
func (l *Lock) Key() string { return l.key }

// TTL is the lock's time to live.
func (l *Lock) TTL() time.Duration { return l.opts.TTL }

func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TryAcquire makes one SET NX PX attempt.
func (l *Lock) TryAcquire(ctx context.Context) (dlock.Lease, error) {
	token := newToken()
	sent := time.Now()
	ctx, cancel := context.WithTimeout(ctx, l.opts.TTL/3)
	defer cancel()
	err := l.rdb.Do(ctx, "SET", l.key, token, "NX", "PX", l.opts.TTL.Milliseconds()).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, dlock.ErrNotAcquired
	case err != nil:
		// The SET may have been applied with no reply seen: try to undo it
		// so the lock is not blocked for a whole TTL.
		l.releaseToken(token)
		return nil, fmt.Errorf("redislock: acquire %s: %w", l.key, err)
	}
	return newLease(l, token, sent), nil
}

// releaseToken deletes the key if it holds token, in the background.
func (l *Lock) releaseToken(token string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.TTL)
		defer cancel()
		releaseScript.Run(ctx, l.rdb, []string{l.key}, token)
	}()
}

// lease is a held lock, renewed every TTL/3 by its own goroutine.
type lease struct {
	l     *Lock
	token string

	lostOnce sync.Once
	lost     chan struct{}
	mu       sync.Mutex
	deadline *time.Timer // fires markLost at 2/3 TTL after the last renewal was sent
	stop     chan struct{}
	done     chan struct{}
}

func newLease(l *Lock, token string, sent time.Time) *lease {
	ls := &lease{l: l, token: token, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	ls.deadline = time.AfterFunc(time.Until(sent.Add(ls.validFor())), func() {
		ls.l.opts.Logger.Warn("redislock: lease could not be renewed in time", "key", l.key)
		ls.markLost()
	})
	go ls.renewLoop(sent)
	return ls
}

// validFor is how long after a renewal was sent the holder may act: 2/3
// of the TTL, leaving a third to stop before the key can expire.
func (ls *lease) validFor() time.Duration { return ls.l.opts.TTL - ls.l.opts.TTL/3 }

func (ls *lease) Lost() <-chan struct{} { return ls.lost }

func (ls *lease) markLost() { ls.lostOnce.Do(func() { close(ls.lost) }) }

func (ls *lease) isLost() bool {
	select {
	case <-ls.lost:
		return true
	default:
		return false
	}
}

func (ls *lease) renewLoop(last time.Time) {
	defer close(ls.done)
	ttl := ls.l.opts.TTL
	retry := ttl / 10
	next := last.Add(ttl / 3)
	for {
		t := time.NewTimer(time.Until(next))
		select {
		case <-ls.stop:
			t.Stop()
			return
		case <-ls.lost:
			t.Stop()
			return
		case <-t.C:
		}
		sent := time.Now()
		ok, err := ls.renew(sent.Add(ls.validFor()))
		switch {
		case err != nil:
			ls.l.opts.Logger.Warn("redislock: renewal failed, retrying", "key", ls.l.key, "err", err)
			next = time.Now().Add(retry)
		case !ok:
			ls.l.opts.Logger.Warn("redislock: lock taken over or expired", "key", ls.l.key)
			ls.markLost()
			return
		default:
			ls.mu.Lock()
			if !ls.isLost() {
				ls.deadline.Reset(time.Until(sent.Add(ls.validFor())))
			}
			ls.mu.Unlock()
			next = sent.Add(ttl / 3)
		}
	}
}

// renew extends the key's TTL if it still holds our token. The call may
// not outlive the lease's validity.
func (ls *lease) renew(validUntil time.Time) (bool, error) {
	ctx, cancel := context.WithDeadline(context.Background(), validUntil)
	defer cancel()
	n, err := renewScript.Run(ctx, ls.l.rdb, []string{ls.l.key}, ls.token, ls.l.opts.TTL.Milliseconds()).Int64()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// Release stops renewing and deletes the key if it still holds our token.
func (ls *lease) Release(ctx context.Context) error {
	select {
	case <-ls.stop:
	default:
		close(ls.stop)
	}
	<-ls.done
	ls.mu.Lock()
	ls.deadline.Stop()
	ls.markLost()
	ls.mu.Unlock()
	if err := releaseScript.Run(ctx, ls.l.rdb, []string{ls.l.key}, ls.token).Err(); err != nil {
		return fmt.Errorf("redislock: release %s: %w", ls.l.key, err)
	}
	return nil
}

// tokenOf returns the token of a lease issued by l.
func (l *Lock) tokenOf(le dlock.Lease) (string, error) {
	ls, ok := le.(*lease)
	if !ok || ls.l != l {
		return "", fmt.Errorf("redislock: lease was not issued by lock %s", l.key)
	}
	return ls.token, nil
}

// formatID is the canonical decimal the progress script compares.
func formatID(id int64) string { return strconv.FormatInt(id, 10) }
