package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/topicblock"
)

// ErrFolderCount is wrapped by the error Open returns when store.folderCount
// differs from the value the data directory's topics are laid out with:
// every topic's files would be looked for in another directory, and a
// restarted server would deliver none of their messages.
var ErrFolderCount = errors.New("store.folderCount does not match the data directory")

// maxFolderCount is the largest store.folderCount (config validates it).
const maxFolderCount = 10000

// checkFolderCount compares the configured folderCount with the one recorded
// in meta and records it when none is.
//
// A directory without the record is either new or was written by the
// original server (or a build before the record existed). Neither says
// which folderCount it used, so the configured value is taken, after a check
// that the topics meta knows are where that value puts them: a topic found
// under another bucket proves the directory was laid out with a different
// value, and the error names the smallest one consistent with every such
// topic. Topics with no directory at all (created, never written) prove
// nothing either way.
func (b *Broker) checkFolderCount(ms *meta.Store) error {
	want := b.opts.FolderCount
	got, ok, err := ms.FolderCount()
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	if ok {
		if got != want {
			return fmt.Errorf("%w: store.folderCount is %d but this data directory was laid out with %d (recorded at its first start); set store.folderCount: %d",
				ErrFolderCount, want, got, got)
		}
		return nil
	}
	if err := b.checkLayout(ms, want); err != nil {
		return err
	}
	if b.ReadOnly() != nil {
		return nil // a read-only start records nothing (readonly.go)
	}
	fb := ms.NewBatch()
	fb.SetFolderCount(want)
	if err := ms.Commit(fb); err != nil {
		return fmt.Errorf("broker: record store.folderCount: %w", err)
	}
	b.log.Info("recorded store.folderCount in meta", "folderCount", want)
	return nil
}

// checkLayout verifies, for a directory without a recorded folderCount, that
// no topic lives where a different folderCount put it.
func (b *Broker) checkLayout(ms *meta.Store, want int) error {
	topics, err := ms.Topics()
	if err != nil {
		return fmt.Errorf("broker: check store.folderCount: %w", err)
	}
	type misplaced struct {
		name   string
		p1, p2 int
	}
	var wrong []misplaced
	for _, t := range topics {
		name := []byte(t.Name)
		if _, err := os.Stat(topicblock.Dir(b.topicRoot, name, want)); err == nil {
			continue
		}
		found, _ := filepath.Glob(filepath.Join(b.topicRoot, "*", "*", globQuote(t.Name)))
		for _, f := range found {
			p2dir := filepath.Dir(f)
			p1, err1 := strconv.Atoi(filepath.Base(filepath.Dir(p2dir)))
			p2, err2 := strconv.Atoi(filepath.Base(p2dir))
			if err1 == nil && err2 == nil {
				wrong = append(wrong, misplaced{t.Name, p1, p2})
				break
			}
		}
	}
	if len(wrong) == 0 {
		return nil
	}
	w := wrong[0]
	p1, p2 := topicblock.Buckets([]byte(w.name), want)
	msg := fmt.Sprintf("topic %q is in topic/%d/%d/, where store.folderCount %d would look for it in topic/%d/%d/ (%d topic(s) misplaced)",
		w.name, w.p1, w.p2, want, p1, p2, len(wrong))
	for n := 1; n <= maxFolderCount; n++ {
		fits := true
		for _, m := range wrong {
			if q1, q2 := topicblock.Buckets([]byte(m.name), n); q1 != m.p1 || q2 != m.p2 {
				fits = false
				break
			}
		}
		if fits {
			msg += fmt.Sprintf("; the directory was probably laid out with store.folderCount %d", n)
			break
		}
	}
	return fmt.Errorf("%w: %s", ErrFolderCount, msg)
}

// globQuote escapes the glob metacharacters a topic name may contain.
func globQuote(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}
