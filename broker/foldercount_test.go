package broker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smssmq/smss/topicblock"
)

func TestFolderCountRecordedAndChecked(t *testing.T) {
	dir := t.TempDir()
	b := openTest(t, dir, func(o *Options) { o.FolderCount = 3 })
	if n, ok, err := b.meta.FolderCount(); err != nil || !ok || n != 3 {
		t.Fatalf("recorded folderCount %d %v %v, want 3", n, ok, err)
	}
	if _, err := b.CreateTopic(context.Background(), []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(context.Background(), []byte("t"), rec("x"), 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		count int
		want  string // "" = opens
	}{
		{3, ""},
		{10, "store.folderCount is 10 but this data directory was laid out with 3"},
		{1, "store.folderCount is 1 but this data directory was laid out with 3"},
	} {
		b, err := Open(Options{Dir: dir, FolderCount: tc.count})
		switch {
		case tc.want == "" && err != nil:
			t.Fatalf("folderCount %d: %v", tc.count, err)
		case tc.want == "":
			b.Close()
		case !errors.Is(err, ErrFolderCount) || !strings.Contains(err.Error(), tc.want):
			t.Fatalf("folderCount %d: err %v, want ErrFolderCount with %q", tc.count, err, tc.want)
		}
	}
	// Refused opens must not have created the other count's buckets.
	if _, err := os.Stat(filepath.Join(dir, "topic", "9")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("buckets of a refused folderCount were created: %v", err)
	}
	// The topic directory is where 3 puts it.
	if _, err := os.Stat(topicblock.Dir(filepath.Join(dir, "topic"), []byte("t"), 3)); err != nil {
		t.Fatal(err)
	}
}
