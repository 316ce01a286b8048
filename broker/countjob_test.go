package broker

// Tests of the background count (msgcount/job.go): files of earlier runs,
// sidecars, Close during a count, progress and failures.

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker/msgcount"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/segment"
)

// TestMessageCountRestart: the files of a previous run are counted by the
// background goroutine (from sidecars when they are sound, else by reading
// them), and the count goes on with the new run's messages.
func TestMessageCountRestart(t *testing.T) {
	dir := t.TempDir()
	opts := func(o *Options) { o.MaxLogSize = 1000; o.Logger = quietLog }
	b := openCounted(t, dir, opts)
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{"a": publishMix(t, b, "a", 200, 7), "b": publishMix(t, b, "b", 30, 1)}
	for name, n := range want {
		// Counted before Close, so that Close can save every file's.
		if got := waitMessages(t, b, name); got != n {
			t.Fatalf("%s: %d messages, want %d", name, got, n)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	tdir := topicDirOf(dir, "a")
	logs := fileIDs(t, tdir, ".log")
	if len(logs) < 6 {
		t.Fatalf("only %d files: the test needs several", len(logs))
	}
	var counted sync.Map // "topic/id" of the files the background goroutine read
	hooked := withCountHook(opts, func(topic string, file int64, _ <-chan struct{}) {
		counted.Store(topic+"/"+strconv.FormatInt(file, 10), true)
	})
	readFiles := func() int {
		n := 0
		counted.Range(func(any, any) bool { n++; return true })
		counted.Clear()
		return n
	}
	damage := map[string]func(path string, data []byte) []byte{
		"size mismatch": func(_ string, data []byte) []byte {
			c, _ := msgcount.DecodeSidecar(data)
			c.Size++
			return msgcount.EncodeSidecar(c)
		},
		"other first eventId": func(_ string, data []byte) []byte {
			c, _ := msgcount.DecodeSidecar(data)
			c.FirstEventID += 1000
			return msgcount.EncodeSidecar(c)
		},
		"flipped bit": func(_ string, data []byte) []byte {
			data[20] ^= 1
			return data
		},
		"cut short": func(_ string, data []byte) []byte { return data[:10] },
	}
	for _, step := range []struct {
		name    string
		prepare func(t *testing.T)
		read    int // files the background goroutine must read, -1: all
	}{
		{"sidecars from Close", func(*testing.T) {}, 0},
		{"no sidecars", func(t *testing.T) {
			for _, id := range logs {
				os.Remove(filepath.Join(tdir, msgcount.SidecarName(id)))
			}
		}, -1},
		{"damaged sidecars", func(t *testing.T) {
			i := 0
			for _, how := range []string{"size mismatch", "other first eventId", "flipped bit", "cut short"} {
				p := filepath.Join(tdir, msgcount.SidecarName(logs[i]))
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, damage[how](p, data), 0o644); err != nil {
					t.Fatal(err)
				}
				i++
			}
			// A sidecar of no file, and one of a file after the last.
			for _, id := range []int64{logs[len(logs)-1] + 5, 9999} {
				os.WriteFile(filepath.Join(tdir, msgcount.SidecarName(id)), msgcount.EncodeSidecar(msgcount.Sidecar{Size: 10, Blocks: 1, FirstEventID: 1}), 0o644)
			}
		}, 4},
	} {
		t.Run(step.name, func(t *testing.T) {
			step.prepare(t)
			readFiles()
			b := openCounted(t, dir, hooked)
			defer b.Close()
			for name, n := range want {
				if got := waitMessages(t, b, name); got != n {
					t.Fatalf("%s: %d messages, want %d", name, got, n)
				}
			}
			wantRead := step.read
			if wantRead < 0 {
				wantRead = len(logs)
			}
			if got := readFiles(); got != wantRead {
				t.Fatalf("the background goroutine read %d files, want %d", got, wantRead)
			}
			// The new run's messages add up, in a new file (docs/protocol.md §5.2).
			want["a"] += publishMix(t, b, "a", 20, 3)
			if got := waitMessages(t, b, "a"); got != want["a"] {
				t.Fatalf("after new publishes %d messages, want %d", got, want["a"])
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if disk := diskMessages(t, dir, "a"); disk != want["a"] {
				t.Fatalf("disk %d, count %d", disk, want["a"])
			}
			logs = fileIDs(t, tdir, ".log")
			cnts := fileIDs(t, tdir, ".cnt")
			if len(logs) != len(cnts) || logs[0] != cnts[0] || logs[len(logs)-1] != cnts[len(cnts)-1] {
				t.Fatalf("after Close: log files %v, sidecars %v", logs, cnts)
			}
		})
	}
}

// TestMessageCountRecoveredFile: start-up recovery appends the messages the
// binlog has and the topic lost to a new file, which the writer goes on
// appending to. Its first part was not written by the writer and is
// counted by the background goroutine.
func TestMessageCountRecoveredFile(t *testing.T) {
	src := t.TempDir()
	b := openCounted(t, src, func(o *Options) { o.Logger = quietLog })
	ctx := context.Background()
	b.CreateTopic(ctx, []byte("t"), 0)
	first := publishMix(t, b, "t", 40, 5)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ids, _ := readTopic(t, src, "t")
	lastRecovered := ids[len(ids)-1]
	// A copy whose checkpoint is from before the publishes and whose
	// topic file lost its last blocks: the replay appends them again.
	dir, err := oldCheckpointCopy(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // after the brokers' Close (cleanups run last first)
	tdir := topicDirOf(dir, "t")
	last := filepath.Join(tdir, "0.log")
	offs := blockOffsets(t, last, decodeTopic)
	if err := os.Truncate(last, int64(offs[len(offs)/2])); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(tdir, msgcount.SidecarName(0)))

	b = openCounted(t, dir, func(o *Options) { o.Logger = quietLog })
	defer b.Close()
	if got := waitMessages(t, b, "t"); got != first {
		t.Fatalf("after recovery %d messages, want %d", got, first)
	}
	more := publishMix(t, b, "t", 25, 4)
	if got := waitMessages(t, b, "t"); got != first+more {
		t.Fatalf("%d messages, want %d", got, first+more)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The writer went on with the file recovery appended to (its last
	// block is the last one recovered, its first one the writer's): the
	// case this test is about.
	logs := fileIDs(t, tdir, ".log")
	newest := filepath.Join(tdir, segment.FileName(logs[len(logs)-1]))
	if ids := fileEventIDs(t, newest); !slices.Contains(ids, lastRecovered) || ids[len(ids)-1] <= lastRecovered {
		t.Fatalf("the writer did not go on with the recovered file: files %v, the newest holds eventIds %v", logs, ids)
	}
	if disk := diskMessages(t, dir, "t"); disk != first+more {
		t.Fatalf("disk %d, want %d", disk, first+more)
	}
	b = openCounted(t, dir, func(o *Options) { o.Logger = quietLog })
	if got := waitMessages(t, b, "t"); got != first+more {
		t.Fatalf("restarted: %d messages, want %d", got, first+more)
	}
}

// fileEventIDs lists the eventIds of a topic file's blocks.
func fileEventIDs(t *testing.T, path string) []int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for off := 0; off < len(data); {
		id, _, n, err := decodeTopic(data[off:])
		if err != nil {
			t.Fatalf("%s at %d: %v", path, off, err)
		}
		ids = append(ids, id)
		off += n
	}
	return ids
}

// TestMessageCountCloseDuringCount: Close interrupts a background count
// (it does not wait for the files to be read) and saves nothing it did not
// finish counting.
func TestMessageCountCloseDuringCount(t *testing.T) {
	dir := t.TempDir()
	opts := func(o *Options) { o.MaxLogSize = 400; o.Logger = quietLog }
	b := openCounted(t, dir, opts)
	b.CreateTopic(context.Background(), []byte("t"), 0)
	publishMix(t, b, "t", 200, 3)
	b.Close()
	tdir := topicDirOf(dir, "t")
	for _, id := range fileIDs(t, tdir, ".cnt") {
		os.Remove(filepath.Join(tdir, msgcount.SidecarName(id)))
	}
	if n := len(fileIDs(t, tdir, ".log")); n < 10 {
		t.Fatalf("%d files; the test needs many", n)
	}

	started := make(chan struct{})
	var calls atomic.Int64
	var once sync.Once
	b = openCounted(t, dir, withCountHook(opts, func(_ string, _ int64, stop <-chan struct{}) {
		calls.Add(1)
		once.Do(func() {
			close(started)
			// Hold this count until Close asks it to stop.
			select {
			case <-stop:
			case <-time.After(countWait):
			}
		})
	}))
	select {
	case <-started:
	case <-time.After(countWait):
		t.Fatal("the background count did not start")
	}
	if st, _ := b.TopicStats("t"); st.Messages != -1 {
		t.Fatalf("%d messages while the count runs, want -1", st.Messages)
	}
	begin := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Fatalf("Close took %v during a count", took)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the count went on after Close: %d checks, want 1", n)
	}
	if cnts := fileIDs(t, tdir, ".cnt"); len(cnts) != 0 {
		t.Fatalf("sidecars %v saved for files whose count was interrupted", cnts)
	}
}

// TestMessageCountProgressLog: a count that takes long says so.
func TestMessageCountProgressLog(t *testing.T) {
	dir := t.TempDir()
	b := openCounted(t, dir, func(o *Options) { o.MaxLogSize = 400; o.Logger = quietLog })
	b.CreateTopic(context.Background(), []byte("t"), 0)
	want := publishMix(t, b, "t", 100, 3)
	b.Close()
	tdir := topicDirOf(dir, "t")
	for _, id := range fileIDs(t, tdir, ".cnt") {
		os.Remove(filepath.Join(tdir, msgcount.SidecarName(id)))
	}
	logs := &smsstest.SyncBuffer{}
	b = openCounted(t, dir, func(o *Options) {
		o.MaxLogSize = 400
		o.Logger = textLogger(logs)
		o.counts.ProgressEvery = time.Nanosecond // every check is "5 s later"
	})
	defer b.Close()
	if got := waitMessages(t, b, "t"); got != want {
		t.Fatalf("%d messages, want %d", got, want)
	}
	smsstest.WaitFor(t, countWait, "progress and summary logged", func() bool {
		s := logs.String()
		return strings.Contains(s, "counting topic messages") && strings.Contains(s, "topic messages counted")
	})
}

// TestMessageCountFailure: a file that cannot be counted leaves the count
// unknown, is logged, and is not retried at once.
func TestMessageCountFailure(t *testing.T) {
	dir := t.TempDir()
	opts := func(o *Options) { o.MaxLogSize = 400; o.Logger = quietLog }
	b := openCounted(t, dir, opts)
	b.CreateTopic(context.Background(), []byte("t"), 0)
	publishMix(t, b, "t", 60, 2)
	b.Close()
	tdir := topicDirOf(dir, "t")
	logs := fileIDs(t, tdir, ".log")
	for _, id := range fileIDs(t, tdir, ".cnt") {
		os.Remove(filepath.Join(tdir, msgcount.SidecarName(id)))
	}
	// Damage a sealed file's middle: readers refuse it, and so does the
	// count (recovery only looks at the newest file's tail).
	p := filepath.Join(tdir, segment.FileName(logs[1]))
	offs := blockOffsets(t, p, decodeTopic)
	zeroFill(t, p, offs[1], offs[1]+4) // a block length of 0

	var reads atomic.Int64
	out := &smsstest.SyncBuffer{}
	b = openCounted(t, dir, withCountHook(func(o *Options) { opts(o); o.Logger = textLogger(out) }, func(_ string, file int64, _ <-chan struct{}) {
		if file == logs[1] {
			reads.Add(1)
		}
	}))
	defer b.Close()
	smsstest.WaitFor(t, countWait, "failure logged", func() bool { return strings.Contains(out.String(), "counting topic messages failed") })
	passes := b.stats.counts.Passes
	// Stats calls wake the background goroutine: several more passes
	// must not read the file again.
	after := passes() + 3
	smsstest.WaitFor(t, countWait, "more passes", func() bool {
		if st, _ := b.TopicStats("t"); st.Messages != -1 {
			t.Fatalf("%d messages counted over a damaged file", st.Messages)
		}
		return passes() >= after
	})
	if n := reads.Load(); n != 1 {
		t.Fatalf("the damaged file was read %d times, want 1 until the retry delay", n)
	}
}
