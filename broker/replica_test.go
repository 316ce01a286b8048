package broker

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReplicatedBinlogIsByteIdentical streams a master's binlog into a
// slave through ApplyReplicated and compares binlogs and topic contents.
func TestReplicatedBinlogIsByteIdentical(t *testing.T) {
	ctx := context.Background()
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openTest(t, mdir, nil)
	m.CreateTopic(ctx, []byte("order"), 0)
	m.CreateTopic(ctx, []byte("gone"), 0)
	m.Publish(ctx, []byte("order"), rec("one"), 1)
	m.Publish(ctx, []byte("gone"), rec("x"), 1)
	m.Publish(ctx, []byte("order"), append(append(rec("two"), rec("three")...), rec("four")...), 3)
	if _, err := m.PublishDelay(ctx, []byte("order"), rec("later"), 1, 1000); err != nil {
		t.Fatal(err)
	}
	due, err := m.meta.DueDelays(time.Now().UnixMilli()+5000, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due delays %v %v", due, err)
	}
	if id, err := m.ApplyDelay(ctx, due[0].Topic, due[0].Value); err != nil || id == 0 {
		t.Fatalf("apply delay: %d %v", id, err)
	}
	if id, _ := m.ApplyDelay(ctx, due[0].Topic, due[0].Value); id != 0 {
		t.Fatalf("second apply published again: %d", id)
	}
	m.DeleteTopic(ctx, []byte("gone"))

	s := openTest(t, sdir, func(o *Options) { o.Slave = true })
	replicateAll(t, m, s, 0)
	if s.LastEventID() != m.LastEventID() {
		t.Fatalf("slave last %d, master %d", s.LastEventID(), m.LastEventID())
	}
	// Resuming from a block's last id (or, for original slaves, its
	// first id) works; from strictly inside a block it fails.
	if _, err := m.ReplicaStream(6); err == nil {
		t.Fatalf("resume inside the 3-message block 5..7 accepted")
	}
	for _, id := range []int64{5, 7} {
		st, err := m.ReplicaStream(id)
		if err != nil {
			t.Fatalf("resume after block 5..7 named by %d: %v", id, err)
		}
		var first []byte
		st.Next(ctx, 1, time.Millisecond, func(b []byte) error { first = append([]byte(nil), b...); return nil })
		st.Close()
		if !bytes.Contains(first, []byte("\t16\t8\t")) {
			t.Fatalf("resume from %d starts at %q, want the delay block 8", id, first)
		}
	}
	m.Close()
	s.Close()
	mb, _ := os.ReadFile(filepath.Join(mdir, "binlog", "0.log"))
	sb, _ := os.ReadFile(filepath.Join(sdir, "binlog", "0.log"))
	if len(mb) == 0 || !bytes.Equal(mb, sb) {
		t.Fatalf("binlogs differ: master %d bytes, slave %d", len(mb), len(sb))
	}
	mi, _ := readTopic(t, mdir, "order")
	si, _ := readTopic(t, sdir, "order")
	if !equalIDs(mi, si) || len(mi) != 5 {
		t.Fatalf("topic ids master %v slave %v", mi, si)
	}
	if ids, _ := readTopic(t, sdir, "gone"); len(ids) != 0 {
		t.Fatalf("deleted topic still on slave: %v", ids)
	}
}

func TestApplyReplicatedBatchStopsAtFirstFailure(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, t.TempDir(), nil)
	defer m.Close()
	m.CreateTopic(ctx, []byte("a"), 0)
	for i := 0; i < 5; i++ {
		m.Publish(ctx, []byte("a"), rec("x"), 1)
	}
	var raws [][]byte
	st, _ := m.ReplicaStream(0)
	st.Next(ctx, 100, time.Millisecond, func(b []byte) error { raws = append(raws, append([]byte(nil), b...)); return nil })
	st.Close()
	if len(raws) != 6 {
		t.Fatalf("%d blocks", len(raws))
	}
	s := openTest(t, t.TempDir(), func(o *Options) { o.Slave = true })
	defer s.Close()
	// Block 3 is sent out of order (a duplicate of block 1): blocks 0..2
	// apply, nothing after the failure does.
	batch := [][]byte{raws[0], raws[1], raws[2], raws[1], raws[3], raws[4]}
	last, n, err := s.ApplyReplicatedBatch(ctx, batch)
	if !errors.Is(err, ErrReplicaOrder) || n != 3 || last != 3 {
		t.Fatalf("batch: last %d applied %d err %v", last, n, err)
	}
	if s.LastEventID() != 3 {
		t.Fatalf("slave at %d after a failed batch", s.LastEventID())
	}
	// The rest applies when resent in order.
	if last, n, err := s.ApplyReplicatedBatch(ctx, raws[3:]); err != nil || n != 3 || last != 6 {
		t.Fatalf("resend: last %d applied %d err %v", last, n, err)
	}
}

func TestDelayDoesNotLeakIntoRecreatedTopic(t *testing.T) {
	ctx := context.Background()
	b := openTest(t, t.TempDir(), nil)
	defer b.Close()
	b.CreateTopic(ctx, []byte("a"), 0)
	if _, err := b.PublishDelay(ctx, []byte("a"), rec("old"), 1, 1000); err != nil {
		t.Fatal(err)
	}
	b.DeleteTopic(ctx, []byte("a"))
	b.CreateTopic(ctx, []byte("a"), 0)
	due, _ := b.meta.DueDelays(time.Now().UnixMilli()+5000, 10)
	if len(due) != 1 {
		t.Fatalf("%d due", len(due))
	}
	if id, err := b.ApplyDelay(ctx, due[0].Topic, due[0].Value); err != nil || id != 0 {
		t.Fatalf("apply into a recreated topic: id %d err %v", id, err)
	}
	if n, _ := b.meta.PendingDelays(); n != 0 {
		t.Fatalf("%d delays still pending", n)
	}
	s, err := b.Subscribe([]byte("a"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, n, _ := s.Next(ctx, nil, 10, time.Millisecond); n != 0 {
		t.Fatalf("recreated topic got %d messages", n)
	}
}
