package broker

// The writer's durability work: fsyncs by flush level (docs/protocol.md §6.4, §11),
// the background fsync of flushLevel 1, and the recovery checkpoint.

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/segment"
)

// scheduleFlush makes sure everything written so far is fsynced within
// about FlushInterval (docs/protocol.md §6.4 level 1): now if the oldest unsynced write
// is that old, else by the flush timer.
func (w *writer) scheduleFlush(now int64) error {
	if w.dur.firstDirty == 0 {
		w.dur.firstDirty = now
	}
	if now-w.dur.firstDirty >= w.b.opts.FlushInterval.Milliseconds() {
		w.startBackgroundSync()
		return nil
	}
	if !w.dur.flushArmed {
		w.dur.flushTimer.Reset(w.b.opts.FlushInterval)
		w.dur.flushArmed = true
	}
	return nil
}

// syncBinlog fsyncs the binlog and, if it changed, meta: what flushLevel 2
// makes durable before a reply.
func (w *writer) syncBinlog() error {
	start := time.Now()
	var metaErr error
	var wg sync.WaitGroup
	if w.dur.metaDirty {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.b.meta.Sync(); err != nil {
				metaErr = fmt.Errorf("%w: sync meta: %v", segment.ErrFatal, err)
			}
		}()
	}
	err := w.b.binlog.Sync()
	wg.Wait()
	if err != nil {
		return err
	}
	if metaErr != nil {
		return metaErr
	}
	w.b.opts.Metrics.ObserveFsync(time.Since(start))
	w.dur.binDirty, w.dur.metaDirty = false, false
	return nil
}

// syncAll fsyncs every file with unsynced appends, and meta when it
// changed. The fsyncs run concurrently: each costs a device flush, and
// issuing them together lets the device overlap them, which is most of the
// cost of flushLevel 2.
func (w *writer) syncAll() error {
	logs := w.dur.syncBuf[:0]
	if w.dur.binDirty {
		logs = append(logs, w.b.binlog)
	}
	for t := range w.dur.dirty {
		if t.log != nil && t.log.Unsynced() {
			logs = append(logs, t.log)
		}
	}
	w.dur.syncBuf = logs
	n := len(logs)
	if w.dur.metaDirty {
		n++
	}
	if n == 0 {
		w.dur.firstDirty = 0
		return nil
	}
	errs := w.dur.syncErrs[:0]
	for i := 0; i < n; i++ {
		errs = append(errs, nil)
	}
	w.dur.syncErrs = errs
	start := time.Now()
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = w.syncOne(i)
		}(i)
	}
	errs[0] = w.syncOne(0)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	w.b.opts.Metrics.ObserveFsync(time.Since(start))
	w.dur.binDirty, w.dur.metaDirty, w.dur.firstDirty = false, false, 0
	clear(w.dur.dirty)
	return nil
}

// syncOne fsyncs the i-th file of syncBuf, or meta past its end.
func (w *writer) syncOne(i int) error {
	if i < len(w.dur.syncBuf) {
		return w.dur.syncBuf[i].Sync()
	}
	if err := w.b.meta.Sync(); err != nil {
		return fmt.Errorf("%w: sync meta: %v", segment.ErrFatal, err)
	}
	return nil
}

// flush is the flushLevel 1 timer: everything written so far reaches disk,
// then the checkpoint moves.
func (w *writer) flush() {
	if w.life.stopped != nil {
		return
	}
	w.startBackgroundSync()
}

// bgSync is the outcome of a background fsync: everything before pos was
// durable when it finished.
type bgSync struct {
	pos segment.Position
	dur time.Duration
	err error
}

// startBackgroundSync fsyncs every file written so far on another
// goroutine, so the writer keeps appending (and replying) during the
// device flush; the checkpoint moves when it finishes. One runs at a time:
// what is written meanwhile waits for the next.
func (w *writer) startBackgroundSync() {
	if w.dur.syncing {
		return
	}
	var files []segment.File
	if w.dur.binDirty {
		if f := w.b.binlog.SyncHandle(); f != nil {
			files = append(files, f)
		}
	}
	for t := range w.dur.dirty {
		if t.log != nil {
			if f := t.log.SyncHandle(); f != nil {
				files = append(files, f)
			}
		}
	}
	syncMeta := w.dur.metaDirty
	clear(w.dur.dirty)
	w.dur.binDirty, w.dur.metaDirty, w.dur.firstDirty = false, false, 0
	pos := w.b.binlog.Position()
	if len(files) == 0 && !syncMeta {
		w.checkpointAt(w.b.opts.Now(), pos)
		return
	}
	w.dur.syncing = true
	ms := w.b.meta
	go func() {
		start := time.Now()
		errs := make([]error, len(files)+1)
		var wg sync.WaitGroup
		for i, f := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
					errs[i] = fmt.Errorf("%w: fsync: %v", segment.ErrFatal, err)
				}
			}()
		}
		if syncMeta {
			if err := ms.Sync(); err != nil {
				errs[len(files)] = fmt.Errorf("%w: sync meta: %v", segment.ErrFatal, err)
			}
		}
		wg.Wait()
		w.dur.syncDone <- bgSync{pos: pos, dur: time.Since(start), err: errors.Join(errs...)}
	}()
}

// syncFinished takes a background fsync's outcome in the writer.
func (w *writer) syncFinished(r bgSync) {
	w.dur.syncing = false
	if r.err != nil {
		w.b.opts.Metrics.Error(metrics.KindFsync)
		w.die(r.err)
		return
	}
	w.b.opts.Metrics.ObserveFsync(r.dur)
	now := w.b.opts.Now()
	w.checkpointAt(now, r.pos)
	if w.life.stopped == nil && w.dur.firstDirty != 0 && now-w.dur.firstDirty >= w.b.opts.FlushInterval.Milliseconds() {
		w.startBackgroundSync()
	}
}

// checkpoint records that everything before the binlog's current end is
// reflected in topic files and meta (and, at flush levels 1 and 2, synced).
func (w *writer) checkpoint(now int64) {
	w.checkpointAt(now, w.b.binlog.Position())
}

// checkpointAt records that everything before pos is reflected in topic
// files and meta. Its next eventId is the writer's current one: a high-water
// mark may run ahead of the data, never behind it.
func (w *writer) checkpointAt(now int64, pos segment.Position) {
	w.dur.lastCkpt = now
	if pos == w.dur.ckptPos {
		return
	}
	mb := w.b.meta.NewBatch()
	mb.SetCheckpoint(meta.Checkpoint{BinlogFileID: pos.FileID, BinlogOffset: pos.Offset, NextEventID: w.next})
	if err := w.b.meta.Commit(mb); err != nil {
		// Only costs a longer replay at the next start.
		w.b.log.Warn("checkpoint not written", "err", err)
		return
	}
	w.dur.ckptPos = pos
}

// makeDurable marks what the group appended as unsynced and makes it
// durable as the flush level asks (durability.go).
func (w *writer) makeDurable(g *groupRun) error {
	now := g.now
	w.dur.binDirty = true
	for _, tb := range w.grp.batches {
		w.dur.dirty[tb.t] = struct{}{}
		tb.t.lastUse = now
		w.touchOpen(tb.t)
	}
	switch {
	case w.grp.syncMeta:
		return w.syncAll()
	case w.b.opts.FlushLevel >= 2:
		// The reply waits for the binlog (and meta) only: the binlog is
		// the truth, and recovery rebuilds topic files from it, so they
		// are synced on the flushLevel 1 schedule. The checkpoint moves
		// only after they are, so the rebuild always covers them.
		synced := time.Now()
		if err := w.syncBinlog(); err != nil {
			return err
		}
		w.expectGroup(time.Since(synced))
		return w.scheduleFlush(now)
	case w.b.opts.FlushLevel == 1:
		return w.scheduleFlush(now)
	}
	return nil
}

// checkpointLevel0 moves the checkpoint at flushLevel 0 once per
// FlushInterval: nothing is fsynced, so the checkpoint follows the writes.
func (w *writer) checkpointLevel0(g *groupRun) error {
	if w.b.opts.FlushLevel == 0 && g.now-w.dur.lastCkpt >= w.b.opts.FlushInterval.Milliseconds() {
		w.checkpoint(g.now)
	}
	return nil
}
