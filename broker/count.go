package broker

// Per-topic message counts (metrics.TopicStats.Messages): the number of
// topic blocks, one per message (docs/protocol.md §5.6), in the topic's log files up
// to the committed position.
//
// Where the counts come from:
//
//   - Blocks this process's writer commits are counted by the writer as it
//     commits them (blockCounter.commit): per topic and group, a few atomic
//     integer operations and nothing per message. Counting them instead in
//     the stats path, from the last counted offset to the committed one,
//     would read back every byte written (twice the page-cache traffic
//     and a decode per block, at the server's full write rate, whenever
//     anyone watches), which is what the writer already knows for free.
//   - Files that existed before (the previous runs', and the part of a
//     file that start-up recovery appended to) are counted by one
//     background goroutine per Broker (countState.run), through a
//     read-only view, never inline in a stats call. Until every file of a
//     topic is counted its count is unknown (-1).
//   - A file that can no longer change (a later file is committed, or the
//     writer stopped) gets a sidecar "<id>.cnt" (format in doc.go) so that
//     the next start reads 36 bytes instead of the file. Sidecars are
//     trusted only when they describe the file's current size and first
//     eventId.
//
// Memory per topic is the writer's ring (4 slots) plus one small record
// per log file.

import (
	"errors"
	"io/fs"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/segment"
)

// countRing is how many files' writer counts a topic keeps: the background
// goroutine takes a file's final count from the ring after the writer
// moved on, which it does every countPollEvery, so a file is recounted
// from disk only if a topic rolls more than countRing-1 files in between.
const countRing = 4

// blockCounter is the writer's count of the blocks it committed to one
// topic log, per file (a ring indexed by file id). Only the writer
// goroutine writes it; seq is odd while it does, so that readers take a
// view consistent with the log's committed position (a seqlock).
type blockCounter struct {
	seq  atomic.Uint64
	ring [countRing]counterSlot
}

type counterSlot struct {
	file1 atomic.Int64 // file id + 1; 0 while unused
	from  atomic.Int64 // offset of the writer's first block in the file
	first atomic.Int64 // eventId of that block
	n     atomic.Int64 // blocks committed from there on
}

// commit makes l's appended group visible to readers (CommitQuiet, whose
// channel it returns) and counts the blocks that the group appended at
// start. Called by the writer for every topic of a committed group: it
// must stay a handful of atomic integer operations, without locks
// (CommitQuiet's own aside) or allocation.
func (c *blockCounter) commit(l *segment.Log, start segment.Position, marks []segment.Mark) chan struct{} {
	c.seq.Add(1)
	ch := l.CommitQuiet()
	s := &c.ring[start.FileID%countRing]
	if s.file1.Load() != start.FileID+1 {
		first := int64(0)
		if len(marks) > 0 {
			first = marks[0].EventID
		}
		s.file1.Store(start.FileID + 1)
		s.from.Store(start.Offset)
		s.first.Store(first)
		s.n.Store(0)
	}
	s.n.Add(int64(len(marks)))
	c.seq.Add(1)
	return ch
}

// slotView is one ring slot as read; file is -1 when unused.
type slotView struct{ file, from, first, n int64 }

// counterView is a topic's committed position together with the writer's
// counts that it includes.
type counterView struct {
	committed segment.Position
	slots     [countRing]slotView
}

func (v *counterView) slot(id int64) (slotView, bool) {
	s := v.slots[id%countRing]
	return s, s.file == id
}

// view reads the ring and l's committed position between two identical
// even values of seq, so both describe the same commits.
func (c *blockCounter) view(l *segment.Log) counterView {
	for {
		seq := c.seq.Load()
		if seq&1 == 0 {
			var v counterView
			v.committed = l.Committed()
			for i := range c.ring {
				s := &c.ring[i]
				v.slots[i] = slotView{file: s.file1.Load() - 1, from: s.from.Load(), first: s.first.Load(), n: s.n.Load()}
			}
			if c.seq.Load() == seq {
				return v
			}
		}
		runtime.Gosched() // the writer is inside commit: a few instructions
	}
}

// closedView is the view of a log the writer has not opened (nothing was
// appended by this process).
func closedView(committed segment.Position) counterView {
	v := counterView{committed: committed}
	for i := range v.slots {
		v.slots[i].file = -1
	}
	return v
}

// fileCount says that the first end bytes of a log file hold blocks
// blocks.
type fileCount struct {
	end    int64
	blocks int64
	first  int64 // eventId of the file's first block (0 when blocks is 0)
	sealed bool  // end is the file's final size: the record never changes
	saved  bool  // a sidecar holds it
}

// topicCount is the count state of one topic incarnation.
type topicCount struct {
	t       *topic
	files   map[int64]fileCount
	loaded  bool    // the sidecars present at the first visit were read
	unsaved bool    // a sealed record has no sidecar yet
	gone    []int64 // files removed (retention) whose sidecars must go
	closed  int64   // Messages while t.log is nil; -1 unknown
	known   bool    // the last background visit found every file counted
	seq     uint64  // the writer's seq at that visit
	failed  time.Time
}

type countMode int

const (
	countStats   countMode = iota // a stats call: give up at the first file not counted
	countCapture                  // take the writer's final counts only
	countPlan                     // also list what to count
	countFinal                    // Close: the writer stopped, its files are final
)

// countWork is a part of a file to count: [from, to) of file id, whose
// first from bytes hold base.
type countWork struct {
	id, from, to int64
	base         fileCount
	sealed       bool // to is the file's final size
}

func planCount(id int64, r fileCount, have bool, to int64, sealed bool) countWork {
	w := countWork{id: id, to: to, sealed: sealed}
	// Counted offsets are block boundaries of immutable bytes: resume.
	if have && r.end > 0 && r.end < to {
		w.from, w.base = r.end, r
	}
	return w
}

// forget drops the records of files that are gone (retention removes
// the oldest files).
func (tc *topicCount) forget(files []int64) {
	for id := range tc.files {
		if len(files) == 0 || id < files[0] {
			delete(tc.files, id)
			tc.gone = append(tc.gone, id)
		}
	}
}

func (tc *topicCount) seal(id int64, fc fileCount) {
	fc.sealed = true
	tc.files[id] = fc
	if !fc.saved {
		tc.unsaved = true
	}
}

// resolve sums the counts of the committed files and turns what the
// writer's ring says of files it is done with into sealed records. It
// returns -1 when a file is not counted yet and, but in countStats mode,
// the work that would count it. size stats a log file. Called with
// countState.mu held.
func (tc *topicCount) resolve(v *counterView, files []int64, size func(int64) (int64, error), mode countMode) (int64, []countWork) {
	tc.forget(files)
	c := v.committed
	total, known := int64(0), true
	var work []countWork
	for _, id := range files {
		if id > c.FileID {
			break // created by the writer, nothing committed in it yet
		}
		r, have := tc.files[id]
		if have && r.sealed {
			total += r.blocks
			continue
		}
		w, inRing := v.slot(id)
		if !inRing && !have && mode <= countCapture {
			if mode == countStats {
				return -1, nil
			}
			known = false
			continue
		}
		limit, sealed := c.Offset, false
		if id < c.FileID || mode == countFinal {
			sz, err := size(id)
			switch {
			case errors.Is(err, fs.ErrNotExist) && id < c.FileID:
				continue // removed by retention since files was read
			case err != nil:
				if mode == countStats {
					return -1, nil
				}
				known = false
				continue
			case id < c.FileID:
				limit, sealed = sz, true
			default:
				sealed = sz == limit
			}
		}
		if limit == 0 {
			if sealed {
				tc.files[id] = fileCount{sealed: true, saved: true} // nothing to save
			}
			continue
		}
		if inRing && w.from <= limit {
			// The writer appended [w.from, limit): it is the only one
			// that appends, and a file it appended to is never
			// appended to by anyone else afterwards.
			var fc fileCount
			switch {
			case w.from == 0:
				fc = fileCount{end: limit, blocks: w.n, first: w.first}
			case have && r.end == w.from:
				fc = fileCount{end: limit, blocks: r.blocks + w.n, first: r.first}
				if r.blocks == 0 {
					fc.first = w.first
				}
			default:
				// What was there before the writer's first append
				// (recovery appends to a new file the writer goes on
				// with) is not counted yet.
				if mode == countStats {
					return -1, nil
				}
				known = false
				if mode >= countPlan {
					work = append(work, planCount(id, r, have, w.from, false))
				}
				continue
			}
			total += fc.blocks
			if sealed {
				tc.seal(id, fc)
			}
			continue
		}
		if have && r.end == limit {
			total += r.blocks
			if sealed {
				tc.seal(id, r)
			}
			continue
		}
		if mode == countStats {
			return -1, nil
		}
		known = false
		if mode >= countPlan {
			work = append(work, planCount(id, r, have, limit, sealed))
		}
	}
	if !known {
		return -1, work
	}
	return total, work
}

// countState owns the counts of every topic and the background goroutine
// that fills them in.
type countState struct {
	mu     sync.Mutex
	topics map[string]*topicCount
	passes int

	b    *Broker
	stop chan struct{} // closed by Close
	done chan struct{} // closed when run returns
	kick chan struct{} // a stats call met an uncounted file
}

func (cs *countState) stopped() bool {
	select {
	case <-cs.stop:
		return true
	default:
		return false
	}
}

func (cs *countState) wake() {
	if cs.kick == nil {
		return
	}
	select {
	case cs.kick <- struct{}{}:
	default:
	}
}

// state returns t's count state, replacing that of an older incarnation
// of the name (mu held).
func (cs *countState) state(t *topic) *topicCount {
	if cs.topics == nil {
		cs.topics = map[string]*topicCount{}
	}
	tc := cs.topics[t.meta.Name]
	if tc == nil || tc.t != t {
		tc = &topicCount{t: t, files: map[int64]fileCount{}, closed: -1}
		cs.topics[t.meta.Name] = tc
	}
	return tc
}

// current reports whether tc is still the state of a live topic (mu held).
func (cs *countState) current(tc *topicCount) bool {
	return cs.topics[tc.t.meta.Name] == tc
}

func logSize(l *segment.Log) func(int64) (int64, error) {
	return func(id int64) (int64, error) {
		st, err := os.Stat(l.Path(id))
		if err != nil {
			return 0, err
		}
		return st.Size(), nil
	}
}

// messages is TopicStats' Messages for t, whose log is l (nil: not
// opened). It reads no file: a file not counted yet makes it -1 and wakes
// the background goroutine.
func (cs *countState) messages(t *topic, l *segment.Log) int64 {
	var total int64
	if l == nil {
		cs.mu.Lock()
		total = cs.state(t).closed
		cs.mu.Unlock()
	} else {
		v := t.blocks.view(l)
		files := l.Files()
		cs.mu.Lock()
		tc := cs.state(t)
		total, _ = tc.resolve(&v, files, logSize(l), countStats)
		// Sidecars to write or remove: not at the next tick only.
		chores := tc.unsaved || len(tc.gone) > 0
		cs.mu.Unlock()
		if chores {
			cs.wake()
		}
	}
	if total < 0 {
		cs.wake()
	}
	return total
}
