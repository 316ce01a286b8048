package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/smssmq/smss/client"
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

// savePositionScript is saveScript for a position with its epoch: it also
// writes ARGV[3] ("epoch:start") with the eventId to KEYS[3], and replaces
// a lower stored eventId when the stored epoch part is not ARGV[3] (the
// subscription resumed before it because the history changed).
var savePositionScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local cur = redis.call('GET', KEYS[2])
local v = ARGV[2]
local ep = redis.call('GET', KEYS[3])
local same = ep and string.match(ep, '^(%d+:%d+):') == ARGV[3]
if cur and (#cur > #v or (#cur == #v and cur >= v)) and (same or not ep) then
  return 0
end
redis.call('SET', KEYS[2], v)
redis.call('SET', KEYS[3], ARGV[3] .. ':' .. v)
return 1`)

// Group is the lock and progress of one consumer group (topic, who). It
// implements dlock.GroupStore and dlock.PositionStore: the progress key
// holds the eventId as before, and a key of its own beside it
// ("…:progress:epoch", "epoch:start:eventId") its epoch, which a client
// that only writes the progress key leaves stale and so unused.
type Group struct {
	*Lock
	progressKey string
	epochKey    string
}

var (
	_ dlock.GroupStore    = (*Group)(nil)
	_ dlock.PositionStore = (*Group)(nil)
)

// NewGroup returns the store of the group (topic, who).
func NewGroup(rdb Client, topic, who string, opts Options) *Group {
	opts = opts.withDefaults()
	base := fmt.Sprintf("%sgroup:{%d:%s:%s}", opts.KeyPrefix, len(topic), topic, who)
	return &Group{Lock: New(rdb, base+":lock", opts), progressKey: base + ":progress", epochKey: base + ":progress:epoch"}
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

// Position returns the group's saved progress with its epoch; known is
// false when the epoch key is missing or names another eventId than the
// progress (written without an epoch since).
func (g *Group) Position(ctx context.Context) (client.Position, bool, bool, error) {
	id, ok, err := g.Progress(ctx)
	if err != nil || !ok {
		return client.Position{}, false, ok, err
	}
	pos := client.Position{EventID: id}
	v, err := g.rdb.Get(ctx, g.epochKey).Result()
	if errors.Is(err, redis.Nil) {
		return pos, false, true, nil
	}
	if err != nil {
		return pos, false, true, fmt.Errorf("redislock: load progress epoch %s: %w", g.epochKey, err)
	}
	parts := strings.Split(v, ":")
	if len(parts) != 3 {
		return pos, false, true, fmt.Errorf("redislock: progress epoch %s holds %q, not epoch:start:eventId", g.epochKey, v)
	}
	e, err1 := strconv.ParseUint(parts[0], 10, 64)
	st, err2 := strconv.ParseInt(parts[1], 10, 64)
	at, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return pos, false, true, fmt.Errorf("redislock: progress epoch %s holds %q, not epoch:start:eventId", g.epochKey, v)
	}
	if at != id {
		return pos, false, true, nil // the progress moved without its epoch
	}
	pos.Epoch, pos.Start = e, st
	return pos, true, true, nil
}

// SavePosition stores pos (eventId and epoch) if lease still owns the lock.
func (g *Group) SavePosition(ctx context.Context, lease dlock.Lease, pos client.Position) error {
	token, err := g.tokenOf(lease)
	if err != nil {
		return err
	}
	if pos.EventID < 0 || pos.Start < 0 {
		return fmt.Errorf("redislock: position %+v is negative", pos)
	}
	epoch := strconv.FormatUint(pos.Epoch, 10) + ":" + strconv.FormatInt(pos.Start, 10)
	n, err := savePositionScript.Run(ctx, g.rdb, []string{g.key, g.progressKey, g.epochKey}, token, formatID(pos.EventID), epoch).Int64()
	if err != nil {
		return fmt.Errorf("redislock: save progress %s: %w", g.progressKey, err)
	}
	if n < 0 {
		return dlock.ErrLeaseLost
	}
	return nil
}
