package broker

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/topicblock"
)

// dirState is every file and directory under dir with a hash of its bytes.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%x", sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffState(a, b map[string]string) []string {
	var d []string
	for k, v := range a {
		if b[k] != v {
			d = append(d, "changed or removed: "+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "created: "+k)
		}
	}
	sort.Strings(d)
	return d
}

// readOnlyOpts is a guard with a fake statfs: disk sets the free space.
func readOnlyOpts(disk *fakeDisk, slave bool) func(*Options) {
	return func(o *Options) {
		o.MinFreeBytes, o.Statfs, o.DiskCheckInterval = 16<<20, disk.statfs, 5*time.Millisecond
		o.Logger, o.Slave = quietLog, slave
	}
}

// subscribeN reads n messages of topic from the start.
func subscribeN(t *testing.T, b *Broker, topic string, n int) []string {
	t.Helper()
	s, err := b.Subscribe([]byte(topic), []byte("reader"), 0)
	if err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	defer s.Close()
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		area, k, err := s.Next(context.Background(), nil, 100, 200*time.Millisecond)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if k == 0 {
			continue
		}
		if err := protocol.WalkSubMessages(area, k, func(_ int64, body []byte) { got = append(got, string(body)) }); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// TestReadOnlyStart: a data directory that shut down cleanly, opened with
// less than minStartFree free, serves every stored message and refuses
// every write with the read-only 400, also after space returns; it changes
// no byte of the directory; a start with room accepts writes again.
func TestReadOnlyStart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	disk := &fakeDisk{}
	disk.free.Store(1 << 30)
	b := openTest(t, dir, readOnlyOpts(disk, false))
	var want []string
	for _, name := range []string{"t", "other"} {
		if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
	var last int64
	for i := range 20 {
		want = append(want, fmt.Sprintf("m%02d", i))
		id, err := b.Publish(ctx, []byte("t"), rec(want[i]), 1)
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	if _, err := b.PublishDelay(ctx, []byte("t"), rec("later"), 1, 60_000); err != nil {
		t.Fatal(err)
	}
	if err := b.SetCursor(ctx, []byte("t"), []byte("c"), 5); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	before := dirState(t, dir)

	disk.free.Store(8 << 10)
	b = openTest(t, dir, readOnlyOpts(disk, false))
	ro := b.ReadOnly()
	var be *protocol.BizError
	if !errors.Is(ro, ErrReadOnly) || !errors.As(ro, &be) || !strings.HasPrefix(be.Msg, "disk almost full: started read-only with 8 KiB free") ||
		!strings.Contains(be.Msg, "restart") {
		t.Fatalf("ReadOnly() = %v", ro)
	}
	if d := b.Disk(); !d.ReadOnly || !d.Low {
		t.Fatalf("Disk() = %+v", d)
	}
	if b.LastEventID() < last {
		t.Fatalf("last eventId %d, stored %d", b.LastEventID(), last)
	}
	ts, err := b.Topics()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ts {
		names = append(names, m.Name)
	}
	if fmt.Sprint(names) != fmt.Sprint([]string{CursorTopic, "other", "t"}) {
		t.Fatalf("topics %q", names)
	}
	if got := subscribeN(t, b, "t", len(want)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read %q, want %q", got, want)
	}
	writes := []struct {
		name string
		call func() error
	}{
		{"pub", func() error { _, err := b.Publish(ctx, []byte("t"), rec("x"), 1); return err }},
		{"delay", func() error { _, err := b.PublishDelay(ctx, []byte("t"), rec("x"), 1, 5000); return err }},
		{"create", func() error { _, err := b.CreateTopic(ctx, []byte("new"), 0); return err }},
		{"delete", func() error { _, err := b.DeleteTopic(ctx, []byte("other")); return err }},
		{"cursor set", func() error { return b.SetCursor(ctx, []byte("t"), []byte("c"), 9) }},
		{"cursor reset", func() error { return b.ResetCursor(ctx, []byte("t"), []byte("c")) }},
	}
	check := func(when string) {
		t.Helper()
		for _, w := range writes {
			err := w.call()
			var be *protocol.BizError
			if !errors.Is(err, ErrReadOnly) || !errors.As(err, &be) || be.Msg != ro.Error() {
				t.Errorf("%s %s: %v, want the read-only 400", w.name, when, err)
			}
		}
	}
	check("on a full disk")
	// Space returning does not make the start writable: badger is open
	// read-only and every topic log is a view.
	disk.free.Store(1 << 30)
	smsstest.WaitFor(t, countWait, "the disk reading above the watermark", func() bool { return !b.Disk().Low })
	check("after space returned")
	if d := b.Disk(); !d.ReadOnly {
		t.Fatalf("Disk() = %+v after space returned", d)
	}
	if got := subscribeN(t, b, "t", len(want)); len(got) != len(want) {
		t.Fatalf("read %d of %d after the refusals", len(got), len(want))
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if d := diffState(before, dirState(t, dir)); len(d) > 0 {
		t.Fatalf("a read-only start changed the data directory:\n%s", strings.Join(d, "\n"))
	}

	// A restart with room resumes writes after the last stored eventId.
	b = openTest(t, dir, readOnlyOpts(disk, false))
	defer b.Close()
	if b.ReadOnly() != nil {
		t.Fatalf("read-only with room: %v", b.ReadOnly())
	}
	id, err := b.Publish(ctx, []byte("t"), rec("after"), 1)
	if err != nil || id <= last {
		t.Fatalf("publish after the restart: id %d (stored up to %d), %v", id, last, err)
	}
}

// TestReadOnlySlave: a slave started read-only refuses replicated blocks at
// once (it cannot write them; waiting for space would not help) and
// promotion, and serves what it holds.
func TestReadOnlySlave(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	disk := &fakeDisk{}
	disk.free.Store(1 << 30)
	b := openTest(t, dir, readOnlyOpts(disk, true))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	disk.free.Store(0)
	b = openTest(t, dir, readOnlyOpts(disk, true))
	defer b.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"apply", func() error { _, err := b.ApplyReplicated(ctx, []byte("whatever")); return err }},
		{"apply batch", func() error { _, _, err := b.ApplyReplicatedBatch(ctx, [][]byte{[]byte("x")}); return err }},
		{"promote", func() error { _, err := b.Promote(ctx); return err }},
	} {
		if err := tc.call(); !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s: %v, want ErrReadOnly", tc.name, err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("a refusal waited for space")
	}
	if !b.IsSlave() {
		t.Fatal("promoted")
	}
}

// newestLog is the path of the highest-numbered .log file in dir.
func newestLog(t *testing.T, dir string) string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	best, bestID := "", int64(-1)
	for _, p := range paths {
		id, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(p), ".log"), 10, 64)
		if err == nil && id > bestID {
			if st, err := os.Stat(p); err == nil && st.Size() > 0 {
				best, bestID = p, id
			}
		}
	}
	if best == "" {
		t.Fatalf("no log file in %s", dir)
	}
	return best
}

func appendJunk(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("\x00\x00\x01torn")); err != nil {
		t.Fatal(err)
	}
}

// TestReadOnlyStartRefused: when a read-only start would have to write
// (a crashed run's badger memtable log, recovery cutting a torn tail), the
// start is refused as before, saying why, and nothing is changed. A topic
// without a directory (the original server creates none until the first
// write) needs no writing: that start serves.
func TestReadOnlyStartRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// prepare makes dst a data directory from the open broker b on
		// src (which the test closes after).
		prepare func(t *testing.T, b *Broker, src, dst string)
		want    []string
		notErr  error
	}{
		{"crashed", func(t *testing.T, b *Broker, src, dst string) {
			copyTree(t, src, dst) // as a crash leaves it: badger's memtable log in use
		}, []string{"clean shutdown", "open meta read-only"}, ErrNotClean},
		{"torn binlog tail", func(t *testing.T, b *Broker, src, dst string) {
			b.Close()
			copyTree(t, src, dst)
			appendJunk(t, newestLog(t, filepath.Join(dst, "binlog")))
		}, []string{"binlog has a torn or damaged tail"}, nil},
		{"topic without a directory", func(t *testing.T, b *Broker, src, dst string) {
			if _, err := b.CreateTopic(context.Background(), []byte("never"), 0); err != nil {
				t.Fatal(err)
			}
			b.Close()
			copyTree(t, src, dst)
			// As the original server leaves a topic created and never
			// written: a read-only start serves the others.
			if err := os.Remove(topicblock.Dir(filepath.Join(dst, "topic"), []byte("never"), 10)); err != nil {
				t.Fatal(err)
			}
		}, nil, nil},
		{"torn topic tail", func(t *testing.T, b *Broker, src, dst string) {
			b.Close()
			copyTree(t, src, dst)
			appendJunk(t, newestLog(t, topicblock.Dir(filepath.Join(dst, "topic"), []byte("t"), 10)))
		}, []string{"topic t has a torn or damaged tail"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			src, dst := t.TempDir(), t.TempDir()
			disk := &fakeDisk{}
			disk.free.Store(1 << 30)
			b := openTest(t, src, readOnlyOpts(disk, false))
			defer b.Close()
			if _, err := b.CreateTopic(ctx, []byte("t"), 0); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if _, err := b.Publish(ctx, []byte("t"), rec(fmt.Sprint(i)), 1); err != nil {
					t.Fatal(err)
				}
			}
			tc.prepare(t, b, src, dst)
			before := dirState(t, dst)
			disk.free.Store(4 << 10)
			o := Options{Dir: dst, FlushLevel: 1}
			readOnlyOpts(disk, false)(&o)
			rb, err := Open(o)
			if tc.want == nil {
				// Not a refusal: the start is read-only and serves.
				if err != nil {
					t.Fatal(err)
				}
				if got := subscribeN(t, rb, "t", 5); len(got) != 5 || rb.ReadOnly() == nil {
					t.Fatalf("read %d of 5, read-only %v", len(got), rb.ReadOnly())
				}
				if tc.name == "topic without a directory" {
					// A topic the original created and never wrote is an
					// empty stream, not an error: nothing can be written
					// to it while the broker is read-only.
					sub, err := rb.Subscribe([]byte("never"), []byte("t"), 0)
					if err != nil {
						t.Fatalf("subscribe to the topic without a directory: %v", err)
					}
					_, n, err := sub.Next(ctx, nil, 10, 50*time.Millisecond)
					sub.Close()
					if err != nil || n != 0 {
						t.Fatalf("topic without a directory: %d messages, err %v; want an empty stream", n, err)
					}
				}
				rb.Close()
				if d := diffState(before, dirState(t, dst)); len(d) > 0 {
					t.Fatalf("a read-only start changed the data directory:\n%s", strings.Join(d, "\n"))
				}
				return
			}
			if err == nil {
				rb.Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "4 KiB free") {
				t.Fatalf("error %v, want ErrDiskFull naming the free space", err)
			}
			if tc.notErr == nil && !errors.Is(err, ErrNotClean) {
				t.Errorf("error %v, want ErrNotClean", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if d := diffState(before, dirState(t, dst)); len(d) > 0 {
				t.Fatalf("a refused read-only start changed the data directory:\n%s", strings.Join(d, "\n"))
			}
			t.Logf("refused: %v", err)
		})
	}
}
