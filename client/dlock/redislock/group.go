package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/smssmq/smss/client/dlock"
)

// saveScript writes ARGV[2] to the progress key if the lock holds our token
// (ARGV[1]) and the value grows. Values are canonical non-negative
// decimals, compared by length then bytes so no precision is lost to Lua
// numbers.
var saveScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local cur = redis.call('GET', KEYS[2])
local v = ARGV[2]
if cur and (#cur > #v or (#cur == #v and cur >= v)) then
  return 0
end
redis.call('SET', KEYS[2], v)
return 1`)

// Group is the lock and progress of one consumer group (topic, who). It
// implements dlock.GroupStore.
type Group struct {
	*Lock
	progressKey string
}

var _ dlock.GroupStore = (*Group)(nil)

// NewGroup returns the store of the group (topic, who).
func NewGroup(rdb Client, topic, who string, opts Options) *Group {
	opts = opts.withDefaults()
	base := fmt.Sprintf("%sgroup:{%d:%s:%s}", opts.KeyPrefix, len(topic), topic, who)
	return &Group{Lock: New(rdb, base+":lock", opts), progressKey: base + ":progress"}
}

// ProgressKey is the Redis key of the group's progress.
func (g *Group) ProgressKey() string { return g.progressKey }

// Progress returns the group's saved eventId.
func (g *Group) Progress(ctx context.Context) (int64, bool, error) {
	s, err := g.rdb.Get(ctx, g.progressKey).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("redislock: load progress %s: %w", g.progressKey, err)
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 0 {
		return 0, false, fmt.Errorf("redislock: progress %s holds %q, not an eventId", g.progressKey, s)
	}
	return id, true, nil
}

// SaveProgress stores eventID if lease still owns the lock.
func (g *Group) SaveProgress(ctx context.Context, lease dlock.Lease, eventID int64) error {
	token, err := g.tokenOf(lease)
	if err != nil {
		return err
	}
	if eventID < 0 {
		return fmt.Errorf("redislock: negative eventId %d", eventID)
	}
	n, err := saveScript.Run(ctx, g.rdb, []string{g.key, g.progressKey}, token, formatID(eventID)).Int64()
	if err != nil {
		return fmt.Errorf("redislock: save progress %s: %w", g.progressKey, err)
	}
	if n < 0 {
		return dlock.ErrLeaseLost
	}
	return nil
}
