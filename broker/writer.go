package broker

import (
	"container/list"
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
// writer that reads and writes it. A group commit is the sequence of
// stages in groupStages (pipeline.go).
type writer struct {
	b    *Broker
	next int64 // next eventId

	grp   groupBuf     // the group being committed: its commands and staged bytes (stage.go, writer.go)
	cur   groupRun     // the group commit's progress through its stages (pipeline.go)
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
	post     []func()        // in-memory effects of stage "effects" (pipeline.go)
	syncMeta bool            // the group must make meta durable before post actions
	applied  map[string]bool // delay keys applied in this group
	topicEnc topicblock.RunEncoder
	wakes    []chan struct{} // readers to wake at stage "wake"
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
