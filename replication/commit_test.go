package replication

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

// commitLog records OnCommit calls.
type commitLog struct {
	mu  sync.Mutex
	ids []int64
}

func (c *commitLog) add(id int64) { c.mu.Lock(); c.ids = append(c.ids, id); c.mu.Unlock() }
func (c *commitLog) last() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ids) == 0 {
		return 0
	}
	return c.ids[len(c.ids)-1]
}

// TestCommitPointGrowsOnly: the commit point is the N-th highest
// confirmation, reported on every rise, and never goes back when a slave
// leaves (kth drops to 0, the point stays).
func TestCommitPointGrowsOnly(t *testing.T) {
	var cl commitLog
	tr, err := NewSyncTracker(SyncOptions{Slaves: 2, Timeout: time.Second, LastEventID: func() int64 { return 20 },
		Logger: quiet, OnCommit: cl.add})
	if err != nil {
		t.Fatal(err)
	}
	a := tr.register("a", tr.streams.Add(1), hello(1, 5), nil)
	if tr.CommitPoint() != 0 {
		t.Fatalf("one slave of two: commit point %d", tr.CommitPoint())
	}
	b := tr.register("b", tr.streams.Add(1), hello(2, 3), nil)
	if tr.CommitPoint() != 3 || cl.last() != 3 {
		t.Fatalf("two slaves at 5 and 3: commit point %d, reported %d", tr.CommitPoint(), cl.last())
	}
	b.confirm(9, false, 0, false)
	if tr.CommitPoint() != 5 {
		t.Fatalf("at 5 and 9: commit point %d", tr.CommitPoint())
	}
	a.remove()
	if in, _ := tr.Info(); in.Confirmed != 0 || tr.CommitPoint() != 5 {
		t.Fatalf("after a slave left: confirmed %d (want 0), commit point %d (want 5)", in.Confirmed, tr.CommitPoint())
	}
	for i := 1; i < len(cl.ids); i++ {
		if cl.ids[i] <= cl.ids[i-1] {
			t.Fatalf("OnCommit not strictly rising: %v", cl.ids)
		}
	}
}

// TestCommitPointDegraded: writes answered 200 while degraded are at or
// below the commit point.
func TestCommitPointDegraded(t *testing.T) {
	var cl commitLog
	tr, err := NewSyncTracker(SyncOptions{Slaves: 1, Timeout: 50 * time.Millisecond, Degrade: true,
		LastEventID: func() int64 { return 7 }, Logger: quiet, OnCommit: cl.add})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(context.Background(), 7); err != nil {
		t.Fatalf("degrade mode: %v", err)
	}
	if tr.CommitPoint() < 7 || cl.last() < 7 {
		t.Fatalf("a write answered 200 after the timeout is above the commit point %d", tr.CommitPoint())
	}
}

// TestInSyncRule: under the in-sync rule every member must confirm, a
// connected slave outside the set counts for nothing, a set smaller than
// Slaves confirms nothing, and a member leaves only through SetInSync.
func TestInSyncRule(t *testing.T) {
	ctx := context.Background()
	tr, err := NewSyncTracker(SyncOptions{Slaves: 1, Timeout: 5 * time.Second, InSync: true,
		LastEventID: func() int64 { return 0 }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	a := tr.register("a", tr.streams.Add(1), hello(1, 0), nil)
	b := tr.register("b", tr.streams.Add(1), hello(2, 0), nil)
	out := tr.register("c", tr.streams.Add(1), hello(3, 0), nil)
	w5 := waitAsync(tr, ctx, 5)
	waitWaiting(t, tr, 1)
	out.confirm(10, false, 0, false)
	expectPending(t, w5, "an empty in-sync set (below Slaves)")
	tr.SetInSync([][InstanceIDLen]byte{{1}, {2}}, 7)
	if tr.InSyncVersion() != 7 {
		t.Fatalf("version %d", tr.InSyncVersion())
	}
	a.confirm(6, false, 0, false)
	expectPending(t, w5, "one member of two")
	b.confirm(5, false, 0, false)
	expectDone(t, w5, nil, "5 with both members at >= 5")
	if tr.CommitPoint() != 5 {
		t.Fatalf("commit point %d, want 5", tr.CommitPoint())
	}
	// A member that disconnects blocks every write until the set drops it.
	b.remove()
	w6 := waitAsync(tr, ctx, 6)
	waitWaiting(t, tr, 1)
	expectPending(t, w6, "a member not connected")
	tr.SetInSync([][InstanceIDLen]byte{{1}}, 8)
	expectDone(t, w6, nil, "6 once the set dropped the gone member")
	// degrade cannot be combined with the in-sync rule.
	if _, err := NewSyncTracker(SyncOptions{Slaves: 1, InSync: true, Degrade: true, LastEventID: func() int64 { return 0 }}); err == nil {
		t.Fatal("InSync with Degrade accepted")
	}
}

// TestSyncFence: a fenced tracker refuses a write even when its
// confirmations are there.
func TestSyncFence(t *testing.T) {
	fenced := protocol.NewBizError(protocol.FencedPrefix + "lease lost")
	var on bool
	var mu sync.Mutex
	tr, err := NewSyncTracker(SyncOptions{Slaves: 1, Timeout: time.Second, LastEventID: func() int64 { return 0 }, Logger: quiet,
		Fence: func() error {
			mu.Lock()
			defer mu.Unlock()
			if on {
				return fenced
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	tr.register("a", tr.streams.Add(1), hello(1, 9), nil)
	if err := tr.Wait(context.Background(), 9); err != nil {
		t.Fatalf("not fenced: %v", err)
	}
	mu.Lock()
	on = true
	mu.Unlock()
	if err := tr.Wait(context.Background(), 9); !errors.Is(err, fenced) {
		t.Fatalf("fenced: %v", err)
	}
}

// TestCommitPointDurableGate: with DurableGate (flushLevel 2, replicas sent
// before the master's fsync) a slave's confirmation beyond the master's
// synced position raises the commit point only to that position; Durable
// raises it to what both have, never past the confirmations. Without the
// gate the confirmation alone moves it (the order of every other flush
// level, where a slave cannot confirm what the master has not made
// visible).
func TestCommitPointDurableGate(t *testing.T) {
	for _, gate := range []bool{true, false} {
		t.Run(map[bool]string{true: "gate", false: "no gate"}[gate], func(t *testing.T) {
			var cl commitLog
			var synced atomicInt
			synced.set(4)
			tr, err := NewSyncTracker(SyncOptions{Slaves: 1, Timeout: time.Second, LastEventID: synced.get,
				Logger: quiet, OnCommit: cl.add, DurableGate: gate})
			if err != nil {
				t.Fatal(err)
			}
			s := tr.register("a", tr.streams.Add(1), hello(1, 4), nil)
			if tr.CommitPoint() != 4 {
				t.Fatalf("slave and master at 4: commit point %d", tr.CommitPoint())
			}
			s.confirm(7, true, 0, false) // the slave has 5..7 before the master synced them
			want := map[bool]int64{true: 4, false: 7}[gate]
			if tr.CommitPoint() != want || cl.last() != want {
				t.Fatalf("slave at 7, master synced to 4: commit point %d, reported %d, want %d", tr.CommitPoint(), cl.last(), want)
			}
			synced.set(6)
			tr.Durable(6)
			want = map[bool]int64{true: 6, false: 7}[gate]
			if tr.CommitPoint() != want {
				t.Fatalf("master synced to 6: commit point %d, want %d", tr.CommitPoint(), want)
			}
			synced.set(9)
			tr.Durable(9) // beyond the slave: the slave's 7 bounds it
			if tr.CommitPoint() != 7 || cl.last() != 7 {
				t.Fatalf("master synced to 9, slave at 7: commit point %d, reported %d", tr.CommitPoint(), cl.last())
			}
			s.confirm(9, true, 0, false)
			if tr.CommitPoint() != 9 {
				t.Fatalf("both at 9: commit point %d", tr.CommitPoint())
			}
		})
	}
}

// atomicInt is an int64 for a LastEventID function.
type atomicInt struct {
	mu sync.Mutex
	v  int64
}

func (a *atomicInt) set(v int64) { a.mu.Lock(); a.v = v; a.mu.Unlock() }
func (a *atomicInt) get() int64  { a.mu.Lock(); defer a.mu.Unlock(); return a.v }
