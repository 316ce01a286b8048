package msgcount

// The counts' state: what is known of each topic's files, and how a
// topic's total is resolved from it and from the writer's Counter.

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/smssmq/smss/segment"
)

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
	t       Topic
	files   map[int64]fileCount
	loaded  bool    // the sidecars present at the first visit were read
	unsaved bool    // a sealed record has no sidecar yet
	gone    []int64 // files removed (retention) whose sidecars must go
	closed  int64   // Messages while t's log is not opened; -1 unknown
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
// Counts.mu held.
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

// Topic is one incarnation of a topic as the counts see it. A deleted
// and re-created topic is a new Topic: two incarnations of a name must be
// different (comparable) values, such as pointers.
type Topic interface {
	Name() string
	Dir() string       // where its log files are
	Counter() *Counter // the writer's count of what it appended
}

// Source is what the counts need of the broker that owns the topics.
type Source interface {
	// Topics returns the live topics, in name order.
	Topics() []Topic
	// Log returns t's log once the writer opened it, nil before (then
	// nothing was appended to it by this process).
	Log(t Topic) *segment.Log
	// Live reports whether t is still a live topic. A deleted topic's
	// directory is renamed away only after it stopped being live, so a
	// directory opened before Live said true is t's own.
	Live(t Topic) bool
}

// Options configure Counts.
type Options struct {
	Logger *slog.Logger // required
	// Decode and MaxFileSize open read-only views of topic logs
	// (segment.Options).
	Decode      segment.Decoder
	MaxFileSize int64
	// PollEvery is how often the background goroutine takes the final
	// counts of files the writer is done with out of its ring (default
	// 1 s).
	PollEvery time.Duration
	// ProgressEvery is how often a long count logs its progress (default
	// 5 s).
	ProgressEvery time.Duration
	// RetryAfter is how long a topic whose count failed waits before the
	// next attempt (default 1 min).
	RetryAfter time.Duration
	// CheckHook, if set, is called by every progress check of a count,
	// with a channel closed when the counts stop (tests hold a count
	// there).
	CheckHook func(topic string, file int64, stop <-chan struct{})
}

func (o *Options) setDefaults() {
	if o.PollEvery <= 0 {
		o.PollEvery = time.Second
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 5 * time.Second
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Minute
	}
}

// Counts owns the counts of every topic and the background goroutine
// that fills them in. The zero value answers Messages (-1 for what it
// does not know) until Start.
type Counts struct {
	mu     sync.Mutex
	topics map[string]*topicCount
	passes int

	src  Source
	opts Options
	stop chan struct{} // closed by Halt
	done chan struct{} // closed when run returns
	kick chan struct{} // a stats call met an uncounted file
}

func (cs *Counts) stopped() bool {
	select {
	case <-cs.stop:
		return true
	default:
		return false
	}
}

func (cs *Counts) wake() {
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
func (cs *Counts) state(t Topic) *topicCount {
	if cs.topics == nil {
		cs.topics = map[string]*topicCount{}
	}
	tc := cs.topics[t.Name()]
	if tc == nil || tc.t != t {
		tc = &topicCount{t: t, files: map[int64]fileCount{}, closed: -1}
		cs.topics[t.Name()] = tc
	}
	return tc
}

// current reports whether tc is still the state of a live topic (mu held).
func (cs *Counts) current(tc *topicCount) bool {
	return cs.topics[tc.t.Name()] == tc
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

// Messages is the number of messages of t, whose log is l (nil: not
// opened), up to the end the writer counted; -1 while unknown. It reads
// no file: a file not counted yet makes it -1 and wakes the background
// goroutine.
func (cs *Counts) Messages(t Topic, l *segment.Log) int64 {
	var total int64
	if l == nil {
		cs.mu.Lock()
		total = cs.state(t).closed
		cs.mu.Unlock()
	} else {
		v := t.Counter().view(l)
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

// Passes is how many passes over the topics the background goroutine
// made (tests and diagnostics).
func (cs *Counts) Passes() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.passes
}

// Settled reports whether the background goroutine visited the current
// incarnation of topic name, read its sidecars and found every file
// counted; when not, it wakes the goroutine (tests and diagnostics).
func (cs *Counts) Settled(name string) bool {
	cs.mu.Lock()
	tc := cs.topics[name]
	ok := tc != nil && tc.loaded && tc.known
	cs.mu.Unlock()
	if !ok {
		cs.wake()
	}
	return ok
}
