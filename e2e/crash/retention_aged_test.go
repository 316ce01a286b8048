package crash

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/topicblock"
)

// TestRetentionOfAgedData: a data directory whose first messages were
// written ten days ago (by the broker with a test clock) is served by the
// real binary with store.maxDays 1 and store.clearInterval 1. Its first
// retention run removes exactly the files holding only old messages, by
// message time; a subscriber asking for a removed eventId gets a 400 that
// names the oldest retained one, and one starting from 0 gets exactly the
// retained messages.
func TestRetentionOfAgedData(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	var clock atomic.Int64
	clock.Store(time.Now().Add(-10 * 24 * time.Hour).UnixMilli())
	b, err := broker.Open(broker.Options{Dir: data, MaxLogSize: 1024, FlushLevel: 1, Now: clock.Load})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.CreateTopic(ctx, []byte("r"), 0); err != nil {
		t.Fatal(err)
	}
	var ids []int64 // eventIds of the topic's messages, in order
	pub := func(i int) {
		id, err := b.Publish(ctx, []byte("r"), kit.Record(nil, fmt.Sprintf("r-%03d", i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i := 0; i < 100; i++ {
		pub(i)
	}
	clock.Store(time.Now().UnixMilli())
	for i := 100; i < 110; i++ {
		pub(i)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	topicDir := topicblock.Dir(filepath.Join(data, "topic"), []byte("r"), 10)
	before := logFileIDs(t, topicDir)
	binBefore := logFileIDs(t, filepath.Join(data, "binlog"))
	if len(before) < 4 || len(binBefore) < 4 {
		t.Fatalf("fixture: %d topic files, %d binlog files", len(before), len(binBefore))
	}
	// Which topic files hold only old messages (the rule, computed here
	// from the files themselves).
	oldFiles := map[int64]bool{}
	newest := map[int64]int64{}
	scanLogFiles(t, topicDir, func(file int64, ts int64) { newest[file] = max(newest[file], ts) })
	cutoff := time.Now().Add(-24 * time.Hour).UnixMilli()
	for i, id := range before {
		if newest[id] >= cutoff || i == len(before)-1 {
			break
		}
		oldFiles[id] = true
	}

	kit.WriteConfig(t, dir, "  maxLogSize: 1024\n  maxDays: 1\n  clearInterval: 1\ntimeout:\n  server:\n    alive: 500\n")
	p := kit.Start(t, dir)
	runRe := regexp.MustCompile(`retention run finished.*topicFilesRemoved=(\d+)`)
	if !smsstest.Poll(10*time.Second, func() bool { return runRe.MatchString(p.Out.String()) }) {
		t.Fatalf("no retention run within 10 s:\n%s", p.Out.String())
	}
	removed, _ := strconv.Atoi(runRe.FindStringSubmatch(p.Out.String())[1])
	after := logFileIDs(t, topicDir)
	for _, id := range before {
		gone := !contains(after, id)
		if gone != oldFiles[id] {
			t.Errorf("topic file %d (newest message %s): removed %v, want %v", id,
				time.UnixMilli(newest[id]).Format(time.RFC3339), gone, oldFiles[id])
		}
	}
	if removed != len(oldFiles) || removed == 0 {
		t.Errorf("run reports %d topic files removed, want %d", removed, len(oldFiles))
	}
	if binAfter := logFileIDs(t, filepath.Join(data, "binlog")); len(binAfter) >= len(binBefore) {
		t.Errorf("binlog files %v after retention, %v before: old ones not removed", binAfter, binBefore)
	}

	// The oldest retained message, from the files.
	var oldest int64
	scanLogEvents(t, topicDir, func(id int64) {
		if oldest == 0 {
			oldest = id
		}
	})
	c := kit.Dial(t, p.Addr)
	if err := c.Sub("r", "late", ids[2], 10, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	u, err := c.Next(5 * time.Second)
	want := fmt.Sprintf("the oldest retained eventId is %d", oldest)
	if err != nil || u.Code != protocol.StatusError || !strings.Contains(u.Text, "removed by retention") || !strings.Contains(u.Text, want) {
		t.Fatalf("subscribe after a removed message: %v %v, want a 400 with %q", u, err, want)
	}
	if err := c.Sub("r", "fresh", 0, 255, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for len(got) == 0 || got[len(got)-1] != ids[len(ids)-1] {
		u, err := c.NextData(5 * time.Second)
		if err != nil || u.Code != protocol.StatusOK {
			t.Fatalf("subscriber from 0: %v %v (got %v)", u, err, got)
		}
		for _, m := range u.Msgs {
			got = append(got, m.EventID)
		}
		if err := c.Ack(0); err != nil {
			t.Fatal(err)
		}
	}
	if got[0] != oldest {
		t.Fatalf("subscriber from 0 starts at %d, want the oldest retained %d", got[0], oldest)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("eventIds out of order: %v", got)
		}
	}
}

func contains(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func logFileIDs(t *testing.T, dir string) []int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".log"); ok {
			if id, err := strconv.ParseInt(name, 10, 64); err == nil {
				ids = append(ids, id)
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// scanLogFiles calls fn with the file id and ts of every message in a
// topic directory.
func scanLogFiles(t *testing.T, dir string, fn func(file, ts int64)) {
	t.Helper()
	for _, id := range logFileIDs(t, dir) {
		buf, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d.log", id)))
		if err != nil {
			t.Fatal(err)
		}
		for len(buf) > 0 {
			blk, n, err := topicblock.DecodeBlock(buf)
			if err != nil {
				t.Fatalf("file %d: %v", id, err)
			}
			fn(id, blk.Ts)
			buf = buf[n:]
		}
	}
}

func scanLogEvents(t *testing.T, dir string, fn func(id int64)) {
	t.Helper()
	kit.ScanLog(t, dir, kit.TopicDecode, func(raw []byte) error {
		blk, _, err := topicblock.DecodeBlock(raw)
		fn(blk.EventID)
		return err
	})
}
