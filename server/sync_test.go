package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
)

// syncSetup is a real master (broker, server, SyncTracker) on loopback.
type syncSetup struct {
	b    *broker.Broker
	srv  *Server
	tr   *replication.SyncTracker
	addr string
	logs *smsstest.SyncBuffer
}

// syncFronts are the two ways a master serves publishes: a goroutine per
// connection, and the epoll loop (where the platform has it), which holds
// replies instead of parking (epoll_sync_linux.go). Every semi-sync test
// runs on both.
var syncFronts = []struct {
	name  string
	epoll bool
}{{"goroutines", false}, {"epoll", true}}

func forEachFront(t *testing.T, f func(t *testing.T, epoll bool)) {
	for _, fr := range syncFronts {
		t.Run(fr.name, func(t *testing.T) {
			if fr.epoll && !epollSupported {
				t.Skip("no epoll loop on this platform")
			}
			f(t, fr.epoll)
		})
	}
}

func startSyncMaster(t *testing.T, need int, timeout time.Duration, degrade, epoll bool) *syncSetup {
	t.Helper()
	return startSyncMasterWith(t, need, timeout, degrade, epoll, nil)
}

// startSyncMasterWith is startSyncMaster with the broker's Backend wrapped
// by wrap (nil: as it is).
func startSyncMasterWith(t *testing.T, need int, timeout time.Duration, degrade, epoll bool, wrap func(fzBackend) Backend) *syncSetup {
	t.Helper()
	logs := &smsstest.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b, err := broker.Open(broker.Options{Dir: t.TempDir(), FlushLevel: 1, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := replication.NewSyncTracker(replication.SyncOptions{Slaves: need, Timeout: timeout, Degrade: degrade,
		LastEventID: b.LastEventID, Logger: logger, LogSample: 1})
	if err != nil {
		t.Fatal(err)
	}
	var be Backend = fzBackend{b}
	if wrap != nil {
		be = wrap(fzBackend{b})
	}
	s, err := New(Options{Backend: be, Logger: logger, LogSample: 1, Replication: replication.SourceOf(b.ReplicaStream),
		Sync: tr, AliveInterval: 200 * time.Millisecond, Epoll: epoll})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	if epoll {
		waitServing(t, s)
		if s.ep == nil {
			t.Fatalf("the epoll loop did not start with syncSlaves %d:\n%s", need, logs.String())
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		s.Shutdown(ctx)
		<-done
		b.Close()
		if t.Failed() {
			t.Logf("master log:\n%s", logs.String())
		}
	})
	return &syncSetup{b: b, srv: s, tr: tr, addr: s.Addr().String(), logs: logs}
}

// startSyncSlave replicates from the master into a real slave broker.
func startSyncSlave(t *testing.T, addr string) (*replication.Slave, func()) {
	t.Helper()
	sb, err := broker.Open(broker.Options{Dir: t.TempDir(), FlushLevel: 1, Slave: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := replication.NewSlave(sb, replication.SlaveOptions{MasterAddr: addr, AliveInterval: 200 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			sb.Close()
		})
	}
	t.Cleanup(stop)
	return s, stop
}

type syncClient struct {
	c  net.Conn
	br *bufio.Reader
}

func dialSync(t *testing.T, addr string) *syncClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, testDeadline)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &syncClient{c: c, br: bufio.NewReader(c)}
}

// do sends one request and returns its reply (nil or a *BizError) and how
// long it took.
func (sc *syncClient) do(t *testing.T, req []byte) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	sc.c.SetDeadline(time.Now().Add(testDeadline))
	send(t, sc.c, req)
	_, err := protocol.ReadReply(sc.br, protocol.ReplyPlain, 0)
	if err != nil && !protocol.IsBizError(err) {
		t.Fatalf("reply: %v", err)
	}
	return err, time.Since(start)
}

// TestSyncRepliesAfterConfirmation: with our slave connected, pub, delay,
// create and delete are answered 200 only once the slave has the write.
func TestSyncRepliesAfterConfirmation(t *testing.T) {
	forEachFront(t, testSyncRepliesAfterConfirmation)
}

func testSyncRepliesAfterConfirmation(t *testing.T, epoll bool) {
	m := startSyncMaster(t, 1, 10*time.Second, false, epoll)
	s, _ := startSyncSlave(t, m.addr)
	c := dialSync(t, m.addr)
	reqs := []struct {
		name string
		req  []byte
	}{
		{"create", createReq("t", 0)},
		{"pub", pubReq("t", record("a"))},
		{"pub of 3", pubReq("t", record("b"), record("c"), record("d"))},
		{"delay", delayReq("t", 5000, record("later"))},
		{"create other", createReq("u", 0)},
		{"delete", enc(protocol.AppendDelete(nil, []byte("u"), nil))},
	}
	for _, r := range reqs {
		err, took := c.do(t, r.req)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		// Everything the master committed before this reply is on the
		// slave: the 200 came after the confirmation.
		if last, got := m.b.LastEventID(), s.Status().LastEventID; got != last {
			t.Fatalf("%s answered after %v with the slave at %d, the master at %d", r.name, took, got, last)
		}
	}
	if in, _ := m.tr.Info(); in.Confirming != 1 || in.TimeoutsFail != 0 {
		t.Fatalf("info %+v", in)
	}
}

// TestSyncFailWithoutConfirmation: without a confirming slave (none, a
// ReplicaClient sending 2-byte acks, a silent original-style slave) every
// write is answered 400 "write not confirmed ..." within the timeout plus
// a margin, the connection stays usable, and the write is on the master.
func TestSyncFailWithoutConfirmation(t *testing.T) { forEachFront(t, testSyncFailWithoutConfirmation) }

func testSyncFailWithoutConfirmation(t *testing.T, epoll bool) {
	const timeout = 300 * time.Millisecond
	want := fmt.Sprintf("write not confirmed by 1 slave(s) within %d ms; it is stored on the master and may still be replicated", timeout.Milliseconds())
	for _, slave := range []string{"none", "ReplicaClient acks", "silent"} {
		t.Run(slave, func(t *testing.T) {
			m := startSyncMaster(t, 1, timeout, false, epoll)
			if slave != "none" {
				rc := dialSync(t, m.addr)
				send(t, rc.c, enc(protocol.AppendReplica(nil, 0)))
				go func() {
					for {
						if _, err := protocol.ReadReplicaFrame(rc.br, 1<<20); err != nil {
							return
						}
						if slave == "ReplicaClient acks" {
							if _, err := rc.c.Write([]byte{0, 0}); err != nil {
								return
							}
						}
					}
				}()
				smsstest.WaitFor(t, testDeadline, "the replica stream", func() bool { return len(m.b.Replication().Slaves) == 1 })
			}
			c := dialSync(t, m.addr)
			for i, req := range [][]byte{createReq("t", 0), pubReq("t", record("a")), delayReq("t", 5000, record("b"))} {
				before := m.b.LastEventID()
				err, took := c.do(t, req)
				var be *protocol.BizError
				if !errors.As(err, &be) || be.Msg != want {
					t.Fatalf("request %d: %v, want 400 %q", i, err, want)
				}
				if took < timeout || took > timeout+3*time.Second {
					t.Fatalf("request %d answered after %v (timeout %v)", i, took, timeout)
				}
				if m.b.LastEventID() <= before {
					t.Fatalf("request %d: not stored on the master", i)
				}
			}
			if err, _ := c.do(t, aliveReq()); err != nil {
				t.Fatalf("alive after refusals: %v", err)
			}
			if in, _ := m.tr.Info(); in.TimeoutsFail != 3 || in.Confirming != 0 {
				t.Fatalf("info %+v", in)
			}
		})
	}
}

// TestSyncWaitDoesNotBlockWriter: writes waiting for confirmations never
// hold the writer: many connections' writes all commit at once, and an
// async write through the broker commits while they wait.
func TestSyncWaitDoesNotBlockWriter(t *testing.T) { forEachFront(t, testSyncWaitDoesNotBlockWriter) }

func testSyncWaitDoesNotBlockWriter(t *testing.T, epoll bool) {
	m := startSyncMaster(t, 1, 2*time.Second, false, epoll)
	if _, err := m.b.CreateTopic(context.Background(), []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	const conns = 16
	start := m.b.LastEventID()
	var wg sync.WaitGroup
	for i := range conns {
		c := dialSync(t, m.addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.c.SetDeadline(time.Now().Add(testDeadline))
			c.c.Write(pubReq("t", record(fmt.Sprint(i))))
			protocol.ReadReply(c.br, protocol.ReplyPlain, 0)
		}()
	}
	smsstest.WaitFor(t, testDeadline, "every write committed while its reply waits", func() bool {
		in, _ := m.tr.Info()
		return m.b.LastEventID() == start+conns && in.Waiting == conns
	})
	t0 := time.Now()
	r := record("direct")
	if _, err := m.b.Publish(context.Background(), []byte("t"), r, 1); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("a write through the writer took %v while replies waited", d)
	}
	wg.Wait()
}

// TestSyncDegradeAndRecover: degrade mode answers 200 after the timeout,
// turns asynchronous, and is synchronous again once a slave caught up.
func TestSyncDegradeAndRecover(t *testing.T) { forEachFront(t, testSyncDegradeAndRecover) }

func testSyncDegradeAndRecover(t *testing.T, epoll bool) {
	const timeout = 300 * time.Millisecond
	m := startSyncMaster(t, 1, timeout, true, epoll)
	c := dialSync(t, m.addr)
	if err, took := c.do(t, createReq("t", 0)); err != nil || took < timeout {
		t.Fatalf("create: %v after %v", err, took)
	}
	if !m.tr.Degraded() {
		t.Fatal("not degraded after a timeout")
	}
	if err, took := c.do(t, pubReq("t", record("async"))); err != nil || took >= timeout {
		t.Fatalf("degraded pub: %v after %v", err, took)
	}
	s, _ := startSyncSlave(t, m.addr)
	smsstest.WaitFor(t, testDeadline, "recovery", func() bool { return !m.tr.Degraded() })
	if got := s.Status().LastEventID; got != m.b.LastEventID() {
		t.Fatalf("recovered with the slave at %d, the master at %d", got, m.b.LastEventID())
	}
	for i := range 5 {
		if err, _ := c.do(t, pubReq("t", record(fmt.Sprint(i)))); err != nil {
			t.Fatal(err)
		}
		if got := s.Status().LastEventID; got != m.b.LastEventID() {
			t.Fatalf("synchronous again, yet answered with the slave at %d, the master at %d", got, m.b.LastEventID())
		}
	}
	in, _ := m.tr.Info()
	if in.TimeoutsDegrade != 1 || in.Unconfirmed != 2 || in.Degradations != 1 || in.Degraded {
		t.Fatalf("info %+v", in)
	}
	if !strings.Contains(m.logs.String(), "degraded to asynchronous") || !strings.Contains(m.logs.String(), "restored") {
		t.Fatalf("state changes not logged:\n%s", m.logs.String())
	}
}
