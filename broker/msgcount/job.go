package msgcount

// The background goroutine of the message counts (counts.go): it counts
// the files the writer did not write, takes the writer's final counts of
// the files it is done with, and keeps the sidecars.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/smssmq/smss/internal/fsmode"
	"github.com/smssmq/smss/segment"
)

// errCountStopped ends a count interrupted by Halt.
var errCountStopped = errors.New("message counts stopping")

// fullVisitEvery makes every topic visited at least once in so many
// passes, even if nothing seems to have changed (retention removing the
// files of a topic nobody reads leaves sidecars to remove).
const fullVisitEvery = 60

// Start launches the background goroutine (the broker's Open, after
// recovery, before any stats call).
func (cs *Counts) Start(src Source, opts Options) {
	opts.setDefaults()
	cs.src, cs.opts = src, opts
	cs.stop = make(chan struct{})
	cs.done = make(chan struct{})
	cs.kick = make(chan struct{}, 1)
	go cs.run()
}

// Halt asks the background goroutine to stop (the broker's Close, first
// thing: a long count ends while the writer drains).
func (cs *Counts) Halt() {
	if cs.stop != nil {
		close(cs.stop)
	}
}

// Finish waits for the background goroutine and, the writer being
// stopped, saves the final counts of the files it wrote (the broker's
// Close, after the writer stopped).
func (cs *Counts) Finish() {
	if cs.done == nil {
		return
	}
	<-cs.done
	cs.resolveAll(countFinal)
}

func (cs *Counts) run() {
	defer close(cs.done)
	tick := time.NewTicker(cs.opts.PollEvery)
	defer tick.Stop()
	for {
		cs.pass()
		select {
		case <-cs.stop:
			return
		case <-tick.C:
		case <-cs.kick:
		}
	}
}

// countPass is the progress of one pass over the topics, for the log.
type countPass struct {
	start, next   time.Time
	topics, seen  int
	files, bytes  int64
	logged        bool
	captured      time.Time // last captureAll
	curTopic      string
	curFile, from int64
}

func (p *countPass) tick(log func(msg string, args ...any), every time.Duration, off int64) {
	now := time.Now()
	if now.Before(p.next) {
		return
	}
	p.next = now.Add(every)
	p.logged = true
	log("counting topic messages", "topic", p.curTopic, "file", segment.FileName(p.curFile),
		"offset", off, "filesCounted", p.files, "bytesCounted", p.bytes+off-p.from,
		"topicsVisited", p.seen, "topics", p.topics, "elapsed", now.Sub(p.start).Round(time.Millisecond))
}

// pass visits every live topic: forgets deleted ones, takes the writer's
// final counts, counts what is not counted, saves sidecars.
func (cs *Counts) pass() {
	live := cs.src.Topics()
	cs.mu.Lock()
	cs.passes++
	full := cs.passes%fullVisitEvery == 1
	byName := make(map[string]Topic, len(live))
	for _, t := range live {
		byName[t.Name()] = t
	}
	for name, tc := range cs.topics {
		if byName[name] != tc.t {
			delete(cs.topics, name) // deleted; its files went to the trash
		}
	}
	cs.mu.Unlock()
	now := time.Now()
	p := &countPass{start: now, next: now.Add(cs.opts.ProgressEvery), topics: len(live), captured: now}
	for _, t := range live {
		if cs.stopped() {
			return
		}
		p.seen++
		cs.visit(t, p, full)
	}
	switch {
	case p.logged:
		cs.opts.Logger.Info("topic messages counted", "files", p.files, "bytes", p.bytes, "topics", p.topics, "took", time.Since(p.start).Round(time.Millisecond))
	case p.files > 0:
		cs.opts.Logger.Debug("topic messages counted", "files", p.files, "bytes", p.bytes, "took", time.Since(p.start).Round(time.Millisecond))
	}
}

// captureAll takes the final counts of the files the writer is done with
// out of every topic's ring, without reading any file: a long count of
// one topic must not let the others' rings wrap.
func (cs *Counts) captureAll() { cs.resolveAll(countCapture) }

// resolveAll takes every live topic's counts from the writer's ring in
// mode (no file is read); countFinal also saves the sidecars.
func (cs *Counts) resolveAll(mode countMode) {
	for _, t := range cs.src.Topics() {
		l := cs.src.Log(t)
		if l == nil {
			continue
		}
		v := t.Counter().view(l)
		files := l.Files()
		cs.mu.Lock()
		tc := cs.state(t)
		tc.resolve(&v, files, logSize(l), mode)
		cs.mu.Unlock()
		if mode == countFinal {
			cs.persist(t, tc)
		}
	}
}

// visit brings t's count up to date as far as it can.
func (cs *Counts) visit(t Topic, p *countPass, full bool) {
	l := cs.src.Log(t)
	c := t.Counter()
	cs.mu.Lock()
	tc := cs.state(t)
	if !full && tc.loaded && tc.known && !tc.unsaved && len(tc.gone) == 0 && c.seq.Load() == tc.seq && (l != nil || tc.closed >= 0) {
		cs.mu.Unlock()
		return // nothing committed, nothing to save since the last visit
	}
	loaded := tc.loaded
	cs.mu.Unlock()

	var rd *segment.Log // read-only view, opened when needed
	defer func() {
		if rd != nil {
			rd.Close()
		}
	}()
	reader := func() (*segment.Log, error) {
		if rd == nil {
			v, err := segment.Open(segment.Options{Dir: t.Dir(), MaxFileSize: cs.opts.MaxFileSize, Decode: cs.opts.Decode, Logger: cs.opts.Logger, ReadOnly: true})
			if err != nil {
				return nil, err
			}
			rd = v
		}
		return rd, nil
	}
	if !loaded {
		cs.load(t, tc, l, reader)
	}

	for attempt := 0; ; attempt++ {
		var v counterView
		var files []int64
		var size func(int64) (int64, error)
		if l != nil {
			seq := c.seq.Load()
			v, files, size = c.view(l), l.Files(), logSize(l)
			cs.mu.Lock()
			tc.seq = seq
			cs.mu.Unlock()
		} else {
			// Nothing is appended before the writer opens the log, so
			// what the view sees stays true until then.
			r, err := reader()
			if err != nil {
				return // the directory is gone: the topic is being deleted
			}
			v, files, size = closedView(r.Committed()), r.Files(), logSize(r)
		}
		cs.mu.Lock()
		if !cs.current(tc) {
			cs.mu.Unlock()
			return
		}
		total, work := tc.resolve(&v, files, size, countPlan)
		tc.known = total >= 0
		if l == nil {
			tc.closed = total
		}
		if len(work) > 0 && (attempt > 0 || time.Since(tc.failed) < cs.opts.RetryAfter) {
			work = nil // counted once this visit already, or failing
		}
		cs.mu.Unlock()
		if len(work) == 0 {
			break
		}
		r, err := reader()
		if err != nil {
			return
		}
		if !cs.countFiles(t, tc, r, work, p) {
			break
		}
	}
	cs.persist(t, tc)
}

// countFiles counts the listed parts of t's files and records them. It
// returns false when it stopped early (Halt, a failure, t deleted).
func (cs *Counts) countFiles(t Topic, tc *topicCount, r *segment.Log, work []countWork, p *countPass) bool {
	log := cs.opts.Logger
	for _, w := range work {
		p.curTopic, p.curFile, p.from = t.Name(), w.id, w.from
		check := func(off int64) error {
			if h := cs.opts.CheckHook; h != nil {
				h(t.Name(), w.id, cs.stop)
			}
			if cs.stopped() {
				return errCountStopped
			}
			p.tick(log.Info, cs.opts.ProgressEvery, off)
			if time.Since(p.captured) >= cs.opts.PollEvery {
				cs.captureAll()
				p.captured = time.Now()
			}
			return nil
		}
		if err := check(w.from); err != nil {
			return false
		}
		c, err := r.CountBlocks(w.id, w.from, w.to, check)
		if err != nil {
			if errors.Is(err, errCountStopped) {
				return false
			}
			if errors.Is(err, fs.ErrNotExist) {
				continue // retention removed it meanwhile
			}
			log.Warn("counting topic messages failed; the topic's count stays unknown", "topic", t.Name(),
				"file", r.Path(w.id), "from", w.from, "to", w.to, "err", err, "retryIn", cs.opts.RetryAfter)
			cs.mu.Lock()
			tc.failed = time.Now()
			cs.mu.Unlock()
			return false
		}
		p.files++
		p.bytes += w.to - w.from
		fc := fileCount{end: w.to, blocks: w.base.blocks + c.Blocks, first: w.base.first}
		if w.base.blocks == 0 {
			fc.first = c.FirstEventID
		}
		cs.mu.Lock()
		if !cs.current(tc) {
			cs.mu.Unlock()
			return false
		}
		if cur, ok := tc.files[w.id]; !ok || cur.end < fc.end {
			if w.sealed {
				tc.seal(w.id, fc)
			} else {
				tc.files[w.id] = fc
			}
		}
		cs.mu.Unlock()
	}
	return true
}

// openDir opens t's directory for sidecar reads and writes. Once open it
// stays t's directory whatever happens to the path: a delete renames it
// into the trash, and a new topic of the same name gets a new directory
// there; neither may receive the other's sidecars. t's directory is
// renamed only after t left the topic map (removeTopic), so t still being
// there after the open means the handle is t's (Source.Live).
func (cs *Counts) openDir(t Topic) *os.Root {
	root, err := os.OpenRoot(t.Dir())
	if err != nil {
		return nil
	}
	if !cs.src.Live(t) {
		root.Close()
		return nil
	}
	return root
}

// load reads the sidecars of t's files at the first visit, keeping those
// that describe a file as it is, and removes the others.
func (cs *Counts) load(t Topic, tc *topicCount, l *segment.Log, reader func() (*segment.Log, error)) {
	defer func() {
		cs.mu.Lock()
		tc.loaded = true
		cs.mu.Unlock()
	}()
	root := cs.openDir(t)
	if root == nil {
		return
	}
	defer root.Close()
	d, err := root.Open(".")
	if err != nil {
		return
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return
	}
	var names []string
	for _, e := range ents {
		if name := e.Name(); strings.HasSuffix(name, SidecarExt) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return // a topic of this process, or from before the count existed
	}
	r, err := reader()
	if err != nil {
		return
	}
	var files []int64
	v := closedView(segment.Position{})
	if l != nil {
		v, files = t.Counter().view(l), l.Files()
	} else {
		files = r.Files()
	}
	exists := make(map[int64]bool, len(files))
	for _, id := range files {
		// A file this process's writer created is counted by the writer;
		// a sidecar of that name is left from a removed file.
		if w, ok := v.slot(id); !ok || w.from > 0 {
			exists[id] = true
		}
	}
	found := map[int64]fileCount{}
	for _, name := range names {
		id, ok := sidecarID(name)
		if !ok {
			continue
		}
		fc, why := cs.checkSidecar(root, r, id, exists[id])
		if why != "" {
			cs.opts.Logger.Debug("ignoring a topic count sidecar", "topic", t.Name(), "file", name, "reason", why)
			root.Remove(name)
			continue
		}
		found[id] = fc
	}
	cs.mu.Lock()
	for id, fc := range found {
		if _, ok := tc.files[id]; !ok {
			tc.files[id] = fc
		}
	}
	cs.mu.Unlock()
}

// checkSidecar reads the sidecar of file id and returns its record, or why
// it cannot be trusted.
func (cs *Counts) checkSidecar(root *os.Root, r *segment.Log, id int64, exists bool) (fileCount, string) {
	if !exists {
		return fileCount{}, "no such log file from before this process"
	}
	data, err := root.ReadFile(SidecarName(id))
	if err != nil {
		return fileCount{}, err.Error()
	}
	c, err := DecodeSidecar(data)
	if err != nil {
		return fileCount{}, err.Error()
	}
	st, err := root.Stat(segment.FileName(id))
	if err != nil {
		return fileCount{}, err.Error()
	}
	if st.Size() != c.Size {
		return fileCount{}, fmt.Sprintf("describes %d bytes, the file has %d", c.Size, st.Size())
	}
	if c.Blocks > 0 {
		first, ok, err := r.FileFirstEventID(id)
		if err != nil || !ok || first != c.FirstEventID {
			return fileCount{}, fmt.Sprintf("first eventId %d, the file's is %d (%v, %v)", c.FirstEventID, first, ok, err)
		}
	}
	return fileCount{end: c.Size, blocks: c.Blocks, first: c.FirstEventID, saved: true}, ""
}

// persist writes the sidecars of t's sealed files that have none yet and
// removes those of files that are gone. A failure only costs a recount at
// the next start.
func (cs *Counts) persist(t Topic, tc *topicCount) {
	type item struct {
		id int64
		fc fileCount
	}
	cs.mu.Lock()
	if !cs.current(tc) || (!tc.unsaved && len(tc.gone) == 0) {
		cs.mu.Unlock()
		return
	}
	var save []item
	if tc.unsaved {
		for id, fc := range tc.files {
			if fc.sealed && !fc.saved && (fc.blocks == 0 || fc.first > 0) {
				save = append(save, item{id, fc})
			}
		}
	}
	gone := tc.gone
	tc.gone, tc.unsaved = nil, false
	cs.mu.Unlock()

	root := cs.openDir(t)
	if root == nil {
		return
	}
	defer root.Close()
	for _, id := range gone {
		root.Remove(SidecarName(id))
	}
	for _, it := range save {
		name := SidecarName(it.id)
		data := EncodeSidecar(Sidecar{Size: it.fc.end, Blocks: it.fc.blocks, FirstEventID: it.fc.first})
		// Written in place: a torn or partial sidecar fails its length or
		// checksum and only costs a recount, and no temporary name ever
		// shows up in the directory.
		if err := root.WriteFile(name, data, fsmode.File()); err != nil {
			root.Remove(name)
			cs.opts.Logger.Warn("saving a topic count sidecar failed; the file is counted again at the next start", "topic", t.Name(), "file", name, "err", err)
			continue
		}
		cs.mu.Lock()
		if cur, ok := tc.files[it.id]; ok && cur == it.fc {
			cur.saved = true
			tc.files[it.id] = cur
		}
		cs.mu.Unlock()
	}
}
