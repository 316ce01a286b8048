package broker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// openTopicFiles counts this process's descriptors on files under root
// (Linux: /proc/self/fd).
func openTopicFiles(t *testing.T, root string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(target, root+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// TestRecoveryRespectsMaxOpenTopics: the replay after a crash used to keep
// a reader per replayed topic, and the files of every topic it appended
// to, open until the server stopped, outside store.maxOpenTopics: a
// restart of a store with more topics than the file limit allows failed
// with "too many open files" or ran the server out of descriptors. Here 60
// topics are replayed (half of them compared with their files, half
// rewritten from the binlog) under a cap of 4.
func TestRecoveryRespectsMaxOpenTopics(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc/self/fd")
	}
	ctx := context.Background()
	const topics, rounds, maxOpen = 60, 3, 4
	src := t.TempDir()
	b := openTest(t, src, func(o *Options) { o.Logger = quietLog })
	name := func(i int) string { return fmt.Sprintf("r%02d", i) }
	for i := range topics {
		if _, err := b.CreateTopic(ctx, []byte(name(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	for r := range rounds { // interleaved in the binlog
		for i := range topics {
			if _, err := b.Publish(ctx, []byte(name(i)), rec(fmt.Sprintf("m%d", r)), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// A checkpoint at the start replays every block; the odd topics lost
	// their files, which the replay writes again.
	dir, err := oldCheckpointCopy(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	root := filepath.Join(dir, "topic")
	for i := 1; i < topics; i += 2 {
		d := topicblock.Dir(root, []byte(name(i)), 10)
		files, err := filepath.Glob(filepath.Join(d, "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
	}

	peak := 0
	b2 := openTest(t, dir, func(o *Options) {
		o.Logger, o.MaxOpenTopics = quietLog, maxOpen
		o.OpenFile = func(path string, flag int, perm os.FileMode) (segment.File, error) {
			if strings.HasPrefix(path, root) {
				peak = max(peak, openTopicFiles(t, root))
			}
			return os.OpenFile(path, flag, perm)
		}
	})
	after := openTopicFiles(t, root)
	t.Logf("topic files open: at most %d during the replay, %d after it", peak, after)
	// Each topic among the maxOpen most recent holds a reader, its
	// current file and its index; one more is being opened.
	if limit := 3 * (maxOpen + 1); peak > limit || after > 2*maxOpen {
		t.Fatalf("topic files open: %d during the replay, %d after it; want at most %d and %d (store.maxOpenTopics %d)", peak, after, limit, 2*maxOpen, maxOpen)
	}
	for i := range topics { // every file reopens after the replay closed it
		if _, err := b2.Publish(ctx, []byte(name(i)), rec("after"), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range topics {
		_, recs := readTopic(t, dir, name(i))
		if len(recs) != rounds+1 {
			t.Fatalf("topic %s: %d messages after the replay and one publish, want %d", name(i), len(recs), rounds+1)
		}
		for r, raw := range recs[:rounds] {
			if want := rec(fmt.Sprintf("m%d", r)); string(raw) != string(want) {
				t.Fatalf("topic %s message %d: %q, want %q", name(i), r, raw, want)
			}
		}
	}
}
