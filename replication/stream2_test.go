package replication

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
)

// TestStreamV2CommitFrames: over real TCP between real brokers, a master
// with syncSlaves 2 sends its commit point to version 2 slaves; a slave's
// read gate follows it, so a write only one slave confirmed is invisible
// to the subscribers of both slaves (and of the master) until the second
// confirms it. A version 0 session (no Probe) gets no commit frames and
// serves what it holds.
func TestStreamV2CommitFrames(t *testing.T) {
	ctx := context.Background()
	m := openBroker(t, t.TempDir(), false, func(o *broker.Options) { o.ReadCommitted = true })
	t.Cleanup(func() { m.Close() })
	tr, err := NewSyncTracker(SyncOptions{Slaves: 2, Timeout: 300 * time.Millisecond, LastEventID: m.LastEventID,
		Logger: quiet, OnCommit: m.SetCommitPoint})
	if err != nil {
		t.Fatal(err)
	}
	var slaveEpoch atomic.Uint64
	// Alives every 30 s: a commit point that reaches a slave within the
	// test's deadlines came in a commit frame sent when the point moved.
	const alive = 30 * time.Second
	ms := serveMaster(t, m, "", MasterOptions{AliveInterval: alive, Sync: tr,
		Epoch: func() uint64 { return 4 }, OnEpoch: func(e uint64) { slaveEpoch.Store(e) }})
	probe := func(context.Context) (int, uint64, error) { return 2, 4, nil }
	if _, err := m.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	var slaves []*broker.Broker
	var stops []func() error
	for i := range 2 {
		sb := openBroker(t, t.TempDir(), true, func(o *broker.Options) { o.ReadCommitted = true })
		t.Cleanup(func() { sb.Close() })
		_, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, AliveInterval: alive,
			InstanceID: [6]byte{byte(i + 1)}, Probe: probe, KnownEpoch: func() uint64 { return 3 }, OnCommit: sb.SetCommitPoint})
		slaves, stops = append(slaves, sb), append(stops, stop)
	}
	id := publish(t, m, "t", "a", 1)
	if err := tr.Wait(ctx, id); err != nil {
		t.Fatalf("both slaves up: %v", err)
	}
	for i, sb := range slaves {
		smsstest.WaitFor(t, 10*time.Second, "the slave's commit point", func() bool { return sb.CommitPoint() >= id })
		if got := sb.CommitPoint(); got != id {
			t.Fatalf("slave %d commit point %d, want %d", i, got, id)
		}
	}
	if slaveEpoch.Load() != 3 {
		t.Fatalf("the master read epoch %d from its slaves' epoch records, want 3", slaveEpoch.Load())
	}
	// The second slave goes: the next write is confirmed by one of two.
	if err := stops[1](); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("stop slave 1: %v", err)
	}
	id2 := publish(t, m, "t", "b", 1)
	if err := tr.Wait(ctx, id2); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("one slave of two: %v", err)
	}
	smsstest.WaitFor(t, 10*time.Second, "slave 0 applies the write", func() bool { return slaves[0].LastEventID() >= id2 })
	for i, b := range []*broker.Broker{m, slaves[0]} {
		if got := b.CommitPoint(); got >= id2 {
			t.Fatalf("node %d shows eventId %d, confirmed by one slave of two (commit point %d)", i, id2, got)
		}
	}
	// Back with its own data directory: it confirms, the point moves on
	// the master and reaches slave 0 without another write.
	_, stop := runSlave(t, slaves[1], SlaveOptions{MasterAddr: ms.addr, AliveInterval: alive,
		InstanceID: [6]byte{2}, Probe: probe, OnCommit: slaves[1].SetCommitPoint})
	defer stop()
	for _, b := range []*broker.Broker{m, slaves[0], slaves[1]} {
		smsstest.WaitFor(t, 10*time.Second, "the commit point passes the refused write", func() bool { return b.CommitPoint() >= id2 })
	}
}

// TestStreamV2StaleMaster: a slave that knows a higher epoch than its
// master's refuses to follow it: the session ends before any block is
// applied, with ErrStaleMaster, and is retried.
func TestStreamV2StaleMaster(t *testing.T) {
	ctx := context.Background()
	m := openBroker(t, t.TempDir(), false, nil)
	t.Cleanup(func() { m.Close() })
	ms := serveMaster(t, m, "", MasterOptions{AliveInterval: 200 * time.Millisecond})
	if _, err := m.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	publish(t, m, "t", "a", 1)
	sb := openBroker(t, t.TempDir(), true, nil)
	t.Cleanup(func() { sb.Close() })
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, AliveInterval: 200 * time.Millisecond,
		Probe:      func(context.Context) (int, uint64, error) { return 2, 1, nil },
		KnownEpoch: func() uint64 { return 2 }, MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	defer stop()
	smsstest.WaitFor(t, 10*time.Second, "a refused session", func() bool { return s.Status().LastError != "" })
	if st := s.Status(); sb.LastEventID() != 0 || !strings.Contains(st.LastError, "not following it") {
		t.Fatalf("a slave knowing epoch 2 followed a master at epoch 1: lastEventId %d, status %+v", sb.LastEventID(), st)
	}
}
