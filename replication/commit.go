package replication

import (
	"encoding/hex"
	"slices"
	"time"

	"github.com/smssmq/smss/protocol"
)

// The commit point and the in-sync rule of a SyncTracker.
//
// The commit point is the highest eventId a failover keeps: with
// syncSlaves N it is the N-th highest position the connected confirming
// slaves confirmed (a promotion of the most advanced slave keeps it); under
// a cluster's in-sync rule it is the lowest position of the in-sync set
// (every member of which may be elected). Subscribers are served no
// further (broker.SetCommitPoint through SyncOptions.OnCommit), and the
// master sends it to its slaves (commit frames, docs/protocol.md §4.6).
//
// Invariants:
//   - With DurableGate the commit point is never above the master's own
//     synced position (LastEventID): a slave may confirm a write the
//     master has not synced yet (flushLevel 2, replicas sent before the
//     fsync), and a failover keeps it, but a master that lost power and
//     came back as master would not.
//   - The commit point only grows. A slave that disconnects lowers the
//     confirmed position (kth) but never the commit point: what readers
//     were shown was confirmed when they were shown it.
//   - While degraded (onSyncTimeout: degrade) every write answered 200 is
//     at or below the commit point: acknowledged writes are visible.
//   - Under the in-sync rule a write is confirmed only when every member
//     of the set last given to SetInSync confirmed it, and only while the
//     set has at least Slaves members; a member that is not connected
//     confirms nothing. The set changes only through SetInSync (the
//     cluster applies it from its consensus log), so a member leaves it
//     before the master answers a write without it.
type commitState struct {
	point    int64         // guarded by SyncTracker.mu
	changed  chan struct{} // closed and replaced when point rises; guarded by SyncTracker.mu
	onCommit func(int64)

	inSync  bool
	members [][InstanceIDLen]byte // guarded by SyncTracker.mu
	version uint64                // of members (the cluster's log index)
}

// committableLocked is the position the commit point may rise to: what the
// slaves confirmed (kth), and with DurableGate no further than the
// master's own synced copy (LastEventID).
func (t *SyncTracker) committableLocked() int64 {
	if t.gate {
		return min(t.kth, t.last())
	}
	return t.kth
}

// Durable tells a DurableGate tracker that the master's own copy is synced
// up to its LastEventID (lastEventID, the broker's durable hook): the
// commit point rises to what the slaves confirmed of it. It must not block
// the writer that calls it: it takes the tracker's lock only.
func (t *SyncTracker) Durable(lastEventID int64) {
	if t == nil || !t.gate || t.need == 0 {
		return
	}
	t.mu.Lock()
	t.raiseCommitLocked(min(t.kth, lastEventID))
	t.mu.Unlock()
}

// raiseCommitLocked moves the commit point up to id (never down).
func (t *SyncTracker) raiseCommitLocked(id int64) {
	if id <= t.commit.point {
		return
	}
	t.commit.point = id
	if t.commit.changed != nil {
		close(t.commit.changed)
	}
	t.commit.changed = make(chan struct{})
	if t.commit.onCommit != nil {
		t.commit.onCommit(id)
	}
}

// CommitPoint is the highest eventId a failover keeps (see above); 0 while
// nothing was confirmed.
func (t *SyncTracker) CommitPoint() int64 {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.commit.point
}

// commitView returns the commit point and a channel closed when it rises
// (replica streams of version 2 wait on it to send commit frames).
func (t *SyncTracker) commitView() (int64, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.commit.changed == nil {
		t.commit.changed = make(chan struct{})
	}
	return t.commit.point, t.commit.changed
}

// inSyncLowestLocked is the position every in-sync member has: the lowest
// of their connected confirmations, 0 when one is not connected or the
// set is smaller than Slaves.
func (t *SyncTracker) inSyncLowestLocked() int64 {
	if len(t.commit.members) < t.need {
		return 0
	}
	low := int64(-1)
	for _, id := range t.commit.members {
		i := slices.IndexFunc(t.slaves, func(s *SyncSlave) bool { return s.instance == id })
		if i < 0 {
			return 0
		}
		if p := t.slaves[i].pos; low < 0 || p < low {
			low = p
		}
	}
	return max(low, 0)
}

// SetInSync makes members (slave instance ids) the in-sync set, numbered
// version (InSync trackers only). From its return on, a write is confirmed
// only once every member confirmed it; a member left out no longer counts.
func (t *SyncTracker) SetInSync(members [][InstanceIDLen]byte, version uint64) {
	if t == nil || !t.commit.inSync {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.commit.members = slices.Clone(members)
	t.commit.version = version
	t.advanceLocked()
}

// InSyncVersion is the version of the in-sync set the tracker applies: a
// cluster's controller lets a new member be elected only once the master
// applies a set that holds it.
func (t *SyncTracker) InSyncVersion() uint64 {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.commit.version
}

// fenced is the Fence hook's refusal, if any.
func (t *SyncTracker) fenced() error {
	if t.fence == nil {
		return nil
	}
	return t.fence()
}

// SlaveReports lists the connected confirming slaves, for a cluster's
// controller. LagMs is the age of the oldest block streamed to the slave
// that it has not confirmed (0: it confirmed everything it was sent).
func (t *SyncTracker) SlaveReports() []protocol.SlaveConfirm {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	slaves := slices.Clone(t.slaves)
	t.mu.Unlock()
	now := time.Now()
	out := make([]protocol.SlaveConfirm, 0, len(slaves))
	for _, s := range slaves {
		t.mu.Lock()
		r := protocol.SlaveConfirm{Instance: hex.EncodeToString(s.instance[:]), Confirmed: s.pos}
		t.mu.Unlock()
		if s.oldest != nil {
			if at, ok := s.oldest(); ok {
				r.LagMs = now.Sub(at).Milliseconds()
			}
		}
		out = append(out, r)
	}
	return out
}
