//go:build linux

package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
)

// The epoll loop's held replies (epoll_sync_linux.go). Each test makes the
// replies wait for certain: the requests are all sent, and seen held by
// the tracker, before the slave that confirms them is started.

// startLoopSync starts a semi-synchronous master (syncSlaves 1, no slave
// yet) served by the epoll loop, with topic t, and a connection the loop
// owns (it was answered once).
func startLoopSync(t *testing.T, timeout time.Duration) (*syncSetup, *syncClient) {
	t.Helper()
	m := startSyncMaster(t, 1, timeout, false, true)
	if _, err := m.b.CreateTopic(context.Background(), []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	c := dialSync(t, m.addr)
	if err, _ := c.do(t, aliveReq()); err != nil { // the connection is the loop's from here on
		t.Fatal(err)
	}
	return m, c
}

// heldPipeline writes reqs in one write and waits until the master holds
// want replies (the waiting gauge counts the loop's held replies).
func heldPipeline(t *testing.T, m *syncSetup, c *syncClient, want int, reqs ...[]byte) {
	t.Helper()
	c.c.SetDeadline(time.Now().Add(testDeadline))
	send(t, c.c, bytes.Join(reqs, nil))
	smsstest.WaitFor(t, testDeadline, fmt.Sprintf("%d replies held", want), func() bool {
		in, _ := m.tr.Info()
		return in.Waiting == int64(want)
	})
}

// readReplies reads n plain replies: nil for a 200, the refusal's text
// otherwise.
func readReplies(t *testing.T, c *syncClient, n int) []string {
	t.Helper()
	got := make([]string, n)
	for i := range got {
		_, err := protocol.ReadReply(c.br, protocol.ReplyPlain, 0)
		var be *protocol.BizError
		switch {
		case err == nil:
			got[i] = "200"
		case errors.As(err, &be):
			got[i] = be.Msg
		default:
			t.Fatalf("reply %d of %d: %v", i+1, n, err)
		}
	}
	return got
}

// TestEpollSemiSyncRepliesInOrder: a connection's replies keep its request
// order when some wait for the slave and others are refusals that need no
// confirmation, and every 200 comes once the slave has the write; the loop
// served them.
func TestEpollSemiSyncRepliesInOrder(t *testing.T) {
	m, c := startLoopSync(t, 10*time.Second)
	var reqs [][]byte
	var want []string
	for i := range 30 {
		if i%4 == 1 {
			reqs = append(reqs, pubReq("missing", record(fmt.Sprint(i))))
			want = append(want, protocol.ErrTopicNotExist.Error())
			continue
		}
		reqs = append(reqs, pubReq("t", record(fmt.Sprint(i))))
		want = append(want, "200")
	}
	served := m.srv.ep.served.Load()
	heldPipeline(t, m, c, len(reqs), reqs...) // every reply waits: the publishes for the slave, the refusals behind them
	s, _ := startSyncSlave(t, m.addr)
	got := readReplies(t, c, len(reqs))
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("reply %d is %q, want %q (replies %q)", i, got[i], want[i], got)
		}
	}
	if last, sl := m.b.LastEventID(), s.Status().LastEventID; sl != last {
		t.Fatalf("answered with the slave at %d, the master at %d", sl, last)
	}
	if n := m.srv.ep.served.Load() - served; n != int64(len(reqs)) {
		t.Fatalf("the loop served %d of %d publishes", n, len(reqs))
	}
	if in, _ := m.tr.Info(); in.Waiting != 0 || in.TimeoutsFail != 0 {
		t.Fatalf("after the replies: %+v", in)
	}
}

// TestEpollSemiSyncHeldThenOtherCommand: a command the loop does not serve,
// sent behind held publishes, is answered after them (the connection goes
// back to a goroutine only once its held replies are written), and what
// follows it is served too.
func TestEpollSemiSyncHeldThenOtherCommand(t *testing.T) {
	m, c := startLoopSync(t, 10*time.Second)
	heldPipeline(t, m, c, 3, pubReq("t", record("a")), pubReq("t", record("b")), pubReq("t", record("c")),
		aliveReq(), pubReq("t", record("d")))
	startSyncSlave(t, m.addr)
	for i, want := range [][]byte{okReply(), okReply(), okReply(), aliveReply(), okReply()} {
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c.br, got); err != nil {
			t.Fatalf("reply %d: %v", i+1, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("reply %d is %q, want %q", i+1, got, want)
		}
	}
}

// TestEpollSemiSyncHalfClose: a client that ends its stream right after
// its publishes still gets every reply once the slave confirmed them, then
// the end of the connection.
func TestEpollSemiSyncHalfClose(t *testing.T) {
	m, c := startLoopSync(t, 10*time.Second)
	var reqs [][]byte
	for i := range 5 {
		reqs = append(reqs, pubReq("t", record(fmt.Sprint(i))))
	}
	heldPipeline(t, m, c, 5, reqs...)
	if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	smsstest.WaitFor(t, testDeadline, "the end of stream read while the replies are held", func() bool { return m.srv.ep.heldEOF.Load() == 1 })
	startSyncSlave(t, m.addr)
	got := readReplies(t, c, len(reqs))
	for i, r := range got {
		if r != "200" {
			t.Fatalf("reply %d: %q", i+1, r)
		}
	}
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Fatalf("after the replies: %v, want the end of the connection", err)
	}
}

// TestEpollSemiSyncShutdownReleases: Shutdown answers the held replies
// (here: not confirmed at their deadline, with no slave) before the
// connections go back to goroutines and are closed.
func TestEpollSemiSyncShutdownReleases(t *testing.T) {
	const timeout = 400 * time.Millisecond
	m, c := startLoopSync(t, timeout)
	heldPipeline(t, m, c, 2, pubReq("t", record("a")), pubReq("t", record("b")))
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		done <- m.srv.Shutdown(ctx)
	}()
	want := fmt.Sprintf("write not confirmed by 1 slave(s) within %d ms; it is stored on the master and may still be replicated", timeout.Milliseconds())
	for i, r := range readReplies(t, c, 2) {
		if r != want {
			t.Fatalf("reply %d: %q, want %q", i+1, r, want)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if in, _ := m.tr.Info(); in.TimeoutsFail != 2 || in.Waiting != 0 {
		t.Fatalf("after shutdown: %+v", in)
	}
}

// TestEpollSemiSyncThrottlesPipeline: a client pipelining far more
// publishes than the slaves confirm is not read further once it has
// maxHeldReplies held (the loop's memory stays bounded, as a goroutine's
// one request at a time bounds it), and every publish is answered 200 in
// order once a slave confirms.
func TestEpollSemiSyncThrottlesPipeline(t *testing.T) {
	m, c := startLoopSync(t, 10*time.Second)
	const n = 4 * maxHeldReplies
	var reqs [][]byte
	for i := range n {
		reqs = append(reqs, pubReq("t", record(fmt.Sprintf("m%05d", i))))
	}
	c.c.SetDeadline(time.Now().Add(testDeadline))
	sent := make(chan error, 1)
	go func() { _, err := c.c.Write(bytes.Join(reqs, nil)); sent <- err }()
	smsstest.WaitFor(t, testDeadline, "the connection throttled", func() bool { return m.srv.ep.throttles.Load() == 1 })
	in, _ := m.tr.Info()
	if in.Waiting < maxHeldReplies || in.Waiting >= n {
		t.Fatalf("%d replies held once throttled, want at least %d and fewer than %d", in.Waiting, maxHeldReplies, n)
	}
	s, _ := startSyncSlave(t, m.addr)
	for i, r := range readReplies(t, c, n) {
		if r != "200" {
			t.Fatalf("reply %d: %q", i+1, r)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if last, sl := m.b.LastEventID(), s.Status().LastEventID; sl != last || last < n {
		t.Fatalf("answered with the slave at %d, the master at %d", sl, last)
	}
	if in, _ := m.tr.Info(); in.Waiting != 0 {
		t.Fatalf("after the replies: %+v", in)
	}
}

// beforeBatch calls hook on the loop's goroutine before each batch the loop
// publishes.
type beforeBatch struct {
	batchBackend
	hook func()
}

func (b *beforeBatch) PublishBatch(ctx context.Context, ps []Pub) {
	b.hook()
	b.batchBackend.PublishBatch(ctx, ps)
}

// confirmingSlave is a slave reduced to its wire: it asks for the replica
// stream from the start, says hello, counts the block frames it is sent
// and confirms only when told (confirm).
type confirmingSlave struct {
	c      net.Conn
	frames atomic.Int64
}

func startConfirmingSlave(t *testing.T, addr string) *confirmingSlave {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, testDeadline)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req, err := protocol.AppendReplica(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	req = replication.AppendConfirm(req, replication.Confirm{Kind: replication.ConfirmHello, Instance: [replication.InstanceIDLen]byte{1}})
	send(t, c, req)
	s := &confirmingSlave{c: c}
	go func() {
		br := bufio.NewReader(c)
		for {
			f, err := protocol.ReadReplicaFrame(br, 1<<20)
			if err != nil {
				return
			}
			if f.Code == protocol.StatusOK {
				s.frames.Add(1)
			}
		}
	}()
	return s
}

func (s *confirmingSlave) confirm(t *testing.T, eventID int64) {
	t.Helper()
	send(t, s.c, replication.AppendConfirm(nil, replication.Confirm{Kind: replication.ConfirmConfirm, EventID: eventID}))
}

// TestEpollSemiSyncReleasesBeforeTheNextGroup: a reply confirmed between
// two turns is written before the next turn's group commit, not after it
// (at flushLevel 2 that commit includes the master's fsync, which the
// reply would wait for). The loop is held at the start of a turn while the
// slave confirms a held publish and another connection publishes; the
// batch of that publish must find the first reply already sent.
func TestEpollSemiSyncReleasesBeforeTheNextGroup(t *testing.T) {
	var (
		armed  atomic.Bool
		paused = make(chan struct{})
		resume = make(chan struct{})
		check  atomic.Bool
		seen   = make(chan error, 1)
		a      *syncClient
	)
	testTurnStart = func() {
		if armed.CompareAndSwap(true, false) {
			paused <- struct{}{}
			<-resume
		}
	}
	t.Cleanup(func() { testTurnStart = nil }) // after the server's cleanup: registered before it
	m := startSyncMasterWith(t, 1, 10*time.Second, false, true, func(b fzBackend) Backend {
		return &beforeBatch{batchBackend: batchBackend{fzBackend: b}, hook: func() {
			if !check.CompareAndSwap(true, false) {
				return
			}
			// Written before this batch, the reply is on a's socket now.
			a.c.SetReadDeadline(time.Now().Add(testDeadline))
			_, err := protocol.ReadReply(a.br, protocol.ReplyPlain, 0)
			seen <- err
		}}
	})
	if _, err := m.b.CreateTopic(context.Background(), []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	sl := startConfirmingSlave(t, m.addr)
	a, c := dialSync(t, m.addr), dialSync(t, m.addr)
	for _, cl := range []*syncClient{a, c} {
		if err, _ := cl.do(t, aliveReq()); err != nil { // the loop's from here on
			t.Fatal(err)
		}
	}
	heldPipeline(t, m, a, 1, pubReq("t", record("a")))
	idA := m.b.LastEventID()
	smsstest.WaitFor(t, testDeadline, "a's block streamed to the slave", func() bool { return sl.frames.Load() >= 2 }) // create, a

	armed.Store(true)
	send(t, c.c, pubReq("t", record("c")))
	select {
	case <-paused:
	case <-time.After(testDeadline):
		t.Fatal("the loop did not start a turn")
	}
	sl.confirm(t, idA)
	smsstest.WaitFor(t, testDeadline, "a confirmed", func() bool { done, _ := m.tr.Settle(idA); return done })
	check.Store(true)
	resume <- struct{}{}
	select {
	case err := <-seen:
		if err != nil {
			t.Fatalf("a's confirmed reply was not sent before the next group commit: %v", err)
		}
	case <-time.After(2 * testDeadline):
		t.Fatal("no batch after the turn")
	}
	smsstest.WaitFor(t, testDeadline, "c's block streamed to the slave", func() bool { return sl.frames.Load() >= 3 })
	sl.confirm(t, m.b.LastEventID())
	if got := readReplies(t, c, 1); got[0] != "200" {
		t.Fatalf("c's reply: %q", got[0])
	}
}
