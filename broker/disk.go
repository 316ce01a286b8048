package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smssmq/smss/protocol"
)

// ReserveFile is the name, in the data directory, of the space the disk
// guard holds in reserve (see diskGuard). The original server ignores it.
const ReserveFile = "smss.reserve"

// maxReserve caps the reserve: badger needs room for one memtable flush
// (an 8 MiB memtable, compressed) and a new memtable when it opens.
const maxReserve = 64 << 20

// DefaultDiskCheckInterval is how often the free space of the data
// directory's filesystem is read (one statfs; never per request).
const DefaultDiskCheckInterval = time.Second

// diskGuard keeps the free space of the data directory's filesystem in an
// atomic, refreshed by a ticker and right after a write failed with ENOSPC,
// so that the request path reads a word instead of making a syscall. Below
// min bytes, writes that add data (pub, delay, create, replicated blocks)
// are refused or paused: badger writes through memory maps, and a write
// into a page the full disk cannot back kills the process with SIGBUS.
//
// The watermark keeps smss's own writes from filling the disk; something
// else may still fill it to the last byte, and then badger's next memtable
// flush (at the latest on shutdown) or the next start would die. Against
// that the guard keeps a reserve file of min(min/2, 64 MiB) with real
// blocks (fallocate) in the data directory while there is room for it,
// and deletes it when a reading finds less free space than its size (and
// on Close, and before badger opens).
type diskGuard struct {
	dir     string
	min     uint64 // bytes; 0 disables the guard
	reserve uint64 // bytes of ReserveFile; 0 without the guard
	statfs  func(dir string) (free uint64, err error)
	log     *slog.Logger

	free atomic.Uint64 // bytes available to the process, last reading
	// spent estimates the bytes written since that reading (spend), so
	// that a burst of writes between two readings is refused in time
	// instead of running into ENOSPC.
	spent atomic.Int64
	low   atomic.Bool // free < min

	poke chan struct{} // asks for a reading now
	stop chan struct{}
	done chan struct{}

	startFree uint64     // the reading of a startRoom that found no room
	checkMu   sync.Mutex // serializes check; taken before mu (lock order: doc.go)
	noReserve bool       // fallocate failed once; under checkMu
	mu        sync.Mutex
	resumed   chan struct{} // closed when the disk leaves the low state

	// ro is the refusal of every write after a read-only start
	// (readonly.go); set by startReadOnly before run, nil otherwise.
	ro error
}

// errNoStatfs: this platform cannot read the free space (not Linux).
var errNoStatfs = errors.New("free disk space is read on Linux only")

func newDiskGuard(dir string, minBytes uint64, log *slog.Logger, statfs func(string) (uint64, error)) *diskGuard {
	reserve := min(minBytes/2, maxReserve)
	if statfs == nil {
		statfs = statfsFree
	} else {
		// A replaced reading (tests) knows nothing of a real reserve file.
		reserve = 0
	}
	g := &diskGuard{dir: dir, min: minBytes, reserve: reserve, statfs: statfs, log: log,
		poke: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		resumed: make(chan struct{})}
	if _, err := statfs(dir); errors.Is(err, errNoStatfs) && minBytes > 0 {
		log.Warn("store.minFreeMB is not enforced on this platform", "err", err)
		g.min, g.reserve = 0, 0
	}
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
	free = g.adjustReserve(free)
	g.spent.Store(0)
	g.free.Store(free)
	low := free < g.min
	if g.low.Swap(low) == low {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case low:
		g.resumed = make(chan struct{})
		g.log.Error("disk almost full: refusing pub, delay and create (reads, subscriptions, deletes and replication to slaves go on) until space returns",
			"freeMiB", free>>20, "key", "store.minFreeMB", "minFreeMiB", g.min>>20, "dir", g.dir)
	case g.ro != nil:
		close(g.resumed)
		g.log.Warn("disk space is back above store.minFreeMB, but this server started read-only: restart it to resume writes",
			"freeMiB", free>>20, "minFreeMiB", g.min>>20)
	default:
		close(g.resumed)
		g.log.Info("disk space is back above store.minFreeMB: writes resume",
			"freeMiB", free>>20, "minFreeMiB", g.min>>20)
	}
}

// spend records n bytes about to be written (an estimate: the records go
// to the binlog and to the topic file).
func (g *diskGuard) spend(n int) {
	if g.min > 0 {
		g.spent.Add(int64(n))
	}
}

// estimate is the last reading minus what was written since.
func (g *diskGuard) estimate() uint64 {
	free, spent := g.free.Load(), g.spent.Load()
	if spent <= 0 {
		return free
	}
	if uint64(spent) >= free {
		return 0
	}
	return free - uint64(spent)
}

// refusal returns the error of a write refused for lack of space, nil when
// there is enough.
func (g *diskGuard) refusal() error {
	if g.ro != nil {
		return g.ro
	}
	if g.min == 0 {
		return nil
	}
	free := g.estimate()
	if !g.low.Load() {
		if free >= g.min {
			return nil
		}
		g.recheck() // the estimate crossed the watermark: read it now
	}
	return protocol.NewBizError(fmt.Sprintf("disk almost full: %d MiB free, store.minFreeMB %d", free>>20, g.min>>20))
}

// wait blocks until the disk is above the watermark or ctx ends.
func (g *diskGuard) wait(ctx context.Context) error {
	if g.ro != nil {
		return g.ro // space that returns does not make a read-only start writable
	}
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
	// FreeBytes is the space available on the data directory's filesystem
	// (0 while the guard is off: it is not read then).
	FreeBytes uint64
	// MinFreeBytes is store.minFreeMB in bytes; 0 when the guard is off.
	MinFreeBytes uint64
	// Low is true while writes are refused for lack of space.
	Low bool
	// ReadOnly is true after a read-only start on a full disk: writes are
	// refused until a restart, whatever the space (readonly.go).
	ReadOnly bool
}

// Disk returns the last reading of the free space of the data directory's
// filesystem (cheap: no syscall).
func (b *Broker) Disk() DiskState {
	return DiskState{FreeBytes: b.disk.free.Load(), MinFreeBytes: b.disk.min, Low: b.disk.low.Load(), ReadOnly: b.disk.ro != nil}
}

// diskRefusal is the error of a client write of n record bytes refused for
// lack of space; nil counts the bytes as spent.
func (b *Broker) diskRefusal(n int) error {
	if err := b.disk.refusal(); err != nil {
		return err
	}
	b.disk.spend(2 * n)
	return nil
}

// noteNoSpace asks for a fresh reading after a write failed with ENOSPC, so
// that the next writes are refused at once rather than each failing.
func (b *Broker) noteNoSpace(err error) {
	if err != nil && errors.Is(err, syscall.ENOSPC) {
		b.disk.recheck()
	}
}

// minStartFree is the free space below which Open does not open the meta
// store for writing (after giving back the reserve file, if there is one;
// it starts read-only instead, readonly.go). Badger
// writes its lock file, memtable and start-up entries through memory maps:
// on a disk with one or two free pages it died with SIGBUS at start or on
// its first flush, where a refusal says what is wrong. 1 MiB is over a
// hundred times what that start needs.
const minStartFree = 1 << 20

// ErrDiskFull refuses to open a store whose disk has less than
// minStartFree free and that cannot start read-only (readonly.go).
var ErrDiskFull = errors.New("disk full")

// startRoom is checked before the meta store opens: nil when the guard is
// off, the free space cannot be read, or there is room to start. Otherwise
// the broker tries a read-only start (readonly.go); the error is the cause
// it gives when that is not possible either.
func (g *diskGuard) startRoom() error {
	if g.min == 0 {
		return nil
	}
	free, err := g.statfs(g.dir)
	if err != nil || free >= minStartFree {
		return nil
	}
	g.startFree = free
	return fmt.Errorf("%w: %d KiB free on the filesystem of %s (after giving back %s, if there was one); the meta store writes through memory maps and needs %d KiB to open without risking SIGBUS: free some space (store.minFreeMB %d)",
		ErrDiskFull, free>>10, g.dir, ReserveFile, minStartFree>>10, g.min>>20)
}

// adjustReserve deletes the reserve file when free is below its size (the
// disk is about full: give the space to badger) and creates it when there
// is room for it above the watermark. It returns the free space after.
func (g *diskGuard) adjustReserve(free uint64) uint64 {
	if g.reserve == 0 {
		return free
	}
	path := filepath.Join(g.dir, ReserveFile)
	st, err := os.Stat(path)
	have := err == nil && st.Size() > 0
	switch {
	case have && free < g.reserve:
		if err := os.Remove(path); err != nil {
			g.log.Error("disk full: cannot delete the reserve file", "path", path, "err", err)
			return free
		}
		g.log.Warn("disk full: deleted the reserve file so that the meta store can flush and the server can stop and start",
			"path", path, "reserveMiB", st.Size()>>20, "freeMiB", free>>20)
		return free + uint64(st.Size())
	case !have && free >= g.min+g.reserve && !g.noReserve:
		if err := allocate(path, int64(g.reserve)); err != nil {
			// A filesystem without fallocate: go without the reserve.
			g.noReserve = true
			os.Remove(path)
			g.log.Warn("cannot allocate the disk reserve file; a disk filled to the last byte by another process may still stop the server",
				"path", path, "err", err)
			return free
		}
		return free - g.reserve
	}
	return free
}

// startReadOnly switches the guard to a read-only start, before run: writes
// get the refusal, and no reserve file is created (nothing is written).
func (g *diskGuard) startReadOnly() {
	g.ro = newReadOnlyError(g.startFree)
	g.reserve = 0
}
