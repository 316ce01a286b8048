package broker

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestCloseWaitsForTrashRemoval: the files of a deleted topic are removed
// by a goroutine of their own, and Close must not return while one still
// runs (a caller that removes the data directory next, or a test's
// TempDir cleanup, would race it). The removal is held until Close
// returned or a second passed: a Close that does not wait returns first
// and finds it unfinished.
func TestCloseWaitsForTrashRemoval(t *testing.T) {
	dir := t.TempDir()
	started := make(chan struct{}, 8)
	closeReturned := make(chan struct{})
	var finished atomic.Int32
	b := openTest(t, dir, func(o *Options) {
		o.removeTrash = func(p string) error {
			started <- struct{}{}
			select {
			case <-closeReturned:
			case <-time.After(time.Second):
			}
			err := os.RemoveAll(p)
			finished.Add(1)
			return err
		}
	})
	ctx := context.Background()
	if _, err := b.CreateTopic(ctx, []byte("gone"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, []byte("gone"), rec("m"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DeleteTopic(ctx, []byte("gone")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the deleted topic's trash removal did not start")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	n := finished.Load()
	close(closeReturned)
	if n != 1 {
		t.Fatalf("Close returned with %d of 1 trash removals finished", n)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "trash"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("trash not empty after Close: %d entries, first %s", len(ents), ents[0].Name())
	}
}
