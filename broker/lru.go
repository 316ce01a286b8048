package broker

import "fmt"

// Bounds of DefaultMaxOpenTopics.
const (
	minOpenTopics = 16
	maxOpenTopics = 1 << 20
)

// DefaultMaxOpenTopics sizes the open-topic cache from the process's soft
// file limit: a quarter of it, at two descriptors per topic, leaves half
// for connections, subscribers' readers, slaves and the meta store.
func DefaultMaxOpenTopics() int {
	cur, ok := softFileLimit()
	if !ok || cur == 0 {
		return 1024
	}
	return int(min(max(cur/4, minOpenTopics), maxOpenTopics))
}

// touchOpen marks t's current file as just appended to: it moves to the
// front of the LRU of open topic files.
func (w *writer) touchOpen(t *topic) {
	if t.lru != nil {
		w.files.lru.MoveToFront(t.lru)
		return
	}
	t.lru = w.files.lru.PushFront(t)
}

// forgetOpen takes t out of the LRU (its file was closed).
func (w *writer) forgetOpen(t *topic) {
	if t.lru != nil {
		w.files.lru.Remove(t.lru)
		t.lru = nil
	}
}

// evictOpen closes the files of the least recently appended topics beyond
// Options.MaxOpenTopics, so that the number of topics is bounded by disk,
// not by descriptors. A closed file is fsynced first (CloseIdle) and
// reopened by the topic's next append; a failure there is fatal, as any
// failed fsync.
func (w *writer) evictOpen() error {
	for w.files.lru.Len() > w.b.opts.MaxOpenTopics {
		t := w.files.lru.Back().Value.(*topic)
		w.forgetOpen(t)
		if t.log == nil {
			continue
		}
		if err := t.log.CloseIdle(); err != nil {
			return fmt.Errorf("close the file of topic %s (store.maxOpenTopics): %w", t.meta.Name, err)
		}
		delete(w.dur.dirty, t)
	}
	return nil
}
