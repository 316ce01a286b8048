package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

const day = int64(dayMs)

// aged builds a store whose messages were written on day 0, day 5 and day
// 9 of a test clock, with small files so each phase spans several, and
// returns the broker (still open) and the clock.
func aged(t *testing.T, dir string) (*broker.Broker, *clock) {
	t.Helper()
	clk := &clock{}
	const t0 = 1_700_000_000_000
	clk.Set(t0)
	b := openBroker(t, dir, clk, func(o *broker.Options) { o.MaxLogSize = 1024 })
	create(t, b, "a", 0)
	create(t, b, "b", 0)
	create(t, b, "old", 0) // written on day 0 only: its last file is current
	for _, d := range []int64{0, 5, 9} {
		clk.Set(t0 + d*day)
		for i := 0; i < 60; i++ {
			pub(t, b, "a", fmt.Sprintf("a-day%d-%d", d, i))
			if d < 9 {
				pub(t, b, "b", fmt.Sprintf("b-day%d-%d", d, i))
			}
			if d == 0 {
				pub(t, b, "old", fmt.Sprintf("old-%d", i))
			}
		}
	}
	return b, clk
}

// expectRemoved computes, from the files alone, which ones retention must
// remove: the longest prefix of files whose newest message is before
// cutoff, never the last file.
func expectRemoved(t *testing.T, logDir string, isBinlog bool, cutoff int64) (remove, keep []int64) {
	t.Helper()
	times := fileTimes(t, logDir, isBinlog)
	var ids []int64
	for id := range times {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	prefix := true
	for i, id := range ids {
		if prefix && i < len(ids)-1 && times[id] < cutoff {
			remove = append(remove, id)
			continue
		}
		prefix = false
		keep = append(keep, id)
	}
	return remove, keep
}

func listFiles(t *testing.T, logDir string) (ids []int64) {
	t.Helper()
	ents, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		var id int64
		if _, err := fmt.Sscanf(e.Name(), "%d.log", &id); err == nil && strings.HasSuffix(e.Name(), ".log") {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestRetentionRemovesExactlyTheOldFiles(t *testing.T) {
	dir := t.TempDir()
	b, clk := aged(t, dir)
	defer b.Close()
	now := clk.Now() + 4*day // day 13: cutoff day 6, so days 0 and 5 go
	cutoff := now - 7*day
	logs := map[string]string{
		"binlog": filepath.Join(dir, "binlog"),
		"a":      topicDir(dir, "a"),
		"b":      topicDir(dir, "b"),
		"old":    topicDir(dir, "old"),
	}
	type plan struct{ remove, keep []int64 }
	want := map[string]plan{}
	for name, d := range logs {
		r, k := expectRemoved(t, d, name == "binlog", cutoff)
		want[name] = plan{r, k}
	}
	// The fixture must exercise each case.
	if len(want["binlog"].remove) < 2 || len(want["a"].remove) < 2 || len(want["a"].keep) < 2 {
		t.Fatalf("fixture too small: %+v", want)
	}
	if len(want["b"].keep) != 1 || len(want["old"].keep) != 1 || len(listFiles(t, logs["old"])) < 2 {
		t.Fatalf("fixture: topics b and old must keep only their current, old file: %+v", want)
	}
	var logs2 logBuffer
	ret := NewRetention(b, RetentionOptions{MaxDays: 7, Now: func() int64 { return now }, Logger: logs2.logger()})
	rep, err := ret.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for name, d := range logs {
		got := listFiles(t, d)
		if !slices.Equal(got, want[name].keep) {
			t.Errorf("%s: files %v after retention, want %v (removed %v)", name, got, want[name].keep, want[name].remove)
		}
		for _, id := range want[name].remove {
			if _, err := os.Stat(filepath.Join(d, fmt.Sprintf("%d.idx", id))); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: index of removed file %d left behind (%v)", name, id, err)
			}
		}
		if name != "binlog" {
			total += len(want[name].remove)
		}
	}
	if rep.BinlogFiles != len(want["binlog"].remove) || rep.TopicFiles != total || rep.Bytes <= 0 {
		t.Errorf("report %+v", rep)
	}
	if n := strings.Count(logs2.String(), "retention removed an old file"); n != rep.BinlogFiles+rep.TopicFiles {
		t.Errorf("%d removal log lines for %d removals", n, rep.BinlogFiles+rep.TopicFiles)
	}
	if !strings.Contains(logs2.String(), "retention run finished") {
		t.Error("no summary logged")
	}
	// A second run finds nothing more; the broker keeps working.
	if rep, err := ret.RunOnce(ctx); err != nil || rep.BinlogFiles+rep.TopicFiles != 0 {
		t.Errorf("second run: %+v %v", rep, err)
	}
	pub(t, b, "a", "after")
}

// TestRetentionMessageTimeNotMtime: files are judged by their messages.
// Fresh mtimes on old files do not save them, and old mtimes on new files
// do not doom them.
func TestRetentionMessageTimeNotMtime(t *testing.T) {
	dir := t.TempDir()
	b, clk := aged(t, dir)
	defer b.Close()
	now := clk.Now() + 4*day
	d := topicDir(dir, "a")
	rm, keep := expectRemoved(t, d, false, now-7*day)
	ancient := time.Now().Add(-365 * 24 * time.Hour)
	for _, id := range keep {
		if err := os.Chtimes(filepath.Join(d, fmt.Sprintf("%d.log", id)), ancient, ancient); err != nil {
			t.Fatal(err)
		}
	}
	ret := NewRetention(b, RetentionOptions{MaxDays: 7, Now: func() int64 { return now }})
	if _, err := ret.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := listFiles(t, d); !slices.Equal(got, keep) {
		t.Fatalf("files %v, want %v (removed %v)", got, keep, rm)
	}
}

// TestRetentionKeepsBinlogForSlaves: binlog files a connected replica still
// reads stay, up to MaxSlaveKeepFiles; beyond that the oldest go with a
// warning and the replica gets an error naming its position.
func TestRetentionKeepsBinlogForSlaves(t *testing.T) {
	dir := t.TempDir()
	b, clk := aged(t, dir)
	defer b.Close()
	now := clk.Now() + 4*day
	bdir := filepath.Join(dir, "binlog")
	rm, keep := expectRemoved(t, bdir, true, now-7*day)
	if len(rm) < 4 {
		t.Fatalf("fixture: only %d old binlog files", len(rm))
	}
	stream, err := b.ReplicaStream(0) // a slave that starts from the oldest file
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()

	// Within the cap: nothing the slave needs is removed.
	var logs logBuffer
	ret := NewRetention(b, RetentionOptions{MaxDays: 7, Now: func() int64 { return now }, MaxSlaveKeepFiles: 100, Logger: logs.logger()})
	rep, err := ret.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := listFiles(t, bdir); !slices.Equal(got, append(slices.Clone(rm), keep...)) || rep.KeptForSlave != len(rm) {
		t.Fatalf("binlog files %v (kept for slave %d), want all of %v %v", got, rep.KeptForSlave, rm, keep)
	}

	// Over the cap: all but the 2 newest old files go, with a warning.
	ret = NewRetention(b, RetentionOptions{MaxDays: 7, Now: func() int64 { return now }, MaxSlaveKeepFiles: 2, Logger: logs.logger()})
	rep, err = ret.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := append(slices.Clone(rm[len(rm)-2:]), keep...)
	if got := listFiles(t, bdir); !slices.Equal(got, wantFiles) || rep.KeptForSlave != 2 || rep.BinlogFiles != len(rm)-2 {
		t.Fatalf("binlog files %v (report %+v), want %v", got, rep, wantFiles)
	}
	if !strings.Contains(logs.String(), "slave still needs") || !strings.Contains(logs.String(), fmt.Sprintf("slaveFile=%d", rm[0])) {
		t.Errorf("no warning naming the slave's position:\n%s", logs.String())
	}
	_, err = stream.Next(ctx, 10, time.Second, func([]byte) error { return nil })
	var be *protocol.BizError
	if !errors.As(err, &be) || !strings.Contains(be.Msg, "replication position is gone") || !strings.Contains(be.Msg, fmt.Sprintf("%d.log", rm[0])) {
		t.Fatalf("replica reading a removed file: %v, want a 400 naming the file", err)
	}

	// Once the slave is gone, the rest of the old files go too.
	stream.Close()
	if _, err := ret.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := listFiles(t, bdir); !slices.Equal(got, keep) {
		t.Fatalf("binlog files %v after the slave left, want %v", got, keep)
	}
}

// TestRetentionSubscribers: a subscriber positioned in a removed file gets
// an error naming the problem; one asking for an eventId whose successors
// were removed is told the oldest retained eventId.
func TestRetentionSubscribers(t *testing.T) {
	dir := t.TempDir()
	b, clk := aged(t, dir)
	defer b.Close()
	now := clk.Now() + 4*day
	early, err := b.Subscribe([]byte("a"), []byte("early"), 0) // positioned at file 0
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	ret := NewRetention(b, RetentionOptions{MaxDays: 7, Now: func() int64 { return now }})
	if _, err := ret.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, err = early.Next(ctx, nil, 10, time.Second)
	var be *protocol.BizError
	if !errors.As(err, &be) || !strings.Contains(be.Msg, "subscription position is gone") {
		t.Fatalf("subscriber on a removed file: %v, want a 400 naming the problem", err)
	}
	_, err = b.Subscribe([]byte("a"), []byte("late"), 3) // eventId 3: an early message of a
	if !errors.As(err, &be) || !strings.Contains(be.Msg, "removed by retention") {
		t.Fatalf("subscribe after removed messages: %v", err)
	}
	fresh, err := b.Subscribe([]byte("a"), []byte("fresh"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if _, n, err := fresh.Next(ctx, nil, 10, time.Second); err != nil || n == 0 {
		t.Fatalf("subscriber from 0 after retention: %d %v", n, err)
	}
}

// TestRetentionSchedule: Start runs the job every interval, the first time
// one interval after start; Stop ends it.
func TestRetentionSchedule(t *testing.T) {
	dir := t.TempDir()
	b, clk := aged(t, dir)
	defer b.Close()
	now := clk.Now() + 4*day
	rm, keep := expectRemoved(t, topicDir(dir, "a"), false, now-7*day)
	ret := NewRetention(b, RetentionOptions{MaxDays: 7, Interval: 300 * time.Millisecond, Now: func() int64 { return now }})
	start := time.Now()
	ret.Start()
	smsstest.WaitFor(t, 5*time.Second, "scheduled run", func() bool { return slices.Equal(listFiles(t, topicDir(dir, "a")), keep) })
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("first run %v after start, want one interval (300ms); removed %v", d, rm)
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := ret.Stop(c); err != nil {
		t.Fatal(err)
	}
}

// TestRetentionCurrentFileOnly: a log whose only file is old keeps it.
func TestRetentionCurrentFileOnly(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	clk.Set(1_700_000_000_000)
	b := openBroker(t, dir, clk, nil)
	defer b.Close()
	create(t, b, "t", 0)
	pub(t, b, "t", "x")
	ret := NewRetention(b, RetentionOptions{MaxDays: 1, Now: func() int64 { return clk.Now() + 100*day }})
	rep, err := ret.RunOnce(ctx)
	if err != nil || rep.BinlogFiles+rep.TopicFiles != 0 {
		t.Fatalf("run: %+v %v", rep, err)
	}
	if got := listFiles(t, topicDir(dir, "t")); len(got) != 1 {
		t.Fatalf("topic files %v", got)
	}
	if got := listFiles(t, filepath.Join(dir, "binlog")); len(got) != 1 {
		t.Fatalf("binlog files %v", got)
	}
	// The broker refuses too, whatever the caller computes.
	if _, err := b.RemoveOldBinlogFile(listFiles(t, filepath.Join(dir, "binlog"))[0]); err == nil {
		t.Fatal("RemoveOldBinlogFile removed the current binlog file")
	}
	m, err := b.Topic([]byte("t"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.RemoveOldTopicFile("t", m.CreateEventID, listFiles(t, topicDir(dir, "t"))[0]); err == nil {
		t.Fatal("RemoveOldTopicFile removed the current topic file")
	}
}

// TestRetentionSkipsAReplacedTopic: a topic's files are named by id,
// which a re-created topic of the same name reuses. Retention working on
// the files listed for the old incarnation must not remove the new topic's.
func TestRetentionSkipsAReplacedTopic(t *testing.T) {
	dir := t.TempDir()
	b, clk := aged(t, dir)
	defer b.Close()
	var old broker.TopicOldFiles
	if err := b.OldTopicFiles(ctx, clk.Now()+100*day, func(tf broker.TopicOldFiles, err error) error {
		if tf.Name == "a" {
			old = tf
		}
		return err
	}); err != nil || len(old.Files) == 0 {
		t.Fatalf("old topic files %+v: %v", old, err)
	}
	if _, err := b.DeleteTopic(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	create(t, b, "a", 0)
	// More files than the old incarnation had, so that every file listed
	// for it exists again under the same name.
	for i := 0; len(listFiles(t, topicDir(dir, "a"))) <= len(old.Files)+1; i++ {
		pub(t, b, "a", fmt.Sprintf("new-%d", i))
	}
	before := listFiles(t, topicDir(dir, "a"))
	ret := NewRetention(b, RetentionOptions{MaxDays: 1})
	n, _, err := ret.topic(ctx, old)
	if err != nil || n != 0 {
		t.Fatalf("retention with the old incarnation's listing removed %d files (%v)", n, err)
	}
	if got := listFiles(t, topicDir(dir, "a")); !slices.Equal(got, before) {
		t.Fatalf("new topic's files %v, were %v", got, before)
	}
}
