package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
)

// Read-only start (issue 23): a data directory whose filesystem has less
// than minStartFree free when the server starts, with no reserve file left
// to give back, cannot open badger for writing without risking SIGBUS in
// its memory-mapped memtable. Rather than refuse to start, the broker then
// opens everything read-only and serves what is stored: subscriptions,
// topic list and info, status, metrics and replication to slaves. Every
// write is refused with readOnlyError, and nothing in the process writes a
// file: not recovery, not the writer, not positions, counts, the trash or
// the reserve file.
//
// Writes do not resume by themselves when space returns: badger cannot be
// switched from read-only to read-write in place, and every topic log is
// open as a view that the writer cannot append to. A restart runs the
// normal start-up (and recovery) and resumes writes; the guard logs when
// the space is back, and /readyz and smss_read_only say a restart is
// needed.
//
// Badger opens read-only only when no memtable log needs replaying, which a
// clean shutdown guarantees; so does smss's recovery (checkpoint at the
// binlog's end, whole topic tails). After a crash the start is refused as
// before, and the error says why.

// ErrReadOnly is wrapped by every write refused by a broker that started
// read-only on a full disk (Broker.ReadOnly).
var ErrReadOnly = errors.New("started read-only")

// readOnlyError is the refusal of a write on a read-only broker: a
// *protocol.BizError (a 400 with its text) that is also ErrReadOnly.
type readOnlyError struct{ biz *protocol.BizError }

func (e *readOnlyError) Error() string   { return e.biz.Msg }
func (e *readOnlyError) Unwrap() []error { return []error{e.biz, ErrReadOnly} }

func newReadOnlyError(free uint64) error {
	return &readOnlyError{protocol.NewBizError(fmt.Sprintf(
		"disk almost full: started read-only with %d KiB free (%d KiB are needed to open the meta store for writing); free some space and restart the server to resume writes",
		free>>10, minStartFree>>10))}
}

// ReadOnly returns the refusal every write gets when the broker started
// read-only on a full disk, nil when it accepts writes. It never changes
// while the broker is open: only a restart leaves read-only mode.
func (b *Broker) ReadOnly() error {
	if b.disk == nil {
		return nil // a Broker of Rewind, which has no guard
	}
	return b.disk.ro
}

// ErrNotClean is wrapped by the error of a read-only start that finds
// recovery work to do: a read-only broker cannot do it.
var ErrNotClean = errors.New("the previous run did not shut down cleanly")

// recoverReadOnly is recover for a read-only start: it checks, without
// writing, that the data directory is as a clean shutdown leaves it (the
// checkpoint at the end of the binlog, whole topic tails that the binlog
// accounts for) and returns the next eventId. Anything recover would have
// to write (replay blocks after the checkpoint, cut a torn tail) refuses
// the start with an error wrapping ErrNotClean: serving a part of the data
// would hide acknowledged messages that the replay restores.
func (b *Broker) recoverReadOnly() (int64, error) {
	ckpt, hasCkpt, err := b.loadTopics()
	if err != nil {
		return 0, err
	}
	from, err := b.replayStart(ckpt, hasCkpt)
	if err != nil {
		return 0, err
	}
	blocks := 0
	at, err := b.binlog.Scan(from, func(segment.Position, int64, int64, []byte) error {
		blocks++
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w: the binlog has a torn or damaged tail at %s that recovery must cut: %v", ErrNotClean, at, err)
	}
	if blocks > 0 {
		return 0, fmt.Errorf("%w: %d binlog blocks after the checkpoint (%s) must be replayed into topic files and meta", ErrNotClean, blocks, from)
	}
	binLast, _, err := lastBlock(b.binlog)
	if err != nil {
		return 0, fmt.Errorf("binlog: %w", err)
	}
	names := make([]string, 0, len(b.topics))
	for name := range b.topics {
		names = append(names, name)
	}
	sort.Strings(names)
	next := max(ckpt.NextEventID, binLast+1, 1)
	for _, name := range names {
		t := b.topics[name]
		if !b.IsSlave() {
			next = max(next, t.meta.CreateEventID+1) // as recover: a master never reuses an id
		}
		if _, err := os.Stat(t.dir); errors.Is(err, fs.ErrNotExist) {
			// Created by the original server and never written: no
			// messages to check (recover would create the directory).
			continue
		}
		l, err := b.topicLog(t)
		if err != nil {
			return 0, fmt.Errorf("topic %s: %w", name, err)
		}
		var last int64
		at, err := l.ScanTail(func(_ segment.Position, _, l int64, _ []byte) error {
			last = l
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("%w: topic %s has a torn or damaged tail at %s that recovery must cut: %v", ErrNotClean, name, at, err)
		}
		if last > binLast {
			return 0, fmt.Errorf("%w: topic %s holds eventId %d, after the binlog's last %d: recovery must cut it", ErrNotClean, name, last, binLast)
		}
		next = max(next, last+1)
	}
	return next, nil
}

// refuseReadOnly answers every command of group but opOpenLog (which only
// opens a topic's log for a reader) with the read-only refusal. It reports
// whether it did, i.e. whether the broker is read-only.
func (w *writer) refuseReadOnly(group []*command) bool {
	ro := w.b.ReadOnly()
	if ro == nil {
		return false
	}
	for _, c := range group {
		c.err = ro
		if c.op == opOpenLog {
			c.err = nil
			if t := w.b.topics[c.topic]; t != nil {
				_, c.err = w.b.topicLog(t)
			}
		}
		c.done <- struct{}{}
	}
	return true
}

// openReadOnly is the rest of Open for a read-only start, after meta
// opened read-only: the same steps minus everything that writes (the
// directories, the role, recovery's repairs, the positions' flusher, the
// trash). noRoom is the free-space finding that caused it.
func (b *Broker) openReadOnly(noRoom error) error {
	b.slave.Store(b.opts.Slave)
	epoch, err := b.meta.Epoch()
	if err != nil {
		return fmt.Errorf("broker: read promotion epoch: %w", err)
	}
	b.epoch.Store(epoch)
	if err := b.loadEpochStarts(); err != nil {
		return err
	}
	b.binlog, err = segment.Open(segment.Options{Dir: filepath.Join(b.opts.Dir, "binlog"), MaxFileSize: b.opts.MaxLogSize,
		Decode: decodeBinlog, Logger: b.log, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("broker: %w; a read-only start failed too: open binlog: %v", noRoom, err)
	}
	next, err := b.recoverReadOnly()
	if err != nil {
		return fmt.Errorf("broker: %w; a read-only start failed too: %w (free some space and restart: recovery writes)", noRoom, err)
	}
	b.lastID.Store(next - 1)
	b.initCursors()
	if err := b.loadCursors(); err != nil {
		b.log.Error("stored positions could not be read; subscribers resuming with -1 start from their default", "err", err)
	}
	b.w = newWriter(b, next)
	b.rebuildDedupe(&b.w.dd)
	go b.w.run()
	if b.cursorsOn() {
		go b.runCursorFlusher() // writes nothing here (flushCursors); Close waits for it
	}
	b.startCounts()
	b.log.Error("STARTED READ-ONLY: the data directory's disk is almost full; subscriptions, topic list and info, status, metrics and replication to slaves are served, every write is refused; free some space and restart to resume writes",
		"cause", noRoom, "nextEventId", next, "topics", len(b.topics))
	return nil
}
