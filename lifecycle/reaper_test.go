package lifecycle

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/backofftest"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

func startReaper(t testing.TB, b *broker.Broker, opts ReaperOptions) *Reaper {
	t.Helper()
	r, err := NewReaper(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	b.SetHooks(broker.Hooks{TopicExpiry: r.Notify})
	r.Start()
	t.Cleanup(func() { stopReaper(t, r) })
	return r
}

func stopReaper(t testing.TB, r *Reaper) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.Stop(c); err != nil {
		t.Errorf("stop reaper: %v", err)
	}
}

// TestReapOnTime: a topic is deleted right after its expireAt by a
// binlogged delete, its subscriber is told, a far-future topic stays, and
// the hook armed the timer early (the reaper was idle on the far expiry).
func TestReapOnTime(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, nil, nil)
	create(t, b, "far", time.Now().UnixMilli()+3600_000)
	r := startReaper(t, b, ReaperOptions{})
	smsstest.WaitFor(t, 5*time.Second, "first pass", func() bool { return r.alarm.Runs() >= 1 })

	expireAt := time.Now().UnixMilli() + 400
	create(t, b, "short", expireAt)
	pub(t, b, "short", "m1")
	sub, err := b.Subscribe([]byte("short"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, n, err := sub.Next(ctx, nil, 10, time.Second); err != nil || n != 1 {
		t.Fatalf("subscriber read %d, %v", n, err)
	}
	smsstest.WaitFor(t, 5*time.Second, "reap", func() bool { return !exists(b, "short") })
	late := time.Now().UnixMilli() - expireAt
	smsstest.WaitFor(t, 5*time.Second, "reap counted", func() bool { return r.Reaped() == 1 })
	if late < 0 || late > 1000 {
		t.Errorf("reaped %d ms after expireAt, want within 1 s", late)
	}
	t.Logf("reaped %d ms after expireAt", late)
	if _, _, err := sub.Next(ctx, nil, 10, 5*time.Second); !errors.Is(err, protocol.ErrTopicDeleted) {
		t.Errorf("subscriber after reap: %v, want ErrTopicDeleted (255 on the wire)", err)
	}
	if !exists(b, "far") || r.Reaped() != 1 {
		t.Errorf("far topic exists %v, reaped %d", exists(b, "far"), r.Reaped())
	}
	stopReaper(t, r)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var deletes int
	for _, blk := range binlogBlocks(t, dir) {
		if blk.Cmd == binlog.CmdDelete && string(blk.Topic) == "short" {
			deletes++
		}
	}
	if deletes != 1 {
		t.Fatalf("%d binlogged deletes of the expired topic, want 1", deletes)
	}
}

// TestBetweenExpiryAndReap: before the reaper runs, an expired topic
// refuses pub, delay and sub, is left out of the valid list, is still in
// the list; the reaper then deletes it and a re-created topic starts empty.
func TestBetweenExpiryAndReap(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	const t0 = 1_700_000_000_000
	clk.Set(t0)
	b := openBroker(t, dir, clk, nil)
	defer b.Close()
	create(t, b, "life", t0+10_000)
	pub(t, b, "life", "old")
	clk.Set(t0 + 10_000)
	if _, err := b.Publish(ctx, []byte("life"), rec("x"), 1); !errors.Is(err, protocol.ErrTopicNotExist) {
		t.Errorf("pub to an expired topic: %v", err)
	}
	if _, err := b.PublishDelay(ctx, []byte("life"), rec("x"), 1, 1000); !errors.Is(err, protocol.ErrTopicNotExist) {
		t.Errorf("delay to an expired topic: %v", err)
	}
	if _, err := b.Subscribe([]byte("life"), []byte("w"), 0); !errors.Is(err, protocol.ErrTopicNotExist) {
		t.Errorf("sub to an expired topic: %v", err)
	}
	if valid, _ := b.ValidTopics(0); len(valid) != 0 {
		t.Errorf("valid list holds %v", valid)
	}
	if all, _ := b.Topics(); len(all) != 1 {
		t.Errorf("list holds %v, want the expired topic", all)
	}
	if _, err := b.CreateTopic(ctx, []byte("life"), 0); !errors.Is(err, protocol.ErrTopicExist) {
		t.Errorf("create over an expired, unreaped topic: %v", err)
	}
	r := startReaper(t, b, ReaperOptions{Now: clk.Now})
	smsstest.WaitFor(t, 5*time.Second, "reap", func() bool { return !exists(b, "life") })
	create(t, b, "life", 0)
	s, err := b.Subscribe([]byte("life"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, n, err := s.Next(ctx, nil, 10, 50*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("re-created topic delivered %d messages (%v), want none", n, err)
	}
	if r.Reaped() != 1 {
		t.Fatalf("reaped %d", r.Reaped())
	}
}

// TestRecreatedTopicIsNotReapedEarly: a topic deleted and re-created with a
// later lifetime is reaped at its own expiry, not at the old one.
func TestRecreatedTopicIsNotReapedEarly(t *testing.T) {
	clk := &clock{}
	const t0 = 1_700_000_000_000
	clk.Set(t0)
	b := openBroker(t, t.TempDir(), clk, nil)
	defer b.Close()
	create(t, b, "x", t0+1000)
	r := startReaper(t, b, ReaperOptions{Now: clk.Now})
	smsstest.WaitFor(t, 5*time.Second, "first pass", func() bool { return r.alarm.Runs() >= 1 })
	if _, err := b.DeleteTopic(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	create(t, b, "x", t0+5000)
	clk.Set(t0 + 1000)
	runs := r.alarm.Runs()
	r.Notify(t0 + 1000) // the old expiry comes due
	smsstest.WaitFor(t, 5*time.Second, "pass at the old expiry", func() bool { return r.alarm.Runs() > runs })
	if !exists(b, "x") {
		t.Fatal("re-created topic reaped at the old incarnation's expiry")
	}
	// The writer-side guard: a delete for the old expiry does nothing.
	if deleted, err := b.ExpireTopic(ctx, "x", t0+1000); err != nil || deleted {
		t.Fatalf("ExpireTopic with the old expireAt: %v %v", deleted, err)
	}
	clk.Set(t0 + 5000)
	r.Notify(t0 + 5000)
	smsstest.WaitFor(t, 5*time.Second, "reap at the new expiry", func() bool { return !exists(b, "x") })
}

// TestExpiredWhileDown: a topic whose lifetime ended while the server was
// down is reaped right after start.
func TestExpiredWhileDown(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	const t0 = 1_700_000_000_000
	clk.Set(t0)
	b := openBroker(t, dir, clk, nil)
	create(t, b, "gone", t0+1000)
	create(t, b, "stays", t0+3600_000)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0 + 60_000)
	b = openBroker(t, dir, clk, nil)
	defer b.Close()
	startReaper(t, b, ReaperOptions{Now: clk.Now})
	smsstest.WaitFor(t, 2*time.Second, "reap after start", func() bool { return !exists(b, "gone") })
	if !exists(b, "stays") {
		t.Fatal("unexpired topic reaped")
	}
}

// fakeReaper injects failures and inconsistencies.
type fakeReaper struct {
	expired  []string
	topic    protocol.TopicInfo
	next     int64
	expires  atomic.Int64
	scans    atomic.Int64
	failExp  bool
	deleteOK bool
	// attempts records the calls that a backoff spaces out: scans when
	// recordScans, else deletes.
	attempts    backofftest.Recorder
	recordScans bool
}

func (f *fakeReaper) ExpiredTopics(int64) ([]string, error) {
	f.scans.Add(1)
	if f.recordScans {
		f.attempts.Attempt()
	}
	return f.expired, nil
}
func (f *fakeReaper) Topic(string) (protocol.TopicInfo, bool, error) {
	return f.topic, f.topic.Name != "", nil
}
func (f *fakeReaper) NextExpiry() (int64, bool, error) { return f.next, f.next != 0, nil }
func (f *fakeReaper) ExpireTopic(context.Context, string, int64) (bool, error) {
	f.expires.Add(1)
	if !f.recordScans {
		f.attempts.Attempt()
	}
	if f.failExp {
		return false, errors.New("injected: read-only file system")
	}
	return f.deleteOK, nil
}

// TestReaperBacksOff: neither a failing delete nor an expiry that cannot be
// cleared makes the reaper spin.
func TestReaperBacksOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    *fakeReaper
	}{
		{"delete fails", &fakeReaper{expired: []string{"x"}, topic: protocol.TopicInfo{Name: "x", ExpireAt: 1}, next: 1, failExp: true}},
		{"expiry never clears", &fakeReaper{next: 1, recordScans: true}},
		{"writer refuses the delete", &fakeReaper{expired: []string{"x"}, topic: protocol.TopicInfo{Name: "x", ExpireAt: 1}, next: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReaper(tc.f, ReaperOptions{})
			r.Start()
			defer stopReaper(t, r)
			// Hooks must not cut backoffs short: attempts at 0, 100,
			// 300, 700 ms at the earliest.
			tc.f.attempts.Expect(t, 4, 100*time.Millisecond, time.Minute, func() { r.Notify(time.Now().UnixMilli()) })
		})
	}
}

func TestReaperRefusesSlave(t *testing.T) {
	b := openBroker(t, t.TempDir(), nil, func(o *broker.Options) { o.Slave = true })
	defer b.Close()
	if _, err := NewReaper(b, ReaperOptions{}); !errors.Is(err, ErrSlave) {
		t.Fatalf("NewReaper on a slave: %v", err)
	}
}
