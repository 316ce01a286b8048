package broker

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker/msgcount"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// countWait bounds every wait for a background count.
const countWait = 20 * time.Second

// waitMessages returns the topic's message count once it is known, failing
// the test if it stays unknown for countWait.
func waitMessages(t *testing.T, b *Broker, name string) int64 {
	t.Helper()
	deadline := time.Now().Add(countWait)
	for {
		st, ok := b.TopicStats(name)
		if !ok {
			t.Fatalf("topic %s unknown", name)
		}
		if st.Messages >= 0 {
			return st.Messages
		}
		if time.Now().After(deadline) {
			t.Fatalf("the message count of %s is still unknown after %v", name, countWait)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, with a deadline
	}
}

func topicDirOf(dir, name string) string {
	return topicblock.Dir(filepath.Join(dir, "topic"), []byte(name), 10)
}

// diskMessages counts the blocks of a topic's files straight from disk
// (the broker must be closed or idle).
func diskMessages(t *testing.T, dir, name string) int64 {
	t.Helper()
	ids, _ := readTopic(t, dir, name)
	return int64(len(ids))
}

// fileIDs lists the ids of the files in dir with the given extension.
func fileIDs(t *testing.T, dir, ext string) []int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, e := range ents {
		if s, ok := strings.CutSuffix(e.Name(), ext); ok {
			if id, err := strconv.ParseInt(s, 10, 64); err == nil {
				ids = append(ids, id)
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// publishMix publishes n messages to name in requests of 1..maxBatch
// records and returns how many it published.
func publishMix(t *testing.T, b *Broker, name string, n, maxBatch int) int64 {
	t.Helper()
	ctx := context.Background()
	sent := 0
	for i := 0; sent < n; i++ {
		k := min(1+i%maxBatch, n-sent)
		var recs []byte
		for j := 0; j < k; j++ {
			recs = append(recs, rec("m"+strconv.Itoa(sent+j)+strings.Repeat("x", (sent+j)%40))...)
		}
		if _, err := b.Publish(ctx, []byte(name), recs, k); err != nil {
			t.Fatal(err)
		}
		sent += k
	}
	return int64(sent)
}

// openCounted opens a broker that is closed when the test ends, however
// it ends (a second Close does nothing).
func openCounted(t *testing.T, dir string, mod func(*Options)) *Broker {
	t.Helper()
	b := openTest(t, dir, mod)
	t.Cleanup(func() { b.Close() })
	return b
}

// withCountHook adds h as the broker's count check hook (called by every
// progress check of a background count, with a channel closed when the
// counts stop) to the options mod sets.
func withCountHook(mod func(*Options), h func(topic string, file int64, stop <-chan struct{})) func(*Options) {
	return func(o *Options) {
		mod(o)
		o.counts.CheckHook = h
	}
}

func TestMessageCountWhilePublishing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxLog   int64
		messages int
		maxBatch int
	}{
		{"single records, one file", 1 << 20, 50, 1},
		{"batches, one file", 1 << 20, 300, 17},
		{"single records, a few rolls", 2000, 120, 1},
		{"batches, a few rolls", 2000, 120, 9},
		{"single records, many rolls", 300, 400, 1},
		{"batches larger than a file", 300, 500, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b := openCounted(t, dir, func(o *Options) { o.MaxLogSize = tc.maxLog; o.Logger = quietLog })
			defer b.Close()
			ctx := context.Background()
			if _, err := b.CreateTopic(ctx, []byte("t"), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := b.CreateTopic(ctx, []byte("empty"), 0); err != nil {
				t.Fatal(err)
			}
			if st, _ := b.TopicStats("empty"); st.Messages != 0 {
				t.Fatalf("empty topic: %d messages", st.Messages)
			}
			want := publishMix(t, b, "t", tc.messages, tc.maxBatch)
			files := len(fileIDs(t, topicDirOf(dir, "t"), ".log"))
			if files <= msgcount.Ring {
				// Every file is still in the writer's ring: the count
				// is known at once, without the background goroutine.
				if st, _ := b.TopicStats("t"); st.Messages != want {
					t.Fatalf("%d messages in %d files right after publishing, want %d", st.Messages, files, want)
				}
			}
			if got := waitMessages(t, b, "t"); got != want {
				t.Fatalf("%d messages in %d files, want %d", got, files, want)
			}
			// Another round on top of the counted files.
			want += publishMix(t, b, "t", tc.messages/2, tc.maxBatch)
			if got := waitMessages(t, b, "t"); got != want {
				t.Fatalf("after more publishes %d messages, want %d", got, want)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if disk := diskMessages(t, dir, "t"); disk != want {
				t.Fatalf("disk holds %d messages, count said %d", disk, want)
			}
			// Close saved a sidecar for every non-empty file.
			logs, cnts := fileIDs(t, topicDirOf(dir, "t"), ".log"), fileIDs(t, topicDirOf(dir, "t"), ".cnt")
			if len(logs) != len(cnts) {
				t.Fatalf("log files %v, count sidecars %v", logs, cnts)
			}
		})
	}
}

// TestMessageCountRetention: removing the oldest files the way retention
// does drops their messages from the count, and their sidecars go too.
func TestMessageCountRetention(t *testing.T) {
	dir := t.TempDir()
	opts := func(o *Options) { o.MaxLogSize = 600; o.Logger = quietLog }
	b := openCounted(t, dir, opts)
	ctx := context.Background()
	b.CreateTopic(ctx, []byte("t"), 0)
	publishMix(t, b, "t", 150, 4)
	b.Close() // seals the files and saves their sidecars
	b = openCounted(t, dir, opts)
	defer b.Close()
	publishMix(t, b, "t", 60, 3) // and some of this run's
	tdir := topicDirOf(dir, "t")
	total := diskMessages(t, dir, "t")
	if got := waitMessages(t, b, "t"); got != total {
		t.Fatalf("before retention %d messages, want %d", got, total)
	}
	for _, remove := range []int{1, 3, 4} {
		b.mu.RLock()
		tp := b.topics["t"]
		b.mu.RUnlock()
		l, err := b.readLog(tp)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < remove; i++ {
			id := l.Files()[0]
			c, err := l.CountBlocks(id, 0, fileSize(t, l.Path(id)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.RemoveFile(id); err != nil {
				t.Fatal(err)
			}
			total -= c.Blocks
		}
		if got := waitMessages(t, b, "t"); got != total {
			t.Fatalf("after removing %d more files %d messages, want %d", remove, got, total)
		}
		logs := fileIDs(t, tdir, ".log")
		smsstest.WaitFor(t, countWait, "sidecars of removed files removed", func() bool {
			cnts := fileIDs(t, tdir, ".cnt")
			return len(cnts) == 0 || cnts[0] >= logs[0]
		})
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestMessageCountDeleteRecreate: a re-created topic counts from zero, and
// none of the deleted incarnation's counts or sidecars reach it, even
// while the old one's files are being counted.
func TestMessageCountDeleteRecreate(t *testing.T) {
	dir := t.TempDir()
	opts := func(o *Options) { o.MaxLogSize = 500; o.Logger = quietLog }
	b := openCounted(t, dir, opts)
	ctx := context.Background()
	b.CreateTopic(ctx, []byte("t"), 0)
	publishMix(t, b, "t", 100, 5)
	b.Close()
	tdir := topicDirOf(dir, "t")
	for _, id := range fileIDs(t, tdir, ".cnt") {
		os.Remove(filepath.Join(tdir, msgcount.SidecarName(id)))
	}

	// Hold the background count of the old files in the middle, delete
	// and re-create the topic, then let it go on.
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b = openCounted(t, dir, withCountHook(opts, func(_ string, file int64, stop <-chan struct{}) {
		if file > 0 {
			once.Do(func() {
				close(held)
				select {
				case <-release:
				case <-stop: // the test failed and closes
				}
			})
		}
	}))
	defer b.Close()
	select {
	case <-held:
	case <-time.After(countWait):
		t.Fatal("the background count did not start")
	}
	if _, err := b.DeleteTopic(ctx, []byte("t")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.TopicStats("t"); st.Messages != 0 {
		t.Fatalf("re-created topic: %d messages", st.Messages)
	}
	close(release)
	want := publishMix(t, b, "t", 30, 2)
	if got := waitMessages(t, b, "t"); got != want {
		t.Fatalf("re-created topic: %d messages, want %d", got, want)
	}
	// Let the background goroutine finish with the old incarnation.
	smsstest.WaitFor(t, countWait, "old state dropped", func() bool { return b.stats.counts.Settled("t") })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, id := range fileIDs(t, tdir, ".cnt") {
		data, err := os.ReadFile(filepath.Join(tdir, msgcount.SidecarName(id)))
		if err != nil {
			t.Fatal(err)
		}
		c, err := msgcount.DecodeSidecar(data)
		if err != nil || c.Size != fileSize(t, filepath.Join(tdir, segment.FileName(id))) {
			t.Fatalf("sidecar %d in the new directory: %+v %v", id, c, err)
		}
	}
	b = openCounted(t, dir, opts)
	defer b.Close()
	if got := waitMessages(t, b, "t"); got != want {
		t.Fatalf("restarted: %d messages, want %d", got, want)
	}
}

// TestMessageCountSlave: a slave counts the messages it replicates like
// the master's own, across a restart of the slave.
func TestMessageCountSlave(t *testing.T) {
	ctx := context.Background()
	opts := func(o *Options) { o.MaxLogSize = 700; o.Logger = quietLog }
	m := openCounted(t, t.TempDir(), opts)
	defer m.Close()
	sdir := t.TempDir()
	s := openCounted(t, sdir, func(o *Options) { opts(o); o.Slave = true })
	defer func() { s.Close() }()
	m.CreateTopic(ctx, []byte("r"), 0)
	m.CreateTopic(ctx, []byte("gone"), 0)
	replicate := func() {
		t.Helper()
		st, err := m.ReplicaStream(s.LastEventID())
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for {
			n, err := st.Next(ctx, 50, 0, func(block []byte) error {
				_, err := s.ApplyReplicated(ctx, append([]byte(nil), block...))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
		}
	}
	publishMix(t, m, "r", 120, 6)
	publishMix(t, m, "gone", 10, 2)
	replicate()
	for _, name := range []string{"r", "gone"} {
		if got, want := waitMessages(t, s, name), waitMessages(t, m, name); got != want {
			t.Fatalf("%s: slave counts %d, master %d", name, got, want)
		}
	}
	m.DeleteTopic(ctx, []byte("gone"))
	m.CreateTopic(ctx, []byte("gone"), 0)
	publishMix(t, m, "gone", 3, 1)
	replicate()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openCounted(t, sdir, func(o *Options) { opts(o); o.Slave = true })
	publishMix(t, m, "r", 40, 3)
	replicate()
	for _, name := range []string{"r", "gone"} {
		if got, want := waitMessages(t, s, name), waitMessages(t, m, name); got != want {
			t.Fatalf("after restart %s: slave counts %d, master %d", name, got, want)
		}
	}
	if got := waitMessages(t, s, "gone"); got != 3 {
		t.Fatalf("re-created replicated topic: %d messages, want 3", got)
	}
}

// TestMessageCountMetrics: the Prometheus gauge carries the count once it
// is known.
func TestMessageCountMetrics(t *testing.T) {
	m := newTestMetrics()
	b := openCounted(t, t.TempDir(), func(o *Options) { o.Metrics = m; o.MaxLogSize = 500; o.Logger = quietLog })
	defer b.Close()
	m.SetSource(b)
	b.CreateTopic(context.Background(), []byte("t"), 0)
	want := publishMix(t, b, "t", 77, 5)
	waitMessages(t, b, "t")
	if v, ok := metricValue(t, m, "smss_topic_messages", map[string]string{"topic": "t"}); !ok || v != float64(want) {
		t.Fatalf("smss_topic_messages %v %v, want %d", v, ok, want)
	}
}

// TestMessageCountConcurrent reads counts while several publishers write
// (for -race): a count never goes back, and it ends exact.
func TestMessageCountConcurrent(t *testing.T) {
	dir := t.TempDir()
	b := openCounted(t, dir, func(o *Options) { o.MaxLogSize = 4096; o.Logger = quietLog })
	defer b.Close()
	ctx := context.Background()
	b.CreateTopic(ctx, []byte("t"), 0)
	var wg sync.WaitGroup
	var sent atomic.Int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 150; i++ {
				k := 1 + i%4
				if _, err := b.Publish(ctx, []byte("t"), bytes.Repeat(rec("c"), k), k); err != nil {
					t.Error(err)
					return
				}
				sent.Add(int64(k))
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	prev := int64(0)
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		st, _ := b.TopicStats("t")
		if st.Messages >= 0 {
			if st.Messages < prev {
				t.Fatalf("count went back from %d to %d", prev, st.Messages)
			}
			prev = st.Messages
		}
	}
	if got := waitMessages(t, b, "t"); got != sent.Load() {
		t.Fatalf("%d messages, want %d", got, sent.Load())
	}
}

// TestMessageCountRollback: a group that fails and is rolled back (the
// binlog's write or a topic's) counts nothing, in any topic it touched.
func TestMessageCountRollback(t *testing.T) {
	ctx := context.Background()
	for _, target := range []string{"/binlog/", "/topic/"} {
		t.Run(strings.Trim(target, "/"), func(t *testing.T) {
			dir := t.TempDir()
			f := &faults{}
			b := openCounted(t, dir, func(o *Options) { o.OpenFile = f.open; o.MaxLogSize = 300; o.Logger = quietLog })
			b.CreateTopic(ctx, []byte("t"), 0)
			want := publishMix(t, b, "t", 20, 3)
			f.set(func(p string) bool { return strings.Contains(p, target) }, nil)
			for i := 0; i < 3; i++ {
				if _, err := b.Publish(ctx, []byte("t"), bytes.Repeat(rec("lost"), 2), 2); err == nil {
					t.Fatal("a publish through a failing write succeeded")
				}
			}
			f.set(nil, nil)
			want += publishMix(t, b, "t", 10, 2)
			if got := waitMessages(t, b, "t"); got != want {
				t.Fatalf("%d messages, want %d", got, want)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if disk := diskMessages(t, dir, "t"); disk != want {
				t.Fatalf("disk %d, want %d", disk, want)
			}
		})
	}
}
