// Package redislock implements dlock's lock and group progress with Redis
// (github.com/redis/go-redis/v9).
//
// Keys, for a group (topic, who) with the default prefix "smss:":
//
//	smss:group:{<len(topic)>:<topic>:<who>}:lock      token of the holder, with a TTL
//	smss:group:{<len(topic)>:<topic>:<who>}:progress  last saved eventId (decimal), no TTL
//
// The length prefix keeps (topic, who) pairs distinct whatever bytes they
// hold; the braces make both keys hash to the same Redis Cluster slot, which
// the progress script needs.
//
// Protocol:
//
//   - Acquire: SET lock <random token> NX PX <ttl>.
//   - Renew every TTL/3: a Lua script extends the TTL only if the key still
//     holds our token (atomic compare-and-expire).
//   - Release: a Lua script deletes the key only if it holds our token.
//   - Save progress: a Lua script writes the eventId only if the lock holds
//     our token, and only if it is larger than the stored one.
//
// Timing: a lease counts from the moment the SET or renewal was sent, so
// local time never runs ahead of Redis's expiry. A lease is declared lost
// (dlock.Lease.Lost) when a renewal is refused, or when 2/3 of the TTL has
// passed since the last successful renewal was sent: the holder then has
// TTL/3 to stop before the key can expire and another instance acquire
// it. The deadline is enforced by a timer, independent of how long a Redis
// call blocks. Every Redis error is returned or retried, never panics; for
// calls to honour their deadlines configure the go-redis client with
// ContextTimeoutEnabled: true.
//
// Security: the lock uses the go-redis client it is given and never dials
// itself, so Redis AUTH (redis.Options.Username/Password, for requirepass or
// an ACL user, which needs ~<KeyPrefix>* and the scripting commands) and TLS
// (redis.Options.TLSConfig, with a client certificate if the server asks
// for one) are configured there.
package redislock
