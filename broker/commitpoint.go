package broker

import (
	"math"
	"sync"
	"sync/atomic"
)

// Read-committed delivery (issue 32; docs/protocol.md §4.6).
//
// With Options.ReadCommitted a subscriber is handed only messages whose
// eventId is at or below the commit point: the highest eventId that enough
// slaves confirmed (on a master, replication.SyncTracker computes it and
// calls SetCommitPoint), or the commit point the master sent on the replica
// stream (on a slave). A block the writer committed above it stays in the
// files, invisible to readers, until the point passes it: a write refused
// "write not confirmed" is delivered only once the slaves confirm it, and
// never if a failover drops it. Without ReadCommitted (syncSlaves 0, or the
// opt-out) the gate is open and costs one predictable branch per read.
//
// Invariants:
//   - The commit point only grows (SetCommitPoint ignores a lower value), so
//     a subscriber never sees a message it could later be told was not
//     committed, and never waits for something it already saw.
//   - Every change of the point closes the channel that readers blocked on
//     it wait for, so a subscriber is woken once per change, never polled.
//   - Inline delivery (subinline.go) is off with ReadCommitted: a commit
//     hook runs on commits of the topic, not on moves of the point, and
//     would leave a message waiting for the next commit.
type commitGate struct {
	on    bool // Options.ReadCommitted; fixed at Open
	point atomic.Int64

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when point moves

	// blocked counts the subscribers waiting for a move (they read
	// everything at or below the point): operators' view and tests.
	blocked atomic.Int64
}

// waiting reports whether a subscriber waits for the point to move.
func (g *commitGate) waiting() bool { return g.blocked.Load() > 0 }

// BlockedOnCommit is how many subscribers have read everything at or below
// the commit point while their topic holds more: they wait for slaves to
// confirm it.
func (b *Broker) BlockedOnCommit() int64 { return b.commit.blocked.Load() }

func (g *commitGate) init(on bool) {
	g.on = on
	g.changed = make(chan struct{})
}

// view returns the highest eventId a reader may be handed and the channel
// closed when that changes; math.MaxInt64 and nil when the gate is open.
func (g *commitGate) view() (int64, <-chan struct{}) {
	if !g.on {
		return math.MaxInt64, nil
	}
	g.mu.Lock()
	ch := g.changed
	g.mu.Unlock()
	// Read after taking the channel: a move between the two closes the
	// channel taken, so the reader never sleeps through it.
	return g.point.Load(), ch
}

// ReadCommitted reports whether subscribers are limited to the commit
// point (Options.ReadCommitted).
func (b *Broker) ReadCommitted() bool { return b.commit.on }

// CommitPoint is the highest eventId subscribers may be handed; with
// ReadCommitted off it is the last committed eventId.
func (b *Broker) CommitPoint() int64 {
	if !b.commit.on {
		return b.LastEventID()
	}
	return b.commit.point.Load()
}

// SetDurableHook makes the writer call fn with the last eventId of every
// committed group once the group is as durable as the flush level asks
// (stage "visible", on the writer's goroutine: fn must not block nor call
// into the broker). With ReplicateBeforeSync a slave may confirm a group
// before the master synced it; the semi-synchronous tracker
// (replication.SyncTracker.Durable) uses the hook to keep the commit point
// at or below the master's own synced copy. nil removes it.
func (b *Broker) SetDurableHook(fn func(lastEventID int64)) {
	if fn == nil {
		b.durableHook.Store(nil)
		return
	}
	b.durableHook.Store(&fn)
}

// SetCommitPoint moves the commit point to id if that is higher and wakes
// the subscribers waiting for it. It may be called from any goroutine; it
// never blocks on the writer.
func (b *Broker) SetCommitPoint(id int64) {
	g := &b.commit
	if !g.on || id <= g.point.Load() {
		return
	}
	g.mu.Lock()
	if id <= g.point.Load() {
		g.mu.Unlock()
		return
	}
	g.point.Store(id)
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}
