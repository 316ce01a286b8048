package broker

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/segment"
)

// faults decides, per file path, whether the next write or fsync fails;
// beforeSync, if set, runs before every fsync (a test may hold it there).
type faults struct {
	mu         sync.Mutex
	writeFail  func(path string) bool
	syncFail   func(path string) bool
	beforeSync func(path string)
}

type faultFile struct {
	*os.File
	f    *faults
	path string
}

func (f *faults) open(path string, flag int, perm os.FileMode) (segment.File, error) {
	of, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: of, f: f, path: path}, nil
}

func (ff *faultFile) Write(p []byte) (int, error) {
	ff.f.mu.Lock()
	fail := ff.f.writeFail != nil && ff.f.writeFail(ff.path)
	ff.f.mu.Unlock()
	if fail {
		// A partial write, then the error: the worst case for rollback.
		n, _ := ff.File.Write(p[:len(p)/2])
		return n, errors.New("injected write failure (ENOSPC)")
	}
	return ff.File.Write(p)
}

func (ff *faultFile) Sync() error {
	ff.f.mu.Lock()
	fail := ff.f.syncFail != nil && ff.f.syncFail(ff.path)
	before := ff.f.beforeSync
	ff.f.mu.Unlock()
	if before != nil {
		before(ff.path)
	}
	if fail {
		return errors.New("injected fsync failure (EIO)")
	}
	return ff.File.Sync()
}

func (f *faults) set(write, sync func(string) bool) {
	f.mu.Lock()
	f.writeFail, f.syncFail = write, sync
	f.mu.Unlock()
}

func TestWriteFaultsRollBack(t *testing.T) {
	ctx := context.Background()
	for _, target := range []string{"/binlog/", "/topic/"} {
		t.Run(strings.Trim(target, "/"), func(t *testing.T) {
			dir := t.TempDir()
			f := &faults{}
			b := openTest(t, dir, func(o *Options) { o.OpenFile = f.open })
			b.CreateTopic(ctx, []byte("a"), 0)
			ok1, err := b.Publish(ctx, []byte("a"), rec("before"), 1)
			if err != nil {
				t.Fatal(err)
			}
			f.set(func(p string) bool { return strings.Contains(p, target) }, nil)
			if _, err := b.Publish(ctx, []byte("a"), append(rec("lost1"), rec("lost2")...), 2); err == nil {
				t.Fatal("publish succeeded through a failing write")
			}
			f.set(nil, nil)
			ok2, err := b.Publish(ctx, []byte("a"), rec("after"), 1)
			if err != nil {
				t.Fatalf("publish after the fault cleared: %v", err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			// Nothing of the failed group is stored; the rest is whole.
			b = openTest(t, dir, nil)
			b.Close()
			ids, recs := readTopic(t, dir, "a")
			if !equalIDs(ids, []int64{ok1, ok2}) {
				t.Fatalf("topic ids %v, want [%d %d]", ids, ok1, ok2)
			}
			for _, r := range recs {
				if strings.Contains(string(r), "lost") {
					t.Fatalf("failed publish visible: %q", r)
				}
			}
			if got := binlogPubIDs(t, dir)["a"]; !equalIDs(got, []int64{ok1, ok2}) {
				t.Fatalf("binlog ids %v", got)
			}
		})
	}
}

func TestFailedFsyncIsFatal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := &faults{}
	b := openTest(t, dir, func(o *Options) { o.OpenFile = f.open; o.FlushLevel = 2 })
	b.CreateTopic(ctx, []byte("a"), 0)
	acked, err := b.Publish(ctx, []byte("a"), rec("synced"), 1)
	if err != nil {
		t.Fatal(err)
	}
	f.set(nil, func(string) bool { return true })
	if _, err := b.Publish(ctx, []byte("a"), rec("unsynced"), 1); err == nil {
		t.Fatal("publish acknowledged although its fsync failed")
	}
	select {
	case err := <-b.Fatal():
		if !errors.Is(err, segment.ErrFatal) {
			t.Fatalf("fatal error %v", err)
		}
	default:
		t.Fatal("no fatal error reported")
	}
	f.set(nil, nil)
	// Never continue past a failed fsync, even once the disk recovers.
	if _, err := b.Publish(ctx, []byte("a"), rec("later"), 1); !errors.Is(err, ErrStopped) {
		t.Fatalf("publish after fatal: %v", err)
	}
	b.Close()
	b = openTest(t, dir, nil)
	defer b.Close()
	ids, _ := readTopic(t, dir, "a")
	if len(ids) == 0 || ids[0] != acked {
		t.Fatalf("acknowledged message lost: %v", ids)
	}
	if id, err := b.Publish(ctx, []byte("a"), rec("next"), 1); err != nil || id <= ids[len(ids)-1] {
		t.Fatalf("publish after restart: %d %v", id, err)
	}
}

// At flushLevel 1 the fsync runs in the background; its failure must still
// stop the writer for good.
func TestBackgroundFsyncFailureIsFatal(t *testing.T) {
	ctx := context.Background()
	f := &faults{}
	b := openTest(t, t.TempDir(), func(o *Options) {
		o.OpenFile = f.open
		o.FlushLevel = 1
		o.FlushInterval = 20 * time.Millisecond
	})
	defer b.Close()
	b.CreateTopic(ctx, []byte("a"), 0)
	f.set(nil, func(string) bool { return true })
	if _, err := b.Publish(ctx, []byte("a"), rec("x"), 1); err != nil {
		t.Fatalf("level-1 publish waits for no fsync: %v", err)
	}
	select {
	case err := <-b.Fatal():
		if !errors.Is(err, segment.ErrFatal) {
			t.Fatalf("fatal error %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("failed background fsync not reported")
	}
	if _, err := b.Publish(ctx, []byte("a"), rec("y"), 1); !errors.Is(err, ErrStopped) {
		t.Fatalf("publish after a failed fsync: %v", err)
	}
}
