package broker

// A group commit as a fixed sequence of named stages.
//
// writer.process admits a group (jobs, a stopped writer and a read-only
// broker answer it at once: admit), then runs groupStages in their order.
// Every stage is a method of writer; the table says which groups run it
// and, for the write stages, how it is taken back. The features that take
// part in a group commit do so at these stages, nowhere else:
//
//   - dedupe (dedupe.go): each command's id is checked and entered while it
//     is staged (stagePub, stageDelay, stageReplicated: "stage"); the
//     window keeps or drops the group's ids by its outcome ("dedupe").
//   - stored positions (cursor.go): a pub to __cursors applies its records
//     to the table once visible (a post action, "effects"); a snapshot
//     makes meta durable first (syncMeta, "durable").
//   - message counts (package msgcount): counted per topic just before the
//     topic's readers see the group ("visible").
//   - commit hooks of inline subscribers (subinline.go): the topics are
//     noted at "visible" and called by the leader once it handed the token
//     on (lead).
//   - replication: replica streams read the binlog, woken at "wake"; slave
//     confirmations are waited for by the caller after the reply (package
//     replication), not by the writer. With ReplicateBeforeSync a master's
//     binlog is published to them at "replicate", before "durable", and
//     the durable hook (SetDurableHook) learns at "visible" how far the
//     master's own copy is synced.
//   - metrics: "metrics", for a committed group.
//
// A new stage is one function and one row here (and the list in doc.go).

import (
	"errors"
	"fmt"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/segment"
)

// groupRun is the state of one group commit, handed from stage to stage.
type groupRun struct {
	group      []*command
	now        int64
	binStart   segment.Position // the binlog's end before the group
	nextBefore int64            // the eventId counter before the group

	writes bool // "stage" left something to write: the later stages run
	failed bool // a write or applied stage failed: the group did not commit

	// Progress of the write stages, for their undo (rollback).
	preDone     int   // file-system steps done ("fs")
	binAppended bool  // the binlog append happened ("binlog")
	topicsDone  int   // topic batches appended ("topics")
	cause       error // the failure being rolled back

	replicated bool // "replicate" committed the binlog already
}

// committed reports whether every write and applied stage of the group
// succeeded: it is in the files, durable as the flush level asks, and
// visible.
func (g *groupRun) committed() bool { return g.writes && !g.failed }

// stageWhen says which groups run a stage.
type stageWhen uint8

const (
	// every group that was admitted, whatever its outcome.
	always stageWhen = iota
	// a group that staged something to write (groupRun.writes). A
	// failure takes back this stage and the write stages before it (undo,
	// in reverse order) and fails the group's commands.
	onWrite
	// a group whose write stages all succeeded. A failure is fatal: the
	// group is in the files, its durability unknown (die).
	onApplied
	// a committed group (groupRun.committed). A failure is fatal but the
	// group's commands keep their success: their outcome was settled
	// before.
	onCommitted
)

// groupStage is one named step of a group commit.
type groupStage struct {
	name string
	when stageWhen
	run  func(w *writer, g *groupRun) error
	// undo takes back what run did, as far as it got (onWrite only).
	undo func(w *writer, g *groupRun) error
}

// groupStages is a group commit, in order.
var groupStages = [...]groupStage{
	{name: "stage", when: always, run: (*writer).stageGroup},                                      // stage.go: validate, assign eventIds, buffer blocks
	{name: "fs", when: onWrite, run: (*writer).applyFS, undo: (*writer).undoFS},                   // topic directories made or moved
	{name: "binlog", when: onWrite, run: (*writer).appendBinlogGroup, undo: (*writer).undoBinlog}, // one binlog write
	{name: "topics", when: onWrite, run: (*writer).appendTopics, undo: (*writer).undoTopics},      // one write per topic
	{name: "meta", when: onWrite, run: (*writer).commitMetaGroup},                                 // one meta transaction
	{name: "replicate", when: onApplied, run: (*writer).replicateEarly},                           // flushLevel 2 + semi-sync: replica streams before the fsync
	{name: "durable", when: onApplied, run: (*writer).makeDurable},                                // durability.go: fsync by flushLevel
	{name: "visible", when: onApplied, run: (*writer).makeVisible},                                // readers may see the group
	{name: "effects", when: onApplied, run: (*writer).runEffects},                                 // the staged in-memory effects
	{name: "roll", when: onApplied, run: (*writer).rollFull},                                      // full files rolled
	{name: "checkpoint", when: onApplied, run: (*writer).checkpointLevel0},                        // durability.go
	{name: "metrics", when: onCommitted, run: (*writer).recordGroup},                              // metrics.Metrics
	{name: "evict", when: onCommitted, run: (*writer).evictGroup},                                 // lru.go: store.maxOpenTopics
	{name: "dedupe", when: always, run: (*writer).settleDedupe},                                   // dedupe.go: the window by outcome
	{name: "reply", when: always, run: (*writer).reply},                                           // submitters woken
	{name: "wake", when: always, run: (*writer).wakeReaders},                                      // readers woken
}

// process runs one group commit: admit, then groupStages.
func (w *writer) process(group []*command) {
	if w.admit(group) {
		return
	}
	// In the writer, not on the stack: handed to the stages through
	// function values, it would escape, one allocation per group.
	g := &w.cur
	*g = groupRun{group: group, now: w.b.opts.Now(), binStart: w.b.binlog.Position(), nextBefore: w.next}
	for i := range groupStages {
		s := &groupStages[i]
		if s.when != always && (!g.writes || g.failed) {
			continue
		}
		err := s.run(w, g)
		if err == nil {
			continue
		}
		switch s.when {
		case onWrite:
			g.failed = true
			w.failWrite(w.rollback(i, g, err), g)
		case onApplied:
			// The data is in the files but its durability is unknown:
			// nobody may be told it was stored.
			g.failed = true
			w.b.opts.Metrics.Error(metrics.KindFsync)
			for _, c := range w.grp.ok {
				c.err, c.eventID = err, 0
			}
			w.die(err)
		default:
			w.die(err)
		}
	}
}

// admit answers, without staging them, the groups the writer does not
// commit: one of the writer goroutine's own jobs (alone in its group), and
// every group while the writer is stopped or the broker read-only. It
// reports whether it answered the group.
func (w *writer) admit(group []*command) bool {
	if c := group[0]; c.op.job() { // exclusive: alone in its group
		w.job(c)
		c.done <- struct{}{}
		return true
	}
	if w.life.stopped != nil {
		for _, c := range group {
			c.err = fmt.Errorf("%w: %v", ErrStopped, w.life.stopped)
			c.done <- struct{}{}
		}
		return true
	}
	return w.refuseReadOnly(group)
}

// failWrite fails the commands of a group whose write stages were rolled
// back.
func (w *writer) failWrite(err error, g *groupRun) {
	w.b.opts.Metrics.Error(metrics.KindStorage)
	err = w.b.descriptorRefusal(err)
	for _, c := range w.grp.ok {
		c.err, c.eventID = err, 0
	}
	if w.b.IsSlave() {
		// A slave's eventIds are the master's: the same blocks must be
		// accepted again when they are resent.
		w.next = g.nextBefore
	}
	if errors.Is(err, segment.ErrFatal) {
		w.die(err)
	}
}

// rollback takes back the write stages up to and including failed, in
// reverse order, after failed returned cause. An undo that fails ends the
// rollback: the group's files are then in an unknown state, which the
// returned error says (and which is fatal when it wraps segment.ErrFatal).
func (w *writer) rollback(failed int, g *groupRun, cause error) error {
	g.cause = cause
	for i := failed; i >= 0; i-- {
		if u := groupStages[i].undo; u != nil {
			if err := u(w, g); err != nil {
				return fmt.Errorf("%w; rollback: %w", cause, err)
			}
		}
	}
	w.b.log.Warn("write group rolled back", "err", cause)
	return cause
}

// reset empties the group's buffers for the next group.
func (w *writer) reset() {
	gb := &w.grp
	gb.ok = gb.ok[:0]
	gb.binBuf = gb.binBuf[:0]
	gb.binMarks = gb.binMarks[:0]
	for _, tb := range gb.batches {
		delete(gb.batchOf, tb.t)
		tb.t, tb.log, tb.buf, tb.marks = nil, nil, tb.buf[:0], tb.marks[:0]
		gb.spare = append(gb.spare, tb)
	}
	gb.batches = gb.batches[:0]
	gb.mb.Reset()
	gb.pre = gb.pre[:0]
	gb.post = gb.post[:0]
	clear(gb.applied)
	gb.syncMeta = false
}

// applyFS performs the group's file-system steps (topic directories).
func (w *writer) applyFS(g *groupRun) error {
	for _, a := range w.grp.pre {
		if err := a.do(); err != nil {
			return err
		}
		g.preDone++
	}
	return nil
}

// undoFS undoes the file-system steps done, newest first. A failed undo is
// logged, not returned: the directory stays as an orphan that the next
// create of its name moves away (freshDir).
func (w *writer) undoFS(g *groupRun) error {
	for i := g.preDone - 1; i >= 0; i-- {
		if err := w.grp.pre[i].undo(); err != nil {
			w.b.log.Error("undo of a failed group step failed", "err", err, "cause", g.cause)
		}
	}
	return nil
}

func (w *writer) appendBinlogGroup(g *groupRun) error {
	if len(w.grp.binBuf) == 0 {
		return nil
	}
	if _, err := w.b.binlog.Append(w.grp.binBuf, w.grp.binMarks); err != nil {
		return fmt.Errorf("append binlog: %w", err)
	}
	g.binAppended = true
	return nil
}

func (w *writer) undoBinlog(g *groupRun) error {
	if !g.binAppended {
		return nil
	}
	return w.b.binlog.Truncate(g.binStart)
}

func (w *writer) appendTopics(g *groupRun) error {
	for _, tb := range w.grp.batches {
		tb.start = tb.log.Position()
		if _, err := tb.log.Append(tb.buf, tb.marks); err != nil {
			return fmt.Errorf("append topic %s: %w", tb.t.meta.Name, err)
		}
		g.topicsDone++
	}
	return nil
}

func (w *writer) undoTopics(g *groupRun) error {
	for _, tb := range w.grp.batches[:g.topicsDone] {
		if err := tb.log.Truncate(tb.start); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) commitMetaGroup(*groupRun) error {
	if w.grp.mb.Empty() {
		return nil
	}
	if err := w.b.meta.Commit(w.grp.mb); err != nil {
		return fmt.Errorf("commit meta: %w", err)
	}
	w.dur.metaDirty = true
	return nil
}

// makeVisible lets readers see the group: the binlog's readers (replica
// streams among them), then each topic's, after its message count.
// Readers are woken after the submitters (wakeReaders): the goroutine made
// runnable last runs first on this P, so a live subscriber's delivery goes
// ahead of the publisher's reply instead of behind it (e2e p50 4–7 % lower
// at 1,000 msg/s, BENCHMARKS.md).
func (w *writer) makeVisible(g *groupRun) error {
	gb := &w.grp
	if !g.replicated { // else committed, and its readers woken, before the fsync
		gb.wakes = append(gb.wakes, w.b.binlog.CommitQuiet())
	}
	for _, tb := range gb.batches {
		// The topic's message count for TopicStats (package msgcount), a
		// few atomic integer operations, then the group visible to the
		// topic's readers: counted first, a count never lags them.
		tb.t.count.Add(tb.start, int64(len(tb.buf)), tb.marks)
		gb.wakes = append(gb.wakes, tb.log.CommitQuiet())
		if tb.t.hooks.Load() != nil {
			gb.notify = append(gb.notify, tb.t)
		}
	}
	w.b.lastID.Store(w.next - 1)
	if f := w.b.durableHook.Load(); f != nil {
		(*f)(w.next - 1)
	}
	return nil
}

// replicateEarly publishes the group's binlog end to replica streams before
// the group's fsync (Options.ReplicateBeforeSync, a master only), and wakes
// them: a slave receives, writes and confirms the group while the master
// syncs it. Nothing but the binlog moves: the group's commands are answered
// after "durable", its topics become visible at "visible", and the commit
// point waits for the durable hook. Should the fsync fail, the writer stops
// (die) with the group in the master's files and perhaps on slaves,
// answered to nobody: like any write refused after it was stored (a 400 is
// not a guarantee of absence).
func (w *writer) replicateEarly(g *groupRun) error {
	if w.b.opts.ReplicateBeforeSync && !w.b.IsSlave() {
		w.b.binlog.Commit()
		g.replicated = true
	}
	return nil
}

// runEffects performs the staged in-memory effects of the group (topic
// map changes, the cursor table, the delay and expiry hooks).
func (w *writer) runEffects(*groupRun) error {
	for _, f := range w.grp.post {
		f()
	}
	return nil
}

// rollFull starts the next file of every log the group filled.
func (w *writer) rollFull(*groupRun) error {
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
	return nil
}

// recordGroup counts a committed group in the metrics.
func (w *writer) recordGroup(*groupRun) error {
	if m := w.b.opts.Metrics; m != nil {
		w.record(m)
	}
	return nil
}

// evictGroup closes the files beyond store.maxOpenTopics. After the group's
// own outcome is settled: closing another topic's file fsyncs it, and a
// failure there is fatal.
func (w *writer) evictGroup(*groupRun) error { return w.evictOpen() }

// settleDedupe keeps the group's message ids in the window if it
// committed, and drops them if not.
func (w *writer) settleDedupe(g *groupRun) error {
	if len(w.dd.pend) > 0 || len(w.dd.dups) > 0 {
		w.dd.settle(g.committed(), g.now)
		w.publishDedupeSize()
	}
	return nil
}

// reply wakes the submitters of the group.
func (w *writer) reply(g *groupRun) error {
	for _, c := range g.group {
		if c.err != nil && c.op == opDelayApply {
			w.b.opts.Metrics.Error(metrics.KindDelay)
		}
		c.done <- struct{}{}
	}
	return nil
}

// wakeReaders wakes the readers of what the group made visible. Whatever
// the stages after "visible" did or failed to do, they must be woken.
func (w *writer) wakeReaders(*groupRun) error {
	gb := &w.grp
	for i, ch := range gb.wakes {
		close(ch)
		gb.wakes[i] = nil
	}
	gb.wakes = gb.wakes[:0]
	return nil
}
