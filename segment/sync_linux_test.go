//go:build linux

package segment

import (
	"os"
	"testing"
	"time"
)

// Sync skips the runtime (a raw fdatasync) while syncs are fast, goes
// through os.File.Sync after a slow one until one is fast again, and never
// bypasses a File that is not an *os.File (the power-cut test's recorder).
func TestSyncRawWhileFast(t *testing.T) {
	raws := 0
	defer func(f func(*os.File) error, limit time.Duration) { rawSync, rawSyncLimit = f, limit }(rawSync, rawSyncLimit)
	rawSync = func(f *os.File) error { raws++; return rawFdatasync(f) }
	l, err := Open(Options{Dir: t.TempDir(), Decode: testDecode})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	id := int64(0)
	step := func(limit time.Duration, wantRaws int, wantSlow bool) {
		t.Helper()
		rawSyncLimit = limit
		id++
		if _, err := l.Append(testBlock(id, id, 10), []Mark{{EventID: id}}); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		if raws != wantRaws || l.slowSync != wantSlow {
			t.Fatalf("sync %d (limit %v): raw fdatasyncs %d, slow %v; want %d, %v", id, limit, raws, l.slowSync, wantRaws, wantSlow)
		}
	}
	step(time.Hour, 1, false) // fast: raw
	step(time.Hour, 2, false)
	step(-1, 3, true)         // this one is raw, and counts as slow
	step(-1, 3, true)         // through the runtime, still slow
	step(time.Hour, 3, false) // through the runtime, fast again
	step(time.Hour, 4, false) // raw again

	data, err := os.ReadFile(l.Path(l.Files()[0]))
	if err != nil {
		t.Fatal(err)
	}
	if want := 6 * len(testBlock(1, 1, 10)); len(data) != want {
		t.Fatalf("file holds %d bytes after 6 synced appends, want %d", len(data), want)
	}

	// A File that is not an *os.File is always synced through its own Sync.
	rec := &syncRecorder{}
	l2, err := Open(Options{Dir: t.TempDir(), Decode: testDecode, OpenFile: rec.open})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	rawSyncLimit = time.Hour
	if _, err := l2.Append(testBlock(1, 1, 10), []Mark{{EventID: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := l2.Sync(); err != nil {
		t.Fatal(err)
	}
	if raws != 4 || rec.syncs != 1 {
		t.Fatalf("wrapped file: raw fdatasyncs %d (want 4, unchanged), wrapper syncs %d (want 1)", raws, rec.syncs)
	}
}

// syncRecorder opens real files behind a File that is not an *os.File and
// counts their Syncs.
type syncRecorder struct{ syncs int }

type recordedFile struct {
	*os.File
	r *syncRecorder
}

func (f recordedFile) Sync() error { f.r.syncs++; return f.File.Sync() }

func (r *syncRecorder) open(path string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return nil, err
	}
	return recordedFile{File: f, r: r}, nil
}
