package broker

import (
	"context"
	"errors"
	"math"
	"os"
	"slices"
	"testing"
)

// TestOldFilesRules: what the broker lists for retention and what it
// refuses to remove, whatever the caller asks.
func TestOldFilesRules(t *testing.T) {
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(o *Options) { o.MaxLogSize = 400 })
	defer b.Close()
	for _, name := range []string{"b", "a"} {
		if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 40; i++ {
		for _, name := range []string{"a", "b"} {
			if _, err := b.Publish(ctx, []byte(name), rec("message of some length"), 1); err != nil {
				t.Fatal(err)
			}
		}
	}

	if none, err := b.OldBinlogFiles(0); err != nil || len(none) != 0 {
		t.Fatalf("nothing is older than 0: %v %v", none, err)
	}
	old, err := b.OldBinlogFiles(math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	files, current := b.binlog.Files(), b.binlog.Committed().FileID
	if len(old) < 3 || len(old) != len(files)-1 || old[len(old)-1].ID >= current {
		t.Fatalf("old binlog files %+v of %v (current %d): want all but the current", old, files, current)
	}
	for i, f := range old {
		if f.ID != files[i] || f.Path != b.binlog.Path(f.ID) || f.Newest <= 0 {
			t.Fatalf("old binlog file %d: %+v, want id %d", i, f, files[i])
		}
	}

	var topics []TopicOldFiles
	if err := b.OldTopicFiles(ctx, math.MaxInt64, func(tf TopicOldFiles, err error) error {
		topics = append(topics, tf)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(topics))
	for _, tf := range topics {
		names = append(names, tf.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) || len(topics[0].Files) < 2 {
		t.Fatalf("old topic files %+v: want a, then b, several files each", topics)
	}
	a := topics[0]

	for _, tc := range []struct {
		name   string
		remove func() (int64, error)
		want   error // nil: any error
	}{
		{"binlog: not the oldest", func() (int64, error) { return b.RemoveOldBinlogFile(old[1].ID) }, nil},
		{"binlog: the current file", func() (int64, error) { return b.RemoveOldBinlogFile(current) }, nil},
		{"topic: not the oldest", func() (int64, error) { return b.RemoveOldTopicFile("a", a.CreateEventID, a.Files[1].ID) }, nil},
		{"topic: another incarnation", func() (int64, error) {
			return b.RemoveOldTopicFile("a", a.CreateEventID+1, a.Files[0].ID)
		}, ErrTopicReplaced},
		{"topic: no such topic", func() (int64, error) { return b.RemoveOldTopicFile("c", 1, 0) }, ErrTopicReplaced},
	} {
		if _, err := tc.remove(); err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want a refusal (%v)", tc.name, err, tc.want)
		}
	}
	if got := b.binlog.Files(); !slices.Equal(got, files) {
		t.Fatalf("binlog files %v after refusals, were %v", got, files)
	}

	st, err := os.Stat(old[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.RemoveOldBinlogFile(old[0].ID); err != nil || n != st.Size() {
		t.Fatalf("remove the oldest binlog file: %d bytes, %v; want %d", n, err, st.Size())
	}
	if _, err := os.Stat(old[0].Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the oldest binlog file is still there: %v", err)
	}
	if n, err := b.RemoveOldTopicFile("a", a.CreateEventID, a.Files[0].ID); err != nil || n <= 0 {
		t.Fatalf("remove the oldest file of a: %d bytes, %v", n, err)
	}
	// A deleted topic's listing is stale: nothing of it is removed.
	if _, err := b.DeleteTopic(ctx, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RemoveOldTopicFile("b", topics[1].CreateEventID, topics[1].Files[0].ID); !errors.Is(err, ErrTopicReplaced) {
		t.Fatalf("remove a file of a deleted topic: %v", err)
	}
}
