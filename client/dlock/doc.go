// Package dlock defines the lease-based lock that lets a group of processes
// subscribe to one topic as one consumer, and the GroupSubscriber built on
// it. Package redislock implements the lock with Redis.
//
// Invariants a Locker implementation must keep:
//
//   - At most one Lease on a lock is valid at a time, in the store's view.
//   - A Lease renews itself in the background. Its Lost channel is closed
//     as soon as the holder can no longer be sure it owns the lock (renewal
//     refused, or renewals failing) and, at the latest, with a margin before
//     the lock could expire in the store: a holder that stops when Lost is
//     closed has stopped before anyone else can acquire the lock.
//   - Progress written with SaveProgress is fenced by the lease: a holder
//     that has lost the lock cannot overwrite the group's progress, and the
//     stored eventId never decreases.
//
// GroupSubscriber delivery guarantees: one instance of the group consumes at
// a time; the group's progress (the last eventId whose batch was handled and
// saved) lives beside the lock, so a new holder resumes exactly after it and
// no message is skipped. A batch is saved before it is acknowledged to the
// server; a batch is delivered again to the next holder only when its
// handler ran but the holder died, lost the lock or could not reach the
// store before saving it; a saved batch whose ack was lost with its
// connection, which the subscriber hands out again on its next
// connection, is acknowledged without calling the handler. Handlers
// should honour their context, which is cancelled when the lease is lost,
// so that a slow batch does not run on after another instance has taken
// over.
package dlock
