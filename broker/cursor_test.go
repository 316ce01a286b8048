package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// drain reads everything s delivers now and returns the eventIds.
func drain(t *testing.T, s *Subscription, batch int) []int64 {
	t.Helper()
	var got []int64
	for {
		area, n, err := s.Next(context.Background(), nil, batch, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return got
		}
		got = append(got, subIDs(t, area, n)...)
	}
}

func publishN(t *testing.T, b *Broker, topic string, n int) []int64 {
	t.Helper()
	var ids []int64
	for i := 0; i < n; i++ {
		id, err := b.Publish(context.Background(), []byte(topic), rec(fmt.Sprintf("%s-%d", topic, i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func cursorOf(b *Broker, topic, who string) (metrics.CursorInfo, bool) {
	for _, c := range b.CursorList(topic) {
		if c.Who == who {
			return c, true
		}
	}
	return metrics.CursorInfo{}, false
}

func cursorRecords(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, blk := range readBinlog(t, dir) {
		if blk.Cmd == binlog.CmdPub && string(blk.Topic) == CursorTopic {
			c, err := protocol.CountRecords(blk.Payload, 0)
			if err != nil {
				t.Fatal(err)
			}
			n += c
		}
	}
	return n
}

func TestCursorResumeRestartAndIndependentWhos(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, func(o *Options) { o.CursorFlushInterval = time.Hour })
	b.CreateTopic(ctx, []byte("t"), 0)
	ids := publishN(t, b, "t", 10)

	steps := []struct {
		name     string
		who      string
		whenNone int64
		ack      int // index of ids acked before closing, -1 none
		want     []int64
	}{
		{"new who starts at the oldest message", "a", ResumeAtStart, 4, ids},
		{"resumes after its ack", "a", ResumeAtStart, 6, ids[5:]},
		{"another who is independent", "b", ResumeAtStart, 1, ids},
		{"the first who is untouched by the second", "a", ResumeAtStart, -1, ids[7:]},
		{"a new who at the end gets nothing old", "c", ResumeAtEnd, -1, nil},
		{"a new who after an eventId", "d", ids[7], -1, ids[8:]},
	}
	for _, st := range steps {
		s, err := b.SubscribeResume([]byte("t"), []byte(st.who), st.whenNone)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := drain(t, s, 3)
		if !equalIDs(got, st.want) {
			t.Fatalf("%s: got %v want %v", st.name, got, st.want)
		}
		if st.ack >= 0 {
			s.Acked(ids[st.ack])
		}
		s.Close()
	}
	// Restart: the positions were written at Close (the flusher's hour
	// never came) and are read back from __cursors.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openTest(t, dir, nil)
	defer b.Close()
	want := map[string]int64{"a": ids[6], "b": ids[1], "d": ids[7]}
	for who, pos := range want {
		c, ok := cursorOf(b, "t", who)
		if !ok || c.EventID != pos || c.Stored != pos {
			t.Errorf("after restart %s: %+v %v, want %d", who, c, ok, pos)
		}
	}
	// "The end" is the server's last eventId when c subscribed: at least
	// the topic's last message (the positions' own writes take ids too).
	if c, ok := cursorOf(b, "t", "c"); !ok || c.EventID < ids[9] || c.Stored != c.EventID {
		t.Errorf("after restart c: %+v %v, want >= %d", c, ok, ids[9])
	}
	more := publishN(t, b, "t", 2)
	s, err := b.SubscribeResume([]byte("t"), []byte("c"), ResumeAtEnd)
	if err != nil {
		t.Fatal(err)
	}
	if got := drain(t, s, 10); !equalIDs(got, more) {
		t.Errorf("c resumed from its stored end: got %v want %v", got, more)
	}
	s.Close()
	if c, _ := cursorOf(b, "t", "b"); c.Lag != 10 || c.Active {
		t.Errorf("lag of b (disconnected, acked 2 of 12): %+v", c)
	}
	// A list never shows the system topic itself.
	if l := b.CursorList(CursorTopic); len(l) != 0 {
		t.Errorf("positions of %s listed: %v", CursorTopic, l)
	}
}

func TestCursorAcksAreCoalesced(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, func(o *Options) { o.CursorFlushInterval = time.Hour })
	b.CreateTopic(ctx, []byte("t"), 0)
	ids := publishN(t, b, "t", 200)
	s, err := b.SubscribeResume([]byte("t"), []byte("fast"), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		s.Acked(id)
	}
	if err := b.FlushCursors(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.FlushCursors(ctx); err != nil { // nothing changed: nothing written
		t.Fatal(err)
	}
	s.Close()
	b.Close()
	// One record for the 200 acks, one when the subscription ended (its
	// end counts as use for the retention).
	if n := cursorRecords(t, dir); n != 2 {
		t.Errorf("200 acks and a close wrote %d position records, want 2", n)
	}
}

func TestCursorGoneWithTopic(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, nil)
	b.CreateTopic(ctx, []byte("t"), 0)
	b.CreateTopic(ctx, []byte("keep"), 0)
	ids := publishN(t, b, "t", 3)
	publishN(t, b, "keep", 1)
	if err := b.SetCursor(ctx, []byte("t"), []byte("w"), ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := b.SetCursor(ctx, []byte("keep"), []byte("w"), ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DeleteTopic(ctx, []byte("t")); err != nil {
		t.Fatal(err)
	}
	if l := b.CursorList("t"); len(l) != 0 {
		t.Fatalf("positions of a deleted topic: %v", l)
	}
	// A re-created topic of the same name starts over, also after a
	// restart that reads the old incarnation's record again.
	b.CreateTopic(ctx, []byte("t"), 0)
	fresh := publishN(t, b, "t", 2)
	b.Close()
	b = openTest(t, dir, nil)
	defer b.Close()
	if l := b.CursorList("t"); len(l) != 0 {
		t.Fatalf("old incarnation's position came back: %v", l)
	}
	if _, ok := cursorOf(b, "keep", "w"); !ok {
		t.Fatal("position of another topic lost")
	}
	s, err := b.SubscribeResume([]byte("t"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := drain(t, s, 10); !equalIDs(got, fresh) {
		t.Errorf("re-created topic: got %v want %v", got, fresh)
	}
}

func TestCursorSetResetAndRefusals(t *testing.T) {
	ctx := context.Background()
	b := openTest(t, t.TempDir(), nil)
	defer b.Close()
	b.CreateTopic(ctx, []byte("t"), 0)
	ids := publishN(t, b, "t", 5)
	if err := b.SetCursor(ctx, []byte("t"), []byte("w"), ids[3]); err != nil {
		t.Fatal(err)
	}
	active, err := b.SubscribeResume([]byte("t"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := drain(t, active, 10); !equalIDs(got, ids[4:]) {
		t.Fatalf("after set: %v", got)
	}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"set while subscribed", b.SetCursor(ctx, []byte("t"), []byte("w"), 0), "is subscribed"},
		{"set beyond the last eventId", b.SetCursor(ctx, []byte("t"), []byte("x"), ids[4]+100), "out of range"},
		{"set on an unknown topic", b.SetCursor(ctx, []byte("nope"), []byte("x"), 0), "topic not exist"},
		{"set on the system topic", b.SetCursor(ctx, []byte(CursorTopic), []byte("x"), 0), "reserved"},
		{"publish to the system topic", pubErr(b.Publish(ctx, []byte(CursorTopic), rec("x"), 1)), "reserved"},
		{"delete the system topic", pubErr(b.DeleteTopic(ctx, []byte(CursorTopic))), "reserved"},
		{"create the system topic", pubErr(b.CreateTopic(ctx, []byte(CursorTopic), 0)), "reserved"},
		{"delay to the system topic", pubErr(b.PublishDelay(ctx, []byte(CursorTopic), rec("x"), 1, 5000)), "reserved"},
	}
	for _, c := range cases {
		if c.err == nil || !protocol.IsBizError(c.err) || !contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want a 400 with %q", c.name, c.err, c.want)
		}
	}
	active.Close()
	if err := b.ResetCursor(ctx, []byte("t"), []byte("w")); err != nil {
		t.Fatal(err)
	}
	if _, ok := cursorOf(b, "t", "w"); ok {
		t.Fatal("reset kept the position")
	}
	s, err := b.SubscribeResume([]byte("t"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := drain(t, s, 10); !equalIDs(got, ids) {
		t.Errorf("after reset: %v", got)
	}
}

func pubErr(_ int64, err error) error { return err }

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

// Compaction keeps __cursors to about one file however many positions are
// written, and the positions survive it and a restart.
func TestCursorCompaction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mod := func(o *Options) { o.CursorFlushInterval = time.Hour; o.CursorSegmentBytes = 4 << 10 }
	b := openTest(t, dir, mod)
	b.CreateTopic(ctx, []byte("t"), 0)
	ids := publishN(t, b, "t", 50)
	whos := []string{"w0", "w1", "w2", "w3", "w4"}
	for round, id := range ids {
		for _, w := range whos {
			s, err := b.Subscribe([]byte("t"), []byte(w), 0)
			if err != nil {
				t.Fatal(err)
			}
			s.Acked(id)
			s.Close()
		}
		if err := b.FlushCursors(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	// 250 records of ~60 bytes in 4 KiB files would be 4+ files.
	b.mu.RLock()
	files := len(b.topics[CursorTopic].log.Files())
	b.mu.RUnlock()
	if files > 2 {
		t.Errorf("%s holds %d files after compaction", CursorTopic, files)
	}
	b.Close()
	b = openTest(t, dir, mod)
	defer b.Close()
	for _, w := range whos {
		if c, ok := cursorOf(b, "t", w); !ok || c.EventID != ids[len(ids)-1] {
			t.Errorf("%s after compaction and restart: %+v %v", w, c, ok)
		}
	}
}

// A slave rebuilds the positions from its copy of __cursors, keeps its own
// subscribers' acks in memory, and resumes after a promotion.
func TestCursorReplicatedAndPromoted(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, t.TempDir(), nil)
	defer m.Close()
	m.CreateTopic(ctx, []byte("t"), 0)
	ids := publishN(t, m, "t", 6)
	if err := m.SetCursor(ctx, []byte("t"), []byte("w"), ids[2]); err != nil {
		t.Fatal(err)
	}
	sdir := t.TempDir()
	s := openTest(t, sdir, func(o *Options) { o.Slave = true })
	replicateAll(t, m, s, 0)
	if c, ok := cursorOf(s, "t", "w"); !ok || c.EventID != ids[2] {
		t.Fatalf("slave's copy: %+v %v", c, ok)
	}
	if err := s.SetCursor(ctx, []byte("t"), []byte("w"), ids[0]); !errors.Is(err, ErrCursorSlave) {
		t.Errorf("set on a slave: %v", err)
	}
	// A restarted slave reads its own copy of the topic.
	s.Close()
	s = openTest(t, sdir, func(o *Options) { o.Slave = true })
	defer s.Close()
	if c, ok := cursorOf(s, "t", "w"); !ok || c.EventID != ids[2] {
		t.Fatalf("restarted slave: %+v %v", c, ok)
	}
	if _, err := s.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	sub, err := s.SubscribeResume([]byte("t"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := drain(t, sub, 10); !equalIDs(got, ids[3:]) {
		t.Errorf("on the promoted slave: %v", got)
	}
	sub.Acked(ids[5])
	sub.Close()
	if err := s.FlushCursors(ctx); err != nil {
		t.Fatalf("the promoted slave writes positions: %v", err)
	}
	if c, _ := cursorOf(s, "t", "w"); c.Stored != ids[5] {
		t.Errorf("stored on the promoted slave: %+v", c)
	}
}

func TestCursorDisabled(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, func(o *Options) { o.CursorsOff = true })
	b.CreateTopic(ctx, []byte("t"), 0)
	ids := publishN(t, b, "t", 3)
	if _, err := b.SubscribeResume([]byte("t"), []byte("w"), 0); !errors.Is(err, ErrCursorsDisabled) {
		t.Errorf("resume with positions off: %v", err)
	}
	s, err := b.Subscribe([]byte("t"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	s.Acked(ids[2])
	s.Close()
	b.Close()
	if n := cursorRecords(t, dir); n != 0 {
		t.Errorf("positions off wrote %d records", n)
	}
}

func TestCursorRecordRoundTrip(t *testing.T) {
	for _, r := range []cursorRec{
		{op: cursorOpSet, created: 7, eventID: 99, topic: "t", who: "w"},
		{op: cursorOpSet, created: 1, eventID: 0, topic: "orders.eu", who: ""},
		{op: cursorOpDelete, created: 3, topic: "t", who: "x"},
		{op: cursorOpSnapshot, eventID: 123},
	} {
		b := appendCursorRecord(nil, &r)
		if n, err := protocol.CountRecords(b, 0); err != nil || n != 1 {
			t.Fatalf("%+v: not one valid record: %d %v", r, n, err)
		}
		got, err := decodeCursorRecord(b)
		if err != nil || got != r {
			t.Errorf("round trip %+v: %+v %v", r, got, err)
		}
	}
}

// Malformed record bytes (from a master, or a foreign topic of that name)
// are skipped, never a panic.
func FuzzApplyCursorRecords(f *testing.F) {
	f.Add(appendCursorRecord(nil, &cursorRec{op: cursorOpSet, created: 1, eventID: 2, topic: "t", who: "w"}))
	f.Add(append(appendCursorRecord(nil, &cursorRec{op: cursorOpSnapshot}), 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1))
	b := &Broker{log: slog.New(slog.NewTextHandler(io.Discard, nil)), topics: map[string]*topic{}}
	b.opts.setDefaults()
	b.initCursors()
	f.Fuzz(func(t *testing.T, recs []byte) {
		b.applyCursorRecords(recs, nil)
		startsWithSnapshot(recs)
	})
}

func FuzzDecodeCursorRecord(f *testing.F) {
	f.Add(appendCursorRecord(nil, &cursorRec{op: cursorOpSet, created: 7, eventID: 99, topic: "t", who: "w"}))
	f.Add(appendCursorRecord(nil, &cursorRec{op: cursorOpSnapshot}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeCursorRecord(b)
		if err != nil {
			return
		}
		again := appendCursorRecord(nil, &r)
		r2, err := decodeCursorRecord(again)
		if err != nil || r2 != r {
			t.Fatalf("re-encoded record differs: %+v / %+v %v", r, r2, err)
		}
	})
}

// A position idle longer than the retention (no ack, not subscribed) is
// forgotten at the next snapshot, also after a restart; a subscribed who
// (whose subscription's end counts as use) and a recently acknowledged one
// are kept.
func TestCursorRetention(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	mod := func(o *Options) {
		o.CursorFlushInterval = time.Hour
		o.CursorSnapshotInterval = time.Minute
		o.CursorRetention = 24 * time.Hour
		o.Now = now.Load
	}
	b := openTest(t, dir, mod)
	b.CreateTopic(ctx, []byte("t"), 0)
	ids := publishN(t, b, "t", 3)
	ack := func(who string, id int64) {
		s, err := b.Subscribe([]byte("t"), []byte(who), 0)
		if err != nil {
			t.Fatal(err)
		}
		s.Acked(id)
		s.Close()
	}
	ack("old", ids[0])
	ack("connected", ids[0])
	if err := b.FlushCursors(ctx); err != nil {
		t.Fatal(err)
	}
	// Subscribed before the clock jumps: the flusher may snapshot at any
	// moment after it.
	held, err := b.Subscribe([]byte("t"), []byte("connected"), ids[0]) // idle but subscribed
	if err != nil {
		t.Fatal(err)
	}
	now.Add((25 * time.Hour).Milliseconds())
	ack("fresh", ids[1])
	if err := b.FlushCursors(ctx); err != nil { // a snapshot is due (interval passed)
		t.Fatal(err)
	}
	held.Close()
	want := map[string]bool{"old": false, "connected": true, "fresh": true}
	check := func(when string) {
		t.Helper()
		for who, kept := range want {
			if _, ok := cursorOf(b, "t", who); ok != kept {
				t.Errorf("%s: %s kept=%v, want %v", when, who, ok, kept)
			}
		}
	}
	check("after the snapshot")
	b.Close()
	b = openTest(t, dir, mod)
	defer b.Close()
	check("after a restart")
}
