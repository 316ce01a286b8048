package broker

// Topic directories: creation, deletion by rename into the trash, and the
// in-memory topic map that follows them.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/smssmq/smss/internal/fsmode"
	"github.com/smssmq/smss/meta"
)

// freshDir creates dir for a new topic. A directory left by an earlier
// topic of the same name (a crash between meta removal and file removal in
// an older version, or a foreign tool) is moved to the trash first, so a
// new topic never inherits old messages.
func (b *Broker) freshDir(dir string, eventID int64) error {
	if _, err := os.Stat(dir); err == nil {
		b.log.Warn("topic directory exists without a topic; moving it to trash", "dir", dir)
		if err := b.trash(dir, eventID); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, fsmode.Dir()); err != nil {
		return fmt.Errorf("create topic dir %s: %w", dir, err)
	}
	return nil
}

// trash renames dir into the trash directory, then removes it in the
// background (removeTrashed). The directory of a topic an original server created as ""
// or "." is its hashing bucket itself, which holds other topics'
// directories: only that topic's files are moved then. A directory that
// is not under the topic root is never touched.
func (b *Broker) trash(dir string, eventID int64) error {
	rel, err := filepath.Rel(b.topicRoot, dir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("refusing to remove %s: not a topic directory under %s", dir, b.topicRoot)
	}
	if strings.Count(rel, string(filepath.Separator)) < 2 {
		return b.trashFiles(dir, rel, eventID)
	}
	base := filepath.Join(b.trashDir, strconv.FormatInt(eventID, 10)+"-"+filepath.Base(dir))
	dst := base
	for i := 1; ; i++ {
		err := os.Rename(dir, dst)
		if err == nil {
			break
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		// A kill can leave the trash entry of this very delete behind,
		// and recovery replays the delete after re-creating the
		// directory: take the next free name.
		if _, serr := os.Lstat(dst); serr == nil && i < 100 {
			dst = base + "." + strconv.Itoa(i)
			continue
		}
		return fmt.Errorf("move %s to trash: %w", dir, err)
	}
	b.removeTrashed(dst)
	return nil
}

// logFileRe matches the files of a log directory (docs/protocol.md §5.2 and the
// sidecars of this server).
var logFileRe = regexp.MustCompile(`^[0-9]+\.(log|idx|cnt)$`)

// trashFiles moves the log files of a topic that shares its directory
// (a bucket, rel "p1/p2") into a trash entry of their own, leaving the
// directory and the other topics' directories in it alone.
func (b *Broker) trashFiles(dir, rel string, eventID int64) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	base := filepath.Join(b.trashDir, strconv.FormatInt(eventID, 10)+"-bucket-"+strings.ReplaceAll(rel, string(filepath.Separator), "-"))
	dst := base
	for i := 1; ; i++ {
		err := os.Mkdir(dst, fsmode.Dir())
		if err == nil {
			break
		}
		if errors.Is(err, os.ErrExist) && i < 100 {
			dst = base + "." + strconv.Itoa(i)
			continue
		}
		return fmt.Errorf("trash entry for %s: %w", dir, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !logFileRe.MatchString(e.Name()) {
			continue
		}
		if err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(dst, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("move %s to trash: %w", filepath.Join(dir, e.Name()), err)
		}
	}
	b.removeTrashed(dst)
	return nil
}

// removeTrashed removes the trash entry dst in the background: a large
// topic's files take long to unlink, and the delete that moved them is
// already durable. Close waits for it (lifecycle.trash).
func (b *Broker) removeTrashed(dst string) {
	b.life.trash.Go(func() {
		if err := b.opts.removeTrash(dst); err != nil {
			b.log.Warn("remove trashed topic files", "path", dst, "err", err)
		}
	})
}

func (b *Broker) addTopic(m meta.Topic, dir string) *topic {
	t := &topic{meta: m, dir: dir, deleted: make(chan struct{})}
	b.mu.Lock()
	b.topics[m.Name] = t
	b.mu.Unlock()
	return t
}

// removeTopic forgets t, wakes its readers and moves its files away.
func (b *Broker) removeTopic(t *topic, eventID int64) {
	b.mu.Lock()
	if b.topics[t.meta.Name] == t {
		delete(b.topics, t.meta.Name)
	}
	b.mu.Unlock()
	b.dropTopicCursors(t.meta.Name)
	close(t.deleted)
	if t.log != nil {
		if err := t.log.Close(); err != nil {
			b.log.Error("close deleted topic log", "topic", t.meta.Name, "err", err)
		}
	}
	if err := b.trash(t.dir, eventID); err != nil {
		// The topic is gone from binlog and meta; the files stay as an
		// orphan that the next create of this name moves away.
		b.log.Error("BUG: deleted topic's files could not be moved", "topic", t.meta.Name, "dir", t.dir, "err", err)
	}
}

func removeAll(dir string) error { return os.RemoveAll(dir) }
