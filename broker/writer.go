package broker

import (
	"container/list"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// idleFDAfter is how long a topic's file may stay open without appends.
const idleFDAfter = 60 * time.Second

// writer performs every mutation. One goroutine at a time runs it: the one
// holding its token (lead.go); every field below except the two counters at
// the end belongs to that goroutine, and is grouped by the part of the
// writer that reads and writes it.
type writer struct {
	b    *Broker
	next int64 // next eventId

	grp   groupBuf     // the group being committed: its commands and staged bytes (stage.go, writer.go)
	dd    dedupeState  // the message id window (dedupe.go)
	gw    groupWait    // the flushLevel 2 group wait (group.go)
	dur   durability   // what is written but not yet synced or checkpointed (durability.go)
	files openFiles    // the topic files held open (lru.go, writer.onIdle)
	life  writerStatus // the drain and the fatal stop (lead.go, writer.die)

	// Counters for tests, read from any goroutine.
	waits   atomic.Int64 // group waits that ran (group.go)
	gathers atomic.Int64 // leaders that gathered (group.go)
}

// groupBuf is the per-group scratch of the writer, reset by writer.reset
// at the start of each group and reused.
type groupBuf struct {
	group    []*command // collected (group.go)
	ok       []*command // staged without error: the ones apply writes
	binBuf   []byte
	binMarks []segment.Mark
	batches  []*topicBatch
	batchOf  map[*topic]*topicBatch
	spare    []*topicBatch
	mb       *meta.Batch
	pre      []fsAction      // file-system steps done before the binlog append, with their undo
	post     []func()        // in-memory effects run once the group is visible (commit)
	syncMeta bool            // the group must make meta durable before post actions
	applied  map[string]bool // delay keys applied in this group
	topicEnc topicblock.RunEncoder
	wakes    []chan struct{} // readers of this group's commits (commit)
	// notify holds the committed topics that have commit hooks, for the
	// leader to call once it handed the token on (lead, subinline.go).
	notify []*topic
}

// groupWait is the flushLevel 2 group wait (Options.GroupWait): commands
// expected for the next group, when that expectation was formed, the last
// binlog fsync's duration, and the timer of the wait.
type groupWait struct {
	expect    int
	expectAt  time.Time
	lastSync  time.Duration
	waitTimer *time.Timer
}

// durability is what the writer appended and has not yet made durable or
// checkpointed (durability.go).
type durability struct {
	dirty      map[*topic]struct{} // topics with unsynced appends
	binDirty   bool
	metaDirty  bool
	firstDirty int64 // ms of the oldest unsynced group, 0 if none
	flushTimer *time.Timer
	flushArmed bool
	syncing    bool        // a background fsync is running
	syncDone   chan bgSync // its outcome
	lastCkpt   int64
	ckptPos    segment.Position
	syncBuf    []*segment.Log // syncAll's scratch
	syncErrs   []error
}

// openFiles orders the topics whose current file the writer holds open,
// most recently appended first (lru.go), and paces the idle scan that
// closes the ones unused for idleFDAfter (writer.onIdle).
type openFiles struct {
	lru          list.List
	lastIdleScan int64
	idleWakes    int
}

// writerStatus is whether the writer still takes writes.
type writerStatus struct {
	final   bool  // the drain ran: the token stays taken (lead.go)
	stopped error // the fatal storage error that stopped the writer (die)
}

type topicBatch struct {
	t     *topic
	log   *segment.Log
	buf   []byte
	marks []segment.Mark
	start segment.Position
}

// fsAction is a file-system step of a group with its undo.
type fsAction struct {
	do, undo func() error
}

func newWriter(b *Broker, next int64) *writer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &writer{
		b: b, next: next,
		grp: groupBuf{batchOf: map[*topic]*topicBatch{}, mb: b.meta.NewBatch(), applied: map[string]bool{}},
		dur: durability{dirty: map[*topic]struct{}{}, flushTimer: t, ckptPos: b.binlog.Position(), syncDone: make(chan bgSync, 1)},
		dd:  dedupeState{window: b.opts.DedupeWindow.Milliseconds(), max: b.opts.DedupeMaxIDs},
	}
}

// run is the writer goroutine: it turns the flush timer, the end of a
// background fsync, the idle timer and Close into commands queued like any
// other (lead.go), so they run with the token held.
func (w *writer) run() {
	defer close(w.b.life.done)
	idle := time.NewTimer(w.b.opts.IdleWake)
	defer idle.Stop()
	for {
		select {
		case <-w.dur.flushTimer.C:
			w.b.runJob(opFlush, bgSync{})
		case r := <-w.dur.syncDone:
			w.b.runJob(opSynced, r)
		case <-idle.C:
			w.b.runJob(opIdle, bgSync{})
			idle.Reset(w.b.opts.IdleWake)
		case <-w.b.life.stop:
			// Queued after Close refused new commands, so it runs after
			// everything already queued; its leader then keeps the token.
			w.b.runJob(opDrain, bgSync{})
			return
		}
	}
}

// job runs one of the writer goroutine's commands (run).
func (w *writer) job(c *command) {
	switch c.op {
	case opFlush:
		w.dur.flushArmed = false
		w.flush()
	case opSynced:
		w.syncFinished(c.synced)
	case opIdle:
		w.onIdle()
	case opDrain:
		w.life.final = true
	}
}

func (w *writer) process(group []*command) {
	if c := group[0]; c.op.job() { // exclusive: alone in its group
		w.job(c)
		c.done <- struct{}{}
		return
	}
	now := w.b.opts.Now()
	if w.life.stopped != nil {
		for _, c := range group {
			c.err = fmt.Errorf("%w: %v", ErrStopped, w.life.stopped)
			c.done <- struct{}{}
		}
		return
	}
	if w.refuseReadOnly(group) {
		return
	}
	binStart := w.b.binlog.Position()
	nextBefore := w.next
	w.dd.from = w.next
	w.reset()
	for _, c := range group {
		var err error
		switch c.op {
		case opPub:
			err = w.stagePub(c, now, binStart)
		case opCreate:
			err = w.stageCreate(c, now)
		case opDelete:
			err = w.stageDelete(c, now)
		case opDelay:
			err = w.stageDelay(c, now)
		case opDelayApply:
			err = w.stageDelayApply(c, now, binStart)
		case opReplicated:
			err = w.stageReplicated(c, now, binStart)
		case opSyncTopic:
			err = w.stageSyncTopic(c)
		case opCursorSnapshot:
			err = w.stageCursorSnapshot(c, now, binStart)
		case opOpenLog:
			if t := w.b.topics[c.topic]; t != nil {
				_, err = w.b.topicLog(t)
			}
			c.err = err
			continue
		case opPromote:
			c.err = w.promote(c)
			continue
		case opEpoch:
			c.err = w.learnEpoch(c)
			continue
		default:
			err = fmt.Errorf("broker: command %v is not a writer command", c.op)
		}
		if err != nil {
			c.err = err
			continue
		}
		if c.dup {
			continue // answered by the dedupe window (dedupe.go)
		}
		w.grp.ok = append(w.grp.ok, c)
	}
	m := w.b.opts.Metrics
	committed := false
	if len(w.grp.ok) > 0 && (len(w.grp.binBuf) > 0 || !w.grp.mb.Empty()) {
		if err := w.apply(binStart); err != nil {
			m.Error(metrics.KindStorage)
			err = w.b.descriptorRefusal(err)
			for _, c := range w.grp.ok {
				c.err, c.eventID = err, 0
			}
			if w.b.IsSlave() {
				// A slave's eventIds are the master's: the same blocks
				// must be accepted again when they are resent.
				w.next = nextBefore
			}
			if errors.Is(err, segment.ErrFatal) {
				w.die(err)
			}
		} else if err := w.commit(now); err != nil {
			// The data is in the files but its durability is unknown:
			// nobody may be told it was stored.
			m.Error(metrics.KindFsync)
			for _, c := range w.grp.ok {
				c.err, c.eventID = err, 0
			}
			w.die(err)
		} else {
			committed = true
			if m != nil {
				w.record(m)
			}
			// After the group's own outcome is settled: closing another
			// topic's file fsyncs it, and a failure there is fatal.
			if err := w.evictOpen(); err != nil {
				w.die(err)
			}
		}
	}
	if len(w.dd.pend) > 0 || len(w.dd.dups) > 0 {
		w.dd.settle(committed, now)
		w.publishDedupeSize()
	}
	for _, c := range group {
		if c.err != nil && c.op == opDelayApply {
			m.Error(metrics.KindDelay)
		}
		c.done <- struct{}{}
	}
	// Whatever commit did or failed to do after committing, the readers
	// of what it committed must be woken (commit).
	for i, ch := range w.grp.wakes {
		close(ch)
		w.grp.wakes[i] = nil
	}
	w.grp.wakes = w.grp.wakes[:0]
}

// record counts a committed group in m. It reads only what the commands
// already hold (eventIds, counts, record slices), so it allocates nothing.
// Pubs and replicated blocks are counted by their submitters (Publish,
// ApplyReplicated), off this goroutine, which every write waits for.
func (w *writer) record(m *metrics.Metrics) {
	m.ObserveGroup(len(w.grp.ok), len(w.grp.binBuf))
	for _, c := range w.grp.ok {
		switch c.op {
		case opDelayApply:
			if c.eventID != 0 { // 0: the key was gone or its topic was
				recs := c.records[binlog.DelayPrefixLen:]
				n, _ := protocol.CountRecords(recs, 0) // validated when staged
				m.Published(c.topic, n, len(recs))
			}
		case opDelete:
			if c.eventID != 0 {
				m.TopicDeleted(c.topic)
			}
		case opReplicated:
			if c.replCmd == binlog.CmdDelete {
				m.TopicDeleted(c.topic)
			}
		}
	}
}

func (w *writer) reset() {
	w.grp.ok = w.grp.ok[:0]
	w.grp.binBuf = w.grp.binBuf[:0]
	w.grp.binMarks = w.grp.binMarks[:0]
	for _, tb := range w.grp.batches {
		delete(w.grp.batchOf, tb.t)
		tb.t, tb.log, tb.buf, tb.marks = nil, nil, tb.buf[:0], tb.marks[:0]
		w.grp.spare = append(w.grp.spare, tb)
	}
	w.grp.batches = w.grp.batches[:0]
	w.grp.mb.Reset()
	w.grp.pre = w.grp.pre[:0]
	w.grp.post = w.grp.post[:0]
	clear(w.grp.applied)
	w.grp.syncMeta = false
}

func (w *writer) batchFor(t *topic, l *segment.Log) *topicBatch {
	if tb := w.grp.batchOf[t]; tb != nil {
		return tb
	}
	var tb *topicBatch
	if n := len(w.grp.spare); n > 0 {
		tb, w.grp.spare = w.grp.spare[n-1], w.grp.spare[:n-1]
	} else {
		tb = &topicBatch{}
	}
	tb.t, tb.log = t, l
	w.grp.batchOf[t] = tb
	w.grp.batches = append(w.grp.batches, tb)
	return tb
}

func (w *writer) appendBinlog(blk *binlog.Block) int64 {
	off := int64(len(w.grp.binBuf))
	w.grp.binMarks = append(w.grp.binMarks, segment.Mark{EventID: blk.EventID, Off: off})
	w.grp.binBuf = binlog.AppendBlock(w.grp.binBuf, blk)
	return off
}

// appendTopicBlocks stages one topic block per record (docs/protocol.md §5.6).
func (w *writer) appendTopicBlocks(tb *topicBatch, firstID, now int64, src segment.Position, records []byte) {
	w.grp.topicEnc.Reset(now, now, src.FileID, src.Offset)
	for i := 0; len(records) > 0; i++ {
		var rec []byte
		rec, records = protocol.NextRecord(records)
		id := firstID + int64(i)
		tb.marks = append(tb.marks, segment.Mark{EventID: id, Off: int64(len(tb.buf))})
		tb.buf = w.grp.topicEnc.Append(tb.buf, id, i, rec)
	}
}

// apply performs the staged group: file-system steps, one binlog write, one
// write per topic, one meta transaction. On failure everything done is
// undone; an undo that fails is fatal.
func (w *writer) apply(binStart segment.Position) error {
	for i, a := range w.grp.pre {
		if err := a.do(); err != nil {
			return w.undoPre(i, err)
		}
	}
	if len(w.grp.binBuf) > 0 {
		if _, err := w.b.binlog.Append(w.grp.binBuf, w.grp.binMarks); err != nil {
			return w.undoPre(len(w.grp.pre), fmt.Errorf("append binlog: %w", err))
		}
	}
	for i, tb := range w.grp.batches {
		tb.start = tb.log.Position()
		if _, err := tb.log.Append(tb.buf, tb.marks); err != nil {
			return w.rollback(i, binStart, fmt.Errorf("append topic %s: %w", tb.t.meta.Name, err))
		}
	}
	if !w.grp.mb.Empty() {
		if err := w.b.meta.Commit(w.grp.mb); err != nil {
			return w.rollback(len(w.grp.batches), binStart, fmt.Errorf("commit meta: %w", err))
		}
		w.dur.metaDirty = true
	}
	return nil
}

func (w *writer) rollback(topics int, binStart segment.Position, cause error) error {
	for _, tb := range w.grp.batches[:topics] {
		if err := tb.log.Truncate(tb.start); err != nil {
			return fmt.Errorf("%w; rollback: %w", cause, err)
		}
	}
	if len(w.grp.binBuf) > 0 {
		if err := w.b.binlog.Truncate(binStart); err != nil {
			return fmt.Errorf("%w; rollback: %w", cause, err)
		}
	}
	return w.undoPre(len(w.grp.pre), cause)
}

func (w *writer) undoPre(n int, cause error) error {
	for i := n - 1; i >= 0; i-- {
		if err := w.grp.pre[i].undo(); err != nil {
			w.b.log.Error("undo of a failed group step failed", "err", err, "cause", cause)
		}
	}
	w.b.log.Warn("write group rolled back", "err", cause)
	return cause
}

// commit makes a successfully applied group durable as the flush level
// asks, visible to readers, and then performs its in-memory effects.
func (w *writer) commit(now int64) error {
	w.dur.binDirty = true
	for _, tb := range w.grp.batches {
		w.dur.dirty[tb.t] = struct{}{}
		tb.t.lastUse = now
		w.touchOpen(tb.t)
	}
	switch {
	case w.grp.syncMeta:
		if err := w.syncAll(); err != nil {
			return err
		}
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
		if err := w.scheduleFlush(now); err != nil {
			return err
		}
	case w.b.opts.FlushLevel == 1:
		if err := w.scheduleFlush(now); err != nil {
			return err
		}
	}
	// Readers are woken after the submitters (process): the goroutine
	// made runnable last runs first on this P, so a live subscriber's
	// delivery goes ahead of the publisher's reply instead of behind it
	// (e2e p50 4–7 % lower at 1,000 msg/s, BENCHMARKS.md).
	w.grp.wakes = append(w.grp.wakes, w.b.binlog.CommitQuiet())
	for _, tb := range w.grp.batches {
		// The topic's message count for TopicStats (package msgcount), a
		// few atomic integer operations, then the group visible to the
		// topic's readers: counted first, a count never lags them.
		tb.t.count.Add(tb.start, int64(len(tb.buf)), tb.marks)
		w.grp.wakes = append(w.grp.wakes, tb.log.CommitQuiet())
		if tb.t.hooks.Load() != nil {
			w.grp.notify = append(w.grp.notify, tb.t)
		}
	}
	w.b.lastID.Store(w.next - 1)
	for _, f := range w.grp.post {
		f()
	}
	if w.b.binlog.Full() {
		if err := w.b.binlog.Roll(); err != nil {
			return err
		}
	}
	for _, tb := range w.grp.batches {
		if tb.log.Full() {
			if err := tb.log.Roll(); err != nil {
				return err
			}
		}
	}
	if w.b.opts.FlushLevel == 0 && now-w.dur.lastCkpt >= w.b.opts.FlushInterval.Milliseconds() {
		w.checkpoint(now)
	}
	return nil
}

func (w *writer) onIdle() {
	w.files.idleWakes++
	if n := w.b.opts.IdleLogSample; n > 0 && w.files.idleWakes%n == 0 {
		w.b.log.Debug("writer idle", "wakes", w.files.idleWakes, "nextEventId", w.next)
	}
	if w.life.stopped != nil {
		return
	}
	now := w.b.opts.Now()
	if w.dd.live > 0 {
		// Expired ids leave the window even when nothing is published.
		w.dd.evict(now)
		w.publishDedupeSize()
	}
	if w.b.opts.FlushLevel == 0 && w.dur.ckptPos != w.b.binlog.Position() {
		w.checkpoint(now)
	}
	if now-w.files.lastIdleScan < idleFDAfter.Milliseconds() {
		return
	}
	w.files.lastIdleScan = now
	for _, t := range w.b.topics {
		if t.log != nil && now-t.lastUse > idleFDAfter.Milliseconds() {
			if err := t.log.CloseIdle(); err != nil {
				w.die(err)
				return
			}
			delete(w.dur.dirty, t)
			w.forgetOpen(t)
		}
	}
}

// die stops the writer for good after a storage failure whose outcome is
// unknown (docs/protocol.md §11: never continue past a failed fsync).
func (w *writer) die(err error) {
	if w.life.stopped != nil {
		return
	}
	w.life.stopped = err
	w.b.stats.fatal.Store(&err)
	w.b.log.Error("writer stopped: fatal storage error", "err", err)
	select {
	case w.b.life.fatal <- err:
	default:
	}
}

// shutdown runs after the writer loop ended: sync, checkpoint, close files.
func (w *writer) shutdown() error {
	var first error
	if w.dur.syncing {
		w.syncFinished(<-w.dur.syncDone)
	}
	if w.life.stopped == nil && w.b.ReadOnly() == nil { // read-only: nothing to sync, no checkpoint to write
		if err := w.syncAll(); err != nil {
			first = err
		} else {
			w.checkpoint(w.b.opts.Now())
			if err := w.b.meta.Sync(); err != nil {
				first = err
			}
		}
	}
	if err := w.b.binlog.Close(); err != nil && first == nil {
		first = err
	}
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	for _, t := range w.b.topics {
		if t.log != nil {
			if err := t.log.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	if first == nil {
		first = w.life.stopped
	}
	return first
}
