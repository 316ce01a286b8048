package broker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/smssmq/smss/topicstore"
)

// Regression (found by cmd/smss-torture): a master killed right after a
// topic delete leaves the topic's directory in the trash until its
// background removal runs. If the checkpoint is older than the topic's
// create, recovery replays the create (making an empty directory) and the
// delete, whose move to the trash then collided with the old entry: the
// empty directory stayed behind as an orphan ("BUG: deleted topic's files
// could not be moved").
func TestReplayedDeleteWithLeftoverTrash(t *testing.T) {
	src := t.TempDir()
	b := openTest(t, src, func(o *Options) { o.Logger = quietLog })
	ctx := context.Background()
	if _, err := b.CreateTopic(ctx, []byte("gone"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, []byte("gone"), rec("x"), 1); err != nil {
		t.Fatal(err)
	}
	delID, err := b.DeleteTopic(ctx, []byte("gone"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The state of a kill after the delete: the checkpoint still before
	// the create, and the trashed directory not yet removed.
	dir, err := oldCheckpointCopy(src)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	leftover := filepath.Join(dir, "trash", strconv.FormatInt(delID, 10)+"-gone")
	if err := os.MkdirAll(filepath.Join(leftover, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	b = openTest(t, dir, func(o *Options) { o.Logger = logs.logger() })
	defer b.Close()
	topicDir := topicstore.Dir(filepath.Join(dir, "topic"), []byte("gone"), 10)
	if _, err := os.Stat(topicDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted topic's directory is still there after recovery (%v); log:\n%s", err, logs.String())
	}
}

// syncBuf collects log output for failure messages.
type syncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func (s *syncBuf) logger() *slog.Logger { return slog.New(slog.NewTextHandler(s, nil)) }
