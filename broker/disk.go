package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smssmq/smss/protocol"
)

// DefaultDiskCheckInterval is how often the free space of the data
// directory's filesystem is read (one statfs; never per request).
const DefaultDiskCheckInterval = time.Second

// diskGuard keeps the free space of the data directory's filesystem in an
// atomic, refreshed by a ticker and right after a write failed with ENOSPC,
// so that the request path reads a word instead of making a syscall. Below
// min bytes, writes that add data (pub, delay, create, replicated blocks)
// are refused or paused: badger writes through memory maps, and a write
// into a page the full disk cannot back kills the process with SIGBUS.
type diskGuard struct {
	dir    string
	min    uint64 // bytes; 0 disables the guard
	statfs func(dir string) (free uint64, err error)
	log    *slog.Logger

	free    atomic.Uint64 // bytes available to the process, last reading
	low     atomic.Bool   // free < min
	checked atomic.Bool   // at least one reading succeeded

	poke chan struct{} // asks for a reading now
	stop chan struct{}
	done chan struct{}

	checkMu sync.Mutex // serializes check
	mu      sync.Mutex
	resumed chan struct{} // closed when the disk leaves the low state
}

func statfsFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

func newDiskGuard(dir string, minBytes uint64, log *slog.Logger, statfs func(string) (uint64, error)) *diskGuard {
	if statfs == nil {
		statfs = statfsFree
	}
	g := &diskGuard{dir: dir, min: minBytes, statfs: statfs, log: log,
		poke: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		resumed: make(chan struct{})}
	g.check()
	return g
}

// run refreshes the reading every interval and on every poke until close.
func (g *diskGuard) run(interval time.Duration) {
	defer close(g.done)
	if g.min == 0 {
		<-g.stop
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-g.poke:
		case <-g.stop:
			return
		}
		g.check()
	}
}

func (g *diskGuard) close() {
	close(g.stop)
	<-g.done
}

// recheck asks for a reading now (after an ENOSPC); it never blocks.
func (g *diskGuard) recheck() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

func (g *diskGuard) check() {
	if g.min == 0 {
		return
	}
	// One reading at a time: the ticker and an ENOSPC re-check must not
	// interleave the state change below.
	g.checkMu.Lock()
	defer g.checkMu.Unlock()
	free, err := g.statfs(g.dir)
	if err != nil {
		// Keep the last reading: a failing statfs says nothing about
		// the space left.
		g.log.Warn("cannot read the free disk space", "dir", g.dir, "err", err)
		return
	}
	g.free.Store(free)
	g.checked.Store(true)
	low := free < g.min
	if g.low.Swap(low) == low {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if low {
		g.resumed = make(chan struct{})
		g.log.Error("disk almost full: refusing pub, delay and create (reads, subscriptions, deletes and replication to slaves go on) until space returns",
			"freeMiB", free>>20, "key", "store.minFreeMB", "minFreeMiB", g.min>>20, "dir", g.dir)
	} else {
		close(g.resumed)
		g.log.Info("disk space is back above store.minFreeMB: writes resume",
			"freeMiB", free>>20, "minFreeMiB", g.min>>20)
	}
}

// refusal returns the error of a write refused for lack of space, nil when
// there is enough.
func (g *diskGuard) refusal() error {
	if g.min == 0 || !g.low.Load() {
		return nil
	}
	return protocol.NewBizError(fmt.Sprintf("disk almost full: %d MiB free, store.minFreeMB %d", g.free.Load()>>20, g.min>>20))
}

// wait blocks until the disk is above the watermark or ctx ends.
func (g *diskGuard) wait(ctx context.Context) error {
	for g.min > 0 && g.low.Load() {
		g.mu.Lock()
		ch := g.resumed
		g.mu.Unlock()
		if !g.low.Load() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// DiskState is the last reading of the disk guard.
type DiskState struct {
	// FreeBytes is the space available on the data directory's filesystem.
	FreeBytes uint64
	// MinFreeBytes is store.minFreeMB in bytes; 0 when the guard is off.
	MinFreeBytes uint64
	// Low is true while writes are refused for lack of space.
	Low bool
}

// Disk returns the last reading of the free space of the data directory's
// filesystem (cheap: no syscall).
func (b *Broker) Disk() DiskState {
	return DiskState{FreeBytes: b.disk.free.Load(), MinFreeBytes: b.disk.min, Low: b.disk.low.Load()}
}

// diskRefusal is the error of a client write refused for lack of space.
func (b *Broker) diskRefusal() error { return b.disk.refusal() }

// noteNoSpace asks for a fresh reading after a write failed with ENOSPC, so
// that the next writes are refused at once rather than each failing.
func (b *Broker) noteNoSpace(err error) {
	if err != nil && errors.Is(err, syscall.ENOSPC) {
		b.disk.recheck()
	}
}
