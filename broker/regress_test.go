package broker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/rchar"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
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
	logs := &smsstest.SyncBuffer{}
	b = openTest(t, dir, func(o *Options) { o.Logger = textLogger(logs) })
	defer b.Close()
	topicDir := topicblock.Dir(filepath.Join(dir, "topic"), []byte("gone"), 10)
	if _, err := os.Stat(topicDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted topic's directory is still there after recovery (%v); log:\n%s", err, logs.String())
	}
}

// textLogger logs as text into w (a buffer shown in failure messages).
func textLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Regression (found by the e2e fault test, a slave that took over 30 s to
// restart): replay compared each binlog record with the topic file by
// reading a fresh 256 KiB chunk at the cursor, so a crash with a backlog of
// N records since the checkpoint cost N × 256 KiB of reads before the
// server listened. Replay must read the store about once.
func TestReplayReadsTopicFilesOnce(t *testing.T) {
	src := t.TempDir()
	b := openTest(t, src, func(o *Options) { o.Logger = quietLog })
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
	var batch []byte
	for i := 0; i < 100; i++ {
		batch = append(batch, rec("message "+strconv.Itoa(i))...)
	}
	for i := 0; i < 20; i++ {
		for _, name := range []string{"a", "b"} {
			if _, err := b.Publish(ctx, []byte(name), batch, 100); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Publish(ctx, []byte(name), rec("single"), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	want := binlogPubIDs(t, src)
	dir, err := oldCheckpointCopy(src) // every record is compared again
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store := dirBytes(t, dir)

	defer func(d time.Duration) { replayProgressEvery = d }(replayProgressEvery)
	replayProgressEvery = 0 // and it reports progress
	before := rchar.Read(t)
	logs := &smsstest.SyncBuffer{}
	b = openTest(t, dir, func(o *Options) { o.Logger = textLogger(logs) })
	read := rchar.Read(t) - before
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "binlog replayed") || !strings.Contains(logs.String(), "replaying binlog") ||
		strings.Contains(logs.String(), "truncating") {
		t.Fatalf("expected a replay that keeps every block; log:\n%s", logs.String())
	}
	for _, name := range []string{"a", "b"} {
		if ids, _ := readTopic(t, dir, name); !equalIDs(ids, want[name]) {
			t.Fatalf("topic %s holds %d messages after the replay, want %d", name, len(ids), len(want[name]))
		}
	}
	// 4,040 records were compared; 256 KiB each would be about 1 GiB.
	if limit := 4*store + 8<<20; read > limit {
		t.Fatalf("opening a %d-byte store read %d bytes (limit %d): replay rereads the topic files", store, read, limit)
	}
	t.Logf("store %d bytes, recovery read %d", store, read)
}

// Regression: locating a subscriber's or a slave's start read a 256 KiB
// chunk for every block it looked at (a file's first eventId, the check of
// an index entry, the scan from it), so each subscribe and replica start
// read and allocated over half a MiB to find a position within an index
// interval.
func TestStartPositionsReadLittle(t *testing.T) {
	dir := t.TempDir()
	b := openTest(t, dir, func(o *Options) { o.Logger = quietLog; o.MaxLogSize = 1 << 20 })
	defer b.Close()
	ctx := context.Background()
	if _, err := b.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	var batch []byte
	for i := 0; i < 10; i++ {
		batch = append(batch, rec(strings.Repeat("m", 150)+strconv.Itoa(i))...)
	}
	var firsts []int64
	for i := 0; i < 1500; i++ {
		id, err := b.Publish(ctx, []byte("t"), batch, 10)
		if err != nil {
			t.Fatal(err)
		}
		firsts = append(firsts, id)
	}
	const limit = 128 << 10
	for i, at := range []int{750, 200, 1400} {
		after := firsts[at] + 9 // the last eventId of a binlog block
		before := rchar.Read(t)
		s, err := b.Subscribe([]byte("t"), []byte("w"+strconv.Itoa(i)), after)
		if err != nil {
			t.Fatal(err)
		}
		read := rchar.Read(t) - before
		s.Close()
		if read > limit {
			t.Fatalf("subscribe after %d read %d bytes (limit %d)", after, read, limit)
		}
		before = rchar.Read(t)
		rs, err := b.ReplicaStream(after)
		if err != nil {
			t.Fatal(err)
		}
		read = rchar.Read(t) - before
		rs.Close()
		if read > limit {
			t.Fatalf("replica start after %d read %d bytes (limit %d)", after, read, limit)
		}
	}
}

// Regression (found by smss-torture at full speed): submitters held the
// broker's topic lock (shared) while they waited for room in a full
// command queue, and the writer takes that lock exclusively to add or
// remove a topic or to open a topic's log. A slave applying a catch-up
// batch longer than worker.buffSize with a create or delete in it (or a
// master with more waiting publishers than the queue holds) deadlocked:
// the writer waited for the lock, the submitters for the writer.
func TestFullQueueDoesNotDeadlockTheWriter(t *testing.T) {
	ctx := context.Background()
	mdir := t.TempDir()
	m := openTest(t, mdir, func(o *Options) { o.Logger = quietLog })
	pub := func(i int) {
		if _, err := m.Publish(ctx, []byte("t"+strconv.Itoa(i%4)), rec("m"+strconv.Itoa(i)), 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ {
		if _, err := m.CreateTopic(ctx, []byte("t"+strconv.Itoa(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 30; i++ {
		pub(i)
	}
	if _, err := m.DeleteTopic(ctx, []byte("t1")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateTopic(ctx, []byte("t1"), 0); err != nil {
		t.Fatal(err)
	}
	for i := 30; i < 40; i++ {
		pub(i)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	var raws [][]byte
	bl, err := segment.Open(segment.Options{Dir: filepath.Join(mdir, "binlog"), Decode: decodeBinlog})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bl.Scan(segment.Position{}, func(_ segment.Position, _, _ int64, raw []byte) error {
		raws = append(raws, append([]byte(nil), raw...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("slave batch", func(t *testing.T) {
		s := openTest(t, t.TempDir(), func(o *Options) { o.Slave = true; o.BuffSize = 2; o.Logger = quietLog })
		defer s.Close()
		// Without the fix this waits until the context ends.
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		last, n, err := s.ApplyReplicatedBatch(c, raws)
		if err != nil || n != len(raws) {
			t.Fatalf("applied %d of %d blocks (last eventId %d): %v", n, len(raws), last, err)
		}
	})

	t.Run("master publishers", func(t *testing.T) {
		dir := t.TempDir()
		b := openTest(t, dir, func(o *Options) { o.BuffSize = 1; o.Logger = quietLog })
		for i := 0; i < 8; i++ {
			if _, err := b.CreateTopic(ctx, []byte("p"+strconv.Itoa(i)), 0); err != nil {
				t.Fatal(err)
			}
		}
		// Reopened, every topic's log is opened by the writer on its
		// first publish, under the topic lock.
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		b = openTest(t, dir, func(o *Options) { o.BuffSize = 1; o.Logger = quietLog })
		defer b.Close()
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					name := []byte("p" + strconv.Itoa((g+i)%8))
					if _, err := b.Publish(c, name, rec("x"), 1); err != nil {
						errs <- err
						return
					}
				}
				if g == 0 { // and topics come and go meanwhile
					for i := 0; i < 20; i++ {
						name := []byte("q" + strconv.Itoa(i))
						if _, err := b.CreateTopic(c, name, 0); err != nil {
							errs <- err
							return
						}
						if _, err := b.DeleteTopic(c, name); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("publish with a full queue: %v", err)
		}
	})
}
