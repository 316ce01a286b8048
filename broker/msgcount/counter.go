package msgcount

import (
	"runtime"
	"sync/atomic"

	"github.com/smssmq/smss/segment"
)

// Ring is how many files' writer counts a Counter keeps: the background
// goroutine takes a file's final count from the ring after the writer
// moved on, which it does every Options.PollEvery, so a file is recounted
// from disk only if a topic rolls more than Ring-1 files in between.
const Ring = 4

// Counter is the writer's count of the blocks it appended to one topic
// log, per file (a ring indexed by file id), and the end of the last
// group it counted. Only the writer goroutine calls Add; seq is odd while
// it does, so that readers take a consistent view (a seqlock).
//
// The zero value is ready: nothing counted.
type Counter struct {
	seq  atomic.Uint64
	end1 atomic.Int64 // file id + 1 of the end of the last counted group; 0: none yet
	end  atomic.Int64 // its offset
	ring [Ring]counterSlot
}

type counterSlot struct {
	file1 atomic.Int64 // file id + 1; 0 while unused
	from  atomic.Int64 // offset of the writer's first block in the file
	first atomic.Int64 // eventId of that block
	n     atomic.Int64 // blocks counted from there on
}

// Add counts a group the writer appended to the topic's log: size bytes
// at start, whole blocks beginning at marks (one block per message; a
// group never spans files). The writer calls it for every topic of a
// group, after the group's appends succeeded and before it makes the
// group visible to readers (segment.Log.CommitQuiet), never for a group
// it rolls back. It must stay a handful of atomic integer operations,
// without locks or allocation: it runs for every topic of every group.
func (c *Counter) Add(start segment.Position, size int64, marks []segment.Mark) {
	c.seq.Add(1)
	s := &c.ring[start.FileID%Ring]
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
	c.end1.Store(start.FileID + 1)
	c.end.Store(start.Offset + size)
	c.seq.Add(1)
}

// slotView is one ring slot as read; file is -1 when unused.
type slotView struct{ file, from, first, n int64 }

// counterView is a log's counted end together with the writer's counts
// that it includes.
type counterView struct {
	committed segment.Position // what the counts cover: see Counter.view
	slots     [Ring]slotView
}

func (v *counterView) slot(id int64) (slotView, bool) {
	s := v.slots[id%Ring]
	return s, s.file == id
}

// view reads the ring and the counted end between two identical even
// values of seq, so both describe the same groups.
//
// The end is the counter's own once the writer counted a group, else l's
// committed position, which start-up recovery left and nobody but the
// writer moves afterwards. The writer counts a group before it makes it
// visible, so the counted end is never behind l's committed one (it may
// be ahead by the group being made visible), and l.Committed is read
// before the ring: a ring still empty then means that no group of the
// writer was committed when l.Committed was read.
func (c *Counter) view(l *segment.Log) counterView {
	committed := l.Committed()
	for {
		seq := c.seq.Load()
		if seq&1 == 0 {
			v := counterView{committed: committed}
			if f := c.end1.Load(); f > 0 {
				v.committed = segment.Position{FileID: f - 1, Offset: c.end.Load()}
			}
			for i := range c.ring {
				s := &c.ring[i]
				v.slots[i] = slotView{file: s.file1.Load() - 1, from: s.from.Load(), first: s.first.Load(), n: s.n.Load()}
			}
			if c.seq.Load() == seq {
				return v
			}
		}
		runtime.Gosched() // the writer is inside Add: a few instructions
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
