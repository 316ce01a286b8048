package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// fakeDisk is a statfs whose answer the test sets.
type fakeDisk struct {
	free  atomic.Uint64
	reads atomic.Int64
}

func (d *fakeDisk) statfs(string) (uint64, error) {
	d.reads.Add(1)
	return d.free.Load(), nil
}

// TestDiskWatermark: below MinFreeBytes pub, delay and create are refused
// with the documented text; reads, subscriptions and deletes go on; writes
// resume by themselves when space returns.
func TestDiskWatermark(t *testing.T) {
	ctx := context.Background()
	disk := &fakeDisk{}
	disk.free.Store(1 << 30)
	b := openTest(t, t.TempDir(), func(o *Options) {
		o.MinFreeBytes, o.Statfs, o.DiskCheckInterval = 100<<20, disk.statfs, 5*time.Millisecond
	})
	defer b.Close()
	for _, name := range []string{"t", "doomed"} {
		if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Publish(ctx, []byte("t"), rec("before"), 1); err != nil {
		t.Fatal(err)
	}

	disk.free.Store(42 << 20)
	smsstest.WaitFor(t, countWait, "the low state", func() bool { return b.Disk().Low })
	const want = "disk almost full: 42 MiB free, store.minFreeMB 100"
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"pub", func() error { _, err := b.Publish(ctx, []byte("t"), rec("x"), 1); return err }},
		{"delay", func() error { _, err := b.PublishDelay(ctx, []byte("t"), rec("x"), 1, 5000); return err }},
		{"create", func() error { _, err := b.CreateTopic(ctx, []byte("new"), 0); return err }},
	} {
		var be *protocol.BizError
		if err := tc.call(); !errors.As(err, &be) || be.Msg != want {
			t.Errorf("%s while low: %v, want 400 %q", tc.name, err, want)
		}
	}
	if _, err := b.DeleteTopic(ctx, []byte("doomed")); err != nil {
		t.Errorf("delete while low: %v", err)
	}
	s, err := b.Subscribe([]byte("t"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	area, n, err := s.Next(ctx, nil, 10, time.Second)
	s.Close()
	if err != nil || n != 1 || !strings.Contains(string(area), "before") {
		t.Fatalf("subscription while low: n %d err %v", n, err)
	}

	disk.free.Store(101 << 20)
	smsstest.WaitFor(t, countWait, "writes to resume", func() bool { return !b.Disk().Low })
	if _, err := b.Publish(ctx, []byte("t"), rec("after"), 1); err != nil {
		t.Fatalf("pub after space returned: %v", err)
	}
}

// TestDiskRecheckAfterENOSPC: a write failing with ENOSPC triggers a
// reading at once, not at the next tick.
func TestDiskRecheckAfterENOSPC(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(1 << 30)
	b := openTest(t, t.TempDir(), func(o *Options) {
		o.MinFreeBytes, o.Statfs, o.DiskCheckInterval = 100<<20, disk.statfs, time.Hour
	})
	defer b.Close()
	disk.free.Store(0)
	b.noteNoSpace(fmt.Errorf("write topic: %w", syscall.EIO))
	b.noteNoSpace(nil)
	if b.Disk().Low {
		t.Fatal("a reading without ENOSPC")
	}
	b.noteNoSpace(fmt.Errorf("append: %w", syscall.ENOSPC))
	smsstest.WaitFor(t, countWait, "the re-check", func() bool { return b.Disk().Low })
}

// TestSlaveReplicationPausesOnFullDisk: a slave below the watermark holds
// replicated blocks until space returns, then applies them; it does not
// fail (which stopped replication for good).
func TestSlaveReplicationPausesOnFullDisk(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, t.TempDir(), nil)
	defer m.Close()
	m.CreateTopic(ctx, []byte("t"), 0)
	m.Publish(ctx, []byte("t"), rec("one"), 1)
	var blocks [][]byte
	st, err := m.ReplicaStream(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(ctx, 10, 10*time.Millisecond, func(b []byte) error {
		blocks = append(blocks, append([]byte(nil), b...))
		return nil
	}); err != nil || len(blocks) != 2 {
		t.Fatalf("%d blocks, %v", len(blocks), err)
	}
	st.Close()

	disk := &fakeDisk{}
	disk.free.Store(1 << 20)
	s := openTest(t, t.TempDir(), func(o *Options) {
		o.Slave, o.MinFreeBytes, o.Statfs, o.DiskCheckInterval = true, 100<<20, disk.statfs, 2*time.Millisecond
	})
	defer s.Close()
	type result struct {
		last  int64
		n     int
		err   error
		reads int64
	}
	done := make(chan result, 1)
	go func() {
		last, n, err := s.ApplyReplicatedBatch(ctx, blocks)
		done <- result{last, n, err, disk.reads.Load()}
	}()
	// Several readings while low, and nothing applied.
	start := disk.reads.Load()
	smsstest.WaitFor(t, countWait, "readings while paused", func() bool { return disk.reads.Load() > start+5 })
	select {
	case r := <-done:
		t.Fatalf("applied while the disk is low: %+v", r)
	default:
	}
	if s.LastEventID() != 0 {
		t.Fatalf("slave at %d while paused", s.LastEventID())
	}
	disk.free.Store(1 << 30)
	select {
	case r := <-done:
		if r.err != nil || r.n != 2 || r.last != m.LastEventID() {
			t.Fatalf("after space returned: %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("replication did not resume")
	}
	// A session that ends while paused returns its context's error.
	disk.free.Store(0)
	smsstest.WaitFor(t, countWait, "the low state", func() bool { return s.Disk().Low })
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.ApplyReplicated(cctx, blocks[0]); !errors.Is(err, context.Canceled) {
		t.Fatalf("apply with a cancelled session: %v", err)
	}
}

// TestDiskFullStartRefused: with less than minStartFree free (and no reserve
// file to give back) Open refuses before badger writes anything, naming
// the free space; at minStartFree and with the guard off it opens.
func TestDiskFullStartRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		free    uint64
		min     int64
		refused bool
	}{
		{"full", 64 << 10, 100 << 20, true},
		{"empty", 0, 100 << 20, true},
		{"room", minStartFree, 100 << 20, false},
		{"guardOff", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := &fakeDisk{}
			disk.free.Store(tc.free)
			dir := t.TempDir()
			b, err := Open(Options{Dir: dir, FlushLevel: 1, Logger: quietLog, MinFreeBytes: tc.min, Statfs: disk.statfs, DiskCheckInterval: time.Hour})
			if !tc.refused {
				if err != nil {
					t.Fatal(err)
				}
				b.Close()
				return
			}
			if err == nil {
				b.Close()
				t.Fatal("opened on a full disk")
			}
			if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), fmt.Sprintf("%d KiB free", tc.free>>10)) {
				t.Fatalf("error %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "meta")); !os.IsNotExist(err) {
				t.Fatalf("meta store touched before the refusal: %v", err)
			}
		})
	}
}
