package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
)

// populate writes a mix of every binlog command to a master: creates,
// single and multi-record pubs, a delayed message and its apply, an
// expiring topic reaped by a delete, and a delete.
func populate(t *testing.T, m *broker.Broker, round string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"order", "gone", "multi"} {
		if _, err := m.CreateTopic(ctx, []byte(name+round), 0); err != nil {
			t.Fatal(err)
		}
	}
	expireAt := time.Now().UnixMilli() + 1000
	if _, err := m.CreateTopic(ctx, []byte("short"+round), expireAt); err != nil {
		t.Fatal(err)
	}
	r, n := recs("short"+round, 3)
	if _, err := m.Publish(ctx, []byte("short"+round), r, n); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		r, n := recs("order"+round, 1)
		if _, err := m.Publish(ctx, []byte("order"+round), r, n); err != nil {
			t.Fatal(err)
		}
		r, n = recs("multi"+round, 1+i%7)
		if _, err := m.Publish(ctx, []byte("multi"+round), r, n); err != nil {
			t.Fatal(err)
		}
	}
	r, n = recs("gone"+round, 2)
	if _, err := m.Publish(ctx, []byte("gone"+round), r, n); err != nil {
		t.Fatal(err)
	}
	r, n = recs("later"+round, 2)
	if _, err := m.PublishDelay(ctx, []byte("order"+round), r, n, 1000); err != nil {
		t.Fatal(err)
	}
	page, err := m.ScanDelays(0, time.Now().UnixMilli()+5000, 10)
	due := page.Due
	if err != nil || len(due) != 1 {
		t.Fatalf("due delays %v %v", due, err)
	}
	if id, err := m.ApplyDelay(ctx, due[0].Topic, due[0].Value); err != nil || id == 0 {
		t.Fatalf("apply delay: %d %v", id, err)
	}
	if _, err := m.DeleteTopic(ctx, []byte("gone"+round)); err != nil {
		t.Fatal(err)
	}
	for time.Now().UnixMilli() <= expireAt {
		time.Sleep(10 * time.Millisecond)
	}
	if ok, err := m.ExpireTopic(ctx, "short"+round, expireAt); err != nil || !ok {
		t.Fatalf("expire: %v %v", ok, err)
	}
	// One more pub after the delete keeps the last block a multi-record one.
	r, n = recs("multi-tail"+round, 3)
	if _, err := m.Publish(ctx, []byte("multi"+round), r, n); err != nil {
		t.Fatal(err)
	}
}

var populatedTopics = []string{"order1", "multi1", "gone1", "short1", "order2", "multi2", "gone2", "short2"}

// TestFullSyncFromZero replicates a master's whole history into an empty
// slave and compares binlogs byte for byte and topic contents.
func TestFullSyncFromZero(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	populate(t, m, "1")
	// Alives every 100 ms of idleness keep the stream open through
	// populate's idle spell (about a second, waiting for a topic to
	// expire). The slave gives up after 600 ms of silence rather than the
	// default 200 ms: a loaded machine may hold the master back half a
	// second, and the stream must stay open (no reconnect) all the same.
	ms := serveMaster(t, m, "", MasterOptions{AliveInterval: 100 * time.Millisecond})

	sb := openBroker(t, sdir, true, nil)
	defer sb.Close()
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, AliveInterval: 100 * time.Millisecond,
		SilenceTimeout: 600 * time.Millisecond})
	waitCaughtUp(t, s, m, 20*time.Second)
	// Live replication of new writes on the open stream.
	populate(t, m, "2")
	waitCaughtUp(t, s, m, 20*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := s.Status()
	if st.State != StateStopped || st.Reconnects != 0 || st.Blocks == 0 {
		t.Fatalf("status %+v", st)
	}
	assertSame(t, mdir, sdir, populatedTopics...)
	if got := topicMessages(t, sdir, "gone1"); len(got) != 0 {
		t.Fatalf("deleted topic has %d messages on the slave", len(got))
	}
	for _, name := range []string{"order2", "multi2"} {
		if _, err := sb.Topic([]byte(name)); err != nil {
			t.Fatalf("topic %s on the slave: %v", name, err)
		}
	}
	for _, name := range []string{"gone2", "short2"} {
		if _, err := sb.Topic([]byte(name)); err == nil {
			t.Fatalf("topic %s still exists on the slave", name)
		}
	}
}

// TestResumeAfterSlaveRestart restarts the slave several times while the
// master writes multi-record blocks: the slave resumes after the last
// message of its last block (docs/protocol.md §10 item 11) without gap or duplicate.
func TestResumeAfterSlaveRestart(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	ctx := context.Background()
	if _, err := m.CreateTopic(ctx, []byte("multi"), 0); err != nil {
		t.Fatal(err)
	}
	ms := serveMaster(t, m, "", MasterOptions{AliveInterval: time.Second})
	for round := 0; round < 4; round++ {
		for i := 0; i < 20; i++ {
			r, n := recs("r", 2+i%5) // every block holds several messages
			if _, err := m.Publish(ctx, []byte("multi"), r, n); err != nil {
				t.Fatal(err)
			}
		}
		sb := openBroker(t, sdir, true, nil)
		// -event 0 on every start: the position must come from the binlog.
		s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr})
		waitCaughtUp(t, s, m, 20*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if st := s.Status(); st.Reconnects != 0 {
			t.Fatalf("round %d: %d reconnects, last error %s", round, st.Reconnects, st.LastError)
		}
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
		assertSame(t, mdir, sdir, "multi")
	}
	for _, err := range ms.serveResults() {
		if err != nil && !errors.Is(err, ErrSlaveGone) {
			t.Fatalf("a replica stream ended with %v", err)
		}
	}
}

// TestResumeAfterMasterRestart restarts the master (gracefully, then
// abruptly with connections cut) while the slave follows it.
func TestResumeAfterMasterRestart(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	ctx := context.Background()
	if _, err := m.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	ms := serveMaster(t, m, "", MasterOptions{AliveInterval: 100 * time.Millisecond})
	addr := ms.addr
	sb := openBroker(t, sdir, true, nil)
	defer sb.Close()
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: addr, AliveInterval: 100 * time.Millisecond})
	for round := 0; round < 3; round++ {
		for i := 0; i < 200; i++ {
			r, n := recs("m", 1+i%3)
			if _, err := m.Publish(ctx, []byte("t"), r, n); err != nil {
				t.Fatal(err)
			}
		}
		waitCaughtUp(t, s, m, 20*time.Second)
		ms.stop()
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		smsstest.WaitFor(t, 10*time.Second, "the slave to notice", func() bool { return s.Status().State != StateStreaming })
		m = openBroker(t, mdir, false, nil)
		ms = serveMaster(t, m, addr, MasterOptions{AliveInterval: 100 * time.Millisecond})
	}
	r, n := recs("after", 4)
	if _, err := m.Publish(ctx, []byte("t"), r, n); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, s, m, 20*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.Reconnects < 3 {
		t.Fatalf("expected at least 3 reconnects, status %+v", st)
	}
	ms.stop()
	m.Close()
	assertSame(t, mdir, sdir, "t")
}

// TestSlaveStartsBeforeMaster: a slave whose master is down keeps retrying
// with growing delays and replicates as soon as the master appears.
func TestSlaveStartsBeforeMaster(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	mdir, sdir := t.TempDir(), t.TempDir()
	sb := openBroker(t, sdir, true, nil)
	defer sb.Close()
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: addr, MinBackoff: 10 * time.Millisecond, MaxBackoff: 80 * time.Millisecond})
	smsstest.WaitFor(t, 10*time.Second, "several failed attempts", func() bool { return s.Status().Reconnects >= 5 })
	st := s.Status()
	if st.State != StateConnecting || !strings.Contains(st.LastError, "connect") || st.NextRetry.IsZero() {
		t.Fatalf("status while the master is down: %+v", st)
	}
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	populate(t, m, "1")
	serveMaster(t, m, addr, MasterOptions{})
	waitCaughtUp(t, s, m, 20*time.Second)
	if st := s.Status(); st.State != StateStreaming || st.ConnectedSince.IsZero() {
		t.Fatalf("status after connecting: %+v", st)
	}
	stop()
	assertSame(t, mdir, sdir, populatedTopics[:4]...)
}

// TestBackoffDoublesAndCaps checks the retry delays of an unreachable
// master: doubling from MinBackoff, never above MaxBackoff.
func TestBackoffDoublesAndCaps(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	sb := openBroker(t, t.TempDir(), true, nil)
	defer sb.Close()
	s, _ := runSlave(t, sb, SlaveOptions{MasterAddr: addr, MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond})
	// RetryIn is the backoff chosen, not the time left when this loop
	// happens to look: a late poll cannot make it look shorter. A poll may
	// miss a retry, so only the order and the bounds are exact.
	var delays []time.Duration
	last := 0
	deadline := time.Now().Add(20 * time.Second)
	for len(delays) < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d retries observed: %v", len(delays), delays)
		}
		st := s.Status()
		if st.Reconnects != last && !st.NextRetry.IsZero() {
			last = st.Reconnects
			delays = append(delays, st.RetryIn)
		}
		time.Sleep(time.Millisecond)
	}
	for i, d := range delays {
		if d != 10*time.Millisecond && d != 20*time.Millisecond && d != 40*time.Millisecond {
			t.Fatalf("delay %d is %v, not a doubling of 10 ms capped at 40 ms (%v)", i, d, delays)
		}
		if i > 0 && d < delays[i-1] {
			t.Fatalf("delays shrank without progress: %v", delays)
		}
	}
	if delays[len(delays)-1] != 40*time.Millisecond {
		t.Fatalf("delays did not reach the 40 ms cap: %v", delays)
	}
}

// TestStartEventSkipsHistory: -event E on an empty slave syncs the topics
// valid at E and replicates only what follows E (docs/protocol.md §4.2).
func TestStartEventSkipsHistory(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	ctx := context.Background()
	m.CreateTopic(ctx, []byte("a"), 0)
	r, n := recs("old", 3)
	m.Publish(ctx, []byte("a"), r, n)
	e := m.LastEventID()
	m.CreateTopic(ctx, []byte("b"), 0)
	r, n = recs("new", 2)
	m.Publish(ctx, []byte("a"), r, n)
	ms := serveMaster(t, m, "", MasterOptions{})
	sb := openBroker(t, sdir, true, nil)
	defer sb.Close()
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, StartEvent: e})
	waitCaughtUp(t, s, m, 10*time.Second)
	stop()
	blocks := binlogBlocks(t, sdir)
	if len(blocks) != 2 || blocks[0].EventID != e+1 {
		t.Fatalf("slave binlog after -event %d: %d blocks, first %+v", e, len(blocks), blocks)
	}
	if len(topicMessages(t, sdir, "a")) != 2 {
		t.Fatalf("topic a on the slave: %v", topicMessages(t, sdir, "a"))
	}
	for _, name := range []string{"a", "b"} {
		if _, err := sb.Topic([]byte(name)); err != nil {
			t.Fatalf("topic %s: %v", name, err)
		}
	}
}

// batchTarget gives a broker the BatchApplier interface by applying one
// block at a time, to exercise the slave's batch path and its prefix rule.
type batchTarget struct {
	*broker.Broker
	calls, maxRun int
}

func (b *batchTarget) ApplyReplicatedBatch(ctx context.Context, raws [][]byte) (int64, int, error) {
	b.calls++
	b.maxRun = max(b.maxRun, len(raws))
	var last int64
	for i, raw := range raws {
		id, err := b.ApplyReplicated(ctx, raw)
		if err != nil {
			return last, i, err
		}
		last = id
	}
	return last, len(raws), nil
}

// TestBatchApplierPath replicates through a BatchApplier: identical
// result, blocks handed over in runs, and a failure in the middle of a run
// keeps exactly the prefix before it.
func TestBatchApplierPath(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	populate(t, m, "1")
	ms := serveMaster(t, m, "", MasterOptions{})
	sb := openBroker(t, sdir, true, nil)
	defer sb.Close()
	bt := &batchTarget{Broker: sb}
	s, err := NewSlave(bt, SlaveOptions{MasterAddr: ms.addr, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitCaughtUp(t, s, m, 20*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if bt.maxRun < 2 {
		t.Fatalf("blocks were never handed over in runs (%d calls, longest %d)", bt.calls, bt.maxRun)
	}
	assertSame(t, mdir, sdir, populatedTopics[:4]...)

	// A bad block in the middle of a run: the two before it are applied.
	fm := startFake(t, func(n int, _ int64) ([]byte, bool) {
		var out []byte
		for _, b := range [][]byte{block(binlog.CmdCreate, 1, "x", make([]byte, 8)), block(binlog.CmdCreate, 2, "y", make([]byte, 8)), []byte("junk"), block(binlog.CmdCreate, 4, "z", make([]byte, 8))} {
			out = append(out, frame(b)...)
		}
		return out, false
	})
	sb2 := openBroker(t, t.TempDir(), true, nil)
	defer sb2.Close()
	s2, err := NewSlave(&batchTarget{Broker: sb2}, SlaveOptions{MasterAddr: fm.addr, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Run(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Run: %v", err)
	}
	if st := s2.Status(); st.LastEventID != 2 || st.Blocks != 2 || !strings.Contains(st.LastError, "after 2") {
		t.Fatalf("status %+v", st)
	}
}

// TestRestartAfterSkippedPub: a slave whose last block is a pub it did not
// apply (its topic had expired by the time the create arrived) restarts
// and resumes (docs/protocol.md §10 item 14).
func TestRestartAfterSkippedPub(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	ctx := context.Background()
	expireAt := time.Now().UnixMilli() + 200
	if _, err := m.CreateTopic(ctx, []byte("x"), expireAt); err != nil {
		t.Fatal(err)
	}
	r, n := recs("x", 2)
	if _, err := m.Publish(ctx, []byte("x"), r, n); err != nil {
		t.Fatal(err)
	}
	for time.Now().UnixMilli() <= expireAt {
		time.Sleep(10 * time.Millisecond)
	}
	ms := serveMaster(t, m, "", MasterOptions{})
	for round := 0; round < 2; round++ {
		sb := openBroker(t, sdir, true, nil)
		s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr})
		waitCaughtUp(t, s, m, 10*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Topic([]byte("x")); err == nil {
			t.Fatal("an expired topic was created on the slave")
		}
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if mb, sb := binlogBytes(t, mdir), binlogBytes(t, sdir); string(mb) != string(sb) {
		t.Fatal("binlogs differ")
	}
}

// TestReadAheadOnlyWhileCatchingUp: a session reads ahead while it catches
// up (a read fills a batch) and applies what arrives live on its own
// goroutine, switching back and forth within one connection without
// losing, repeating or reordering a block: a backlog at the start, live
// single writes, then blocks over maxBatchBytes again, which fill a batch
// by themselves however the socket cuts the stream.
func TestReadAheadOnlyWhileCatchingUp(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	ctx := context.Background()
	if _, err := m.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	big := rec(strings.Repeat("b", maxBatchBytes+1))
	backlog := func(round string) {
		t.Helper()
		for i := range 3 {
			if _, err := m.Publish(ctx, []byte("t"), big, 1); err != nil {
				t.Fatal(err)
			}
			r, n := recs(fmt.Sprint(round, i), 1+i)
			if _, err := m.Publish(ctx, []byte("t"), r, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	backlog("backlog")
	ms := serveMaster(t, m, "", MasterOptions{})
	sb := openBroker(t, sdir, true, nil)
	defer sb.Close()
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr})
	waitCaughtUp(t, s, m, 20*time.Second)
	ras := s.readAheads.Load()
	if ras < 1 {
		t.Fatal("a backlog was applied without a read-ahead")
	}
	for i := range 20 {
		r, n := recs(fmt.Sprint("live", i), 1)
		if _, err := m.Publish(ctx, []byte("t"), r, n); err != nil {
			t.Fatal(err)
		}
		waitCaughtUp(t, s, m, 20*time.Second)
	}
	if n := s.readAheads.Load(); n != ras {
		t.Fatalf("single live writes started %d read-aheads", n-ras)
	}
	backlog("burst")
	waitCaughtUp(t, s, m, 20*time.Second)
	if n := s.readAheads.Load(); n == ras {
		t.Fatal("blocks over a batch's size arrived live without a read-ahead")
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := s.Status(); st.Reconnects != 0 {
		t.Fatalf("the session did not last: %+v", st)
	}
	assertSame(t, mdir, sdir, "t")
}
