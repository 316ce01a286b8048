//go:build linux

package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// The epoll front-end (epoll_linux.go) must answer exactly as the
// goroutine path does. Every case runs against a server with the key off
// and one with it on; the replies must be the expected bytes in both, and
// with the key on the loop must have served (or handed back) what the case
// says.

func (ts *testServer) connCount() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.conns)
}

// loopCounts reports what the epoll loop served and handed back.
func (ts *testServer) loopCounts() (served, handed int64) {
	if ts.ep == nil {
		return 0, 0
	}
	return ts.ep.served.Load(), ts.ep.handed.Load()
}

// refusal is the 400 the request reader gives req.
func refusal(t *testing.T, req []byte) []byte {
	t.Helper()
	_, err := protocol.ReadRequest(bytes.NewReader(req), protocol.DefaultLimits())
	var re *protocol.RequestError
	if !errors.As(err, &re) {
		t.Fatalf("request is not refused by the reader: %v", err)
	}
	return errReply(re.Error())
}

// topicsBackend is a fake backend holding the topics t, u and slow.
func topicsBackend(t *testing.T) *fakeBackend {
	t.Helper()
	be := newFakeBackend()
	for _, name := range []string{"t", "u", "slow"} {
		if _, err := be.CreateTopic(context.Background(), []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
	return be
}

func bigRecord(n int) []byte { return record(strings.Repeat("x", n)) }

func TestEpollRepliesAsGoroutines(t *testing.T) {
	badRecords := enc(protocol.AppendPub(nil, []byte("t"), []byte("tid"), []byte("not records")))
	// The loop's reads as small as the goroutine path's buffer, so that
	// the ~60 KB of manyPubs cross reads mid-request.
	defer func(n int) { loopReadSize = n }(loopReadSize)
	loopReadSize = readBufferSize
	manyPubs := make([][]byte, 200)
	for i := range manyPubs {
		manyPubs[i] = pubReq("t", bigRecord(300+i)) // ~60 KB: crosses the loop's 16 KiB reads mid-request
	}
	type step struct {
		send []byte
		want []byte // reply bytes read after send
	}
	cases := []struct {
		name       string
		slave      bool
		steps      func(t *testing.T) []step
		closed     bool // the server closes the connection after the steps
		served     int64
		handed     bool // the loop handed the connection back at least once
		timeout    time.Duration
		closeWrite bool   // the client half-closes after the steps
		logs       string // the server logs this
	}{
		{name: "one pub", steps: func(*testing.T) []step {
			return []step{{pubReq("t", record("a")), okReply()}}
		}, served: 1},
		{name: "pipelined pubs", steps: func(*testing.T) []step {
			return []step{{bytes.Join([][]byte{pubReq("t", record("a")), pubReq("t", record("b"), record("c")), pubReq("u", record("d"))}, nil),
				bytes.Repeat(okReply(), 3)}}
		}, served: 3},
		{name: "pub, alive, pub pipelined", steps: func(*testing.T) []step {
			return []step{{bytes.Join([][]byte{pubReq("t", record("a")), aliveReq(), pubReq("t", record("b"))}, nil),
				bytes.Join([][]byte{okReply(), aliveReply(), okReply()}, nil)}}
		}, served: 1, handed: true},
		{name: "create then pubs", steps: func(*testing.T) []step {
			return []step{{createReq("n", 0), okReply()}, {pubReq("n", record("a")), okReply()}}
		}, served: 1, handed: true},
		{name: "bad topic name", steps: func(*testing.T) []step {
			return []step{{pubReq("bad name!", record("a")), errReply(protocol.ValidateTopicName([]byte("bad name!")).Error())},
				{pubReq("t", record("a")), okReply()}}
		}, served: 2},
		{name: "slave refuses pub", slave: true, steps: func(*testing.T) []step {
			return []step{{pubReq("t", record("a")), errReply(protocol.ErrSlavePub.Error())}}
		}, served: 1},
		{name: "records the reader refuses", steps: func(t *testing.T) []step {
			return []step{{badRecords, refusal(t, badRecords)}, {pubReq("t", record("a")), okReply()}}
		}, handed: true},
		{name: "pub spanning reads", steps: func(*testing.T) []step {
			return []step{{pubReq("t", bigRecord(40000)), okReply()}, {pubReq("t", record("a")), okReply()}}
		}, served: 2},
		{name: "pub longer than the loop holds", steps: func(*testing.T) []step {
			return []step{{pubReq("t", bigRecord(maxHeld+2*readBufferSize)), okReply()}, {pubReq("t", record("a")), okReply()}}
		}, handed: true},
		{name: "many pipelined pubs across reads", steps: func(*testing.T) []step {
			return []step{{bytes.Join(manyPubs, nil), bytes.Repeat(okReply(), len(manyPubs))}}
		}, served: int64(len(manyPubs))},
		{name: "half a request then the rest", steps: func(*testing.T) []step {
			r := pubReq("t", record("a"))
			return []step{{r[:len(r)/2], nil}, {r[len(r)/2:], okReply()}}
		}, served: 1},
		{name: "half a request then silence", timeout: 300 * time.Millisecond, steps: func(*testing.T) []step {
			r := pubReq("t", record("a"))
			return []step{{pubReq("t", record("a")), okReply()}, {r[:len(r)/2], nil}}
		}, closed: true, served: 1, logs: "closing connection: incomplete request"},
		{name: "half a request then the end", steps: func(*testing.T) []step {
			r := pubReq("t", record("a"))
			return []step{{pubReq("t", record("a")), okReply()}, {r[:len(r)/2], nil}}
		}, closeWrite: true, closed: true, served: 1, handed: true, logs: "closing connection: incomplete request"},
	}
	for _, tc := range cases {
		for _, on := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/epoll=%v", tc.name, on), func(t *testing.T) {
				be := topicsBackend(t)
				be.slave.Store(tc.slave)
				ts := startServer(t, be, func(o *Options) {
					o.Epoll = on
					o.ReadTimeout = tc.timeout
				})
				if on && ts.ep == nil {
					t.Fatal("the epoll loop did not start")
				}
				c := ts.dial(t)
				for _, s := range tc.steps(t) {
					send(t, c, s.send)
					if len(s.want) > 0 {
						expect(t, c, s.want)
					}
				}
				if tc.closeWrite {
					c.(*net.TCPConn).CloseWrite()
				}
				if tc.closed {
					expectClosed(t, c)
				}
				if tc.logs != "" {
					smsstest.WaitFor(t, testDeadline, "the log line "+tc.logs, func() bool { return strings.Contains(ts.logs.String(), tc.logs) })
				}
				if !on {
					return
				}
				served, handed := ts.loopCounts()
				if served < tc.served {
					t.Errorf("the loop served %d publishes, want at least %d", served, tc.served)
				}
				if tc.handed && handed == 0 {
					t.Error("the loop never handed the connection back")
				}
				if !tc.handed && !tc.closed && handed != 0 {
					t.Errorf("the loop handed the connection back %d times, want none", handed)
				}
			})
		}
	}
}

// Many connections pipelining publishes into a real broker: every one is
// answered OK, stored once, and the loop submits them in batches (fewer
// calls than publishes).
func TestEpollBatchesIntoRealBroker(t *testing.T) {
	var bb *batchBackend
	ts, b := startRealServerWith(t, nil, func(o *Options, b *broker.Broker) {
		bb = &batchBackend{fzBackend: fzBackend{b}}
		o.Backend, o.Epoll = bb, true
	})
	if _, err := b.CreateTopic(context.Background(), []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	first := b.LastEventID()
	const conns, each = 16, 20
	pipelinePubs(t, ts, conns, each, func(_, j int) []byte { return record(fmt.Sprint("m", j)) })
	if got := b.LastEventID() - first; got != conns*each {
		t.Errorf("%d messages stored, want %d", got, conns*each)
	}
	served, _ := ts.loopCounts()
	if served != conns*each || bb.pubs.Load() != conns*each {
		t.Errorf("the loop served %d publishes, the batches held %d, want %d", served, bb.pubs.Load(), conns*each)
	}
	if n := bb.batches.Load(); n >= conns*each {
		t.Errorf("%d batches for %d publishes: the loop did not batch", n, conns*each)
	}
}

// A peer that resets, idle in the loop or before reading its reply, is
// closed and its slot freed; the others go on.
func TestEpollPeerReset(t *testing.T) {
	ts := startServer(t, topicsBackend(t), func(o *Options) { o.Epoll = true; o.MaxConnsPerIP = 2 })
	keep := ts.dial(t)
	send(t, keep, pubReq("t", record("a")))
	expect(t, keep, okReply())
	for _, beforeReply := range []bool{false, true} {
		c := ts.dial(t)
		smsstest.WaitFor(t, testDeadline, "the connection to be accepted", func() bool { return ts.connCount() == 2 })
		if !beforeReply {
			send(t, c, pubReq("t", record("b")))
			expect(t, c, okReply())
			smsstest.WaitFor(t, testDeadline, "the loop to own the connection", func() bool { return ts.ep.ownCount() == 2 })
		}
		if beforeReply {
			send(t, c, pubReq("t", record("c")))
		}
		c.(*net.TCPConn).SetLinger(0) // close sends a RST
		c.Close()
		smsstest.WaitFor(t, testDeadline, "the reset connection to be closed", func() bool { return ts.connCount() == 1 })
		if !beforeReply && !strings.Contains(ts.logs.String(), "connection read failed") {
			t.Error("the reset was not logged as a failed read")
		}
		// The slot is free again (limit.maxConnsPerIP 2).
		send(t, keep, pubReq("t", record("d")))
		expect(t, keep, okReply())
	}
	c := ts.dial(t)
	send(t, c, pubReq("t", record("e")))
	expect(t, c, okReply())
}

// A connection idle in the loop is closed after IdleTimeout, as by its
// goroutine.
func TestEpollIdleTimeout(t *testing.T) {
	ts := startServer(t, topicsBackend(t), func(o *Options) { o.Epoll = true; o.IdleTimeout = 200 * time.Millisecond })
	c := ts.dial(t)
	send(t, c, pubReq("t", record("a")))
	expect(t, c, okReply())
	start := time.Now()
	expectClosed(t, c)
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout", d)
	}
	smsstest.WaitFor(t, testDeadline, "the connection to be removed", func() bool { return ts.connCount() == 0 })
	if !strings.Contains(ts.logs.String(), "closing idle connection") {
		t.Error("no idle close logged")
	}
}

// Shutdown while publishes are in the loop: the one being written and
// those read or sent before Shutdown get their replies, then every
// connection is closed and Shutdown returns.
func TestEpollShutdownDrains(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("epoll=%v", on), func(t *testing.T) {
			be := topicsBackend(t)
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			be.onPublish = func(topic string) error {
				if topic == "slow" {
					once.Do(func() { close(entered) })
					<-release
				}
				return nil
			}
			ts := startServer(t, be, func(o *Options) { o.Epoll = on })
			others := []net.Conn{ts.dial(t), ts.dial(t)}
			for _, c := range others {
				send(t, c, pubReq("t", record("warm")))
				expect(t, c, okReply())
			}
			late := ts.dial(t) // idle (in the loop) when Shutdown begins
			send(t, late, pubReq("t", record("warm")))
			expect(t, late, okReply())
			slow := ts.dial(t)
			send(t, slow, pubReq("slow", record("a")))
			<-entered
			for _, c := range others {
				send(t, c, bytes.Join([][]byte{pubReq("t", record("b")), pubReq("t", record("c"))}, nil))
			}
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
				defer cancel()
				done <- ts.Shutdown(ctx)
			}()
			smsstest.WaitFor(t, testDeadline, "Shutdown to begin", ts.isShutting)
			close(release)
			expect(t, slow, okReply())
			for _, c := range others {
				expect(t, c, bytes.Repeat(okReply(), 2))
			}
			if on {
				smsstest.WaitFor(t, testDeadline, "the loop to hand its connections back", func() bool { return ts.ep.ownCount() == 0 })
			}
			// Within DrainGrace of Shutdown: a request on an idle
			// connection is still served (by the goroutine the loop
			// handed it back to).
			send(t, late, pubReq("t", record("late")))
			expect(t, late, okReply())
			for _, c := range append(others, slow, late) {
				expectClosed(t, c)
			}
			if err := <-done; err != nil {
				t.Fatalf("shutdown: %v", err)
			}
		})
	}
}

// ownCount is how many connections the loop holds.
func (e *epollLoop) ownCount() int { return int(e.owned.Load()) }

// TestSuiteWithEpoll runs this package's request/reply, lifecycle,
// metrics and subscription tests again in a child process of this test
// binary with every test server's Options.Epoll on.
func TestSuiteWithEpoll(t *testing.T) {
	if epollMode {
		t.Skip("already the run with epoll")
	}
	families := []struct{ name, run string }{
		{"commands", "^(TestMasterCommands|TestSlaveCommands|TestInfoReplyMatchesAppendixA|TestBackendErrors|TestLongErrorTextTruncated|TestPipelinedRequests|TestRequestSplitAcrossSmallWrites|TestLargePayloadAtCap|TestOversizeBodyRefusalIsReadable|TestRefusalClosesOnlyItsConnection|TestStatusCommand|TestPromoteAndFollowCommands)$"},
		{"lifecycle", "^(TestIdleConnectionClosed|TestTimeoutMidRequestCloses|TestPanicInBackendIsContained|TestShutdownLetsInFlightRequestFinish|TestShutdownGivesUpAtDeadline|TestMaxConns|TestMaxConnsPerIPRefusedAtAccept|TestLogSampling)$"},
		{"metrics", "^TestMetrics"},
		{"real broker", "^(TestRefusalsFromARealBroker|TestMessageIDOverTCP|TestLastEventID)$"},
		{"subscriptions", "^(TestSubBatchesAcksAndLiveTail|TestSubEndsInCommandLoop|TestSubRefusals|TestSubVanishedClientFreesSlot|TestShutdownEndsStreams)$"},
	}
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", f.run, "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "SMSS_SERVER_EPOLL=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("with epoll: %v\n%s", err, out)
			}
			if !bytes.Contains(out, []byte("--- PASS")) {
				t.Fatalf("with epoll: no test ran\n%s", out)
			}
		})
	}
}

// A client that pipelines publishes without reading its replies fills the
// socket: the loop hands the connection back with the replies it could not
// write, and the goroutine writes them (with the write timeout) before
// serving the rest; every reply arrives, in order.
func TestEpollFullSocketHandsBackReplies(t *testing.T) {
	testSendBuffer = 4096
	t.Cleanup(func() { testSendBuffer = 0 })
	ts := startServer(t, topicsBackend(t), func(o *Options) { o.Epoll = true })
	// Requests of exactly 64 bytes: the loop's 16 KiB reads then always
	// end between two requests, so only the full socket hands back.
	var req []byte
	for n := 1; len(req) != 64; n++ {
		if req = pubReq("t", record(strings.Repeat("x", n))); len(req) > 64 {
			t.Fatalf("no 64-byte pub request (%d bytes at body %d)", len(req), n)
		}
	}
	c := ts.dial(t)
	c.(*net.TCPConn).SetReadBuffer(4096)
	const n = 20000
	wrote := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if _, err := c.Write(req); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	smsstest.WaitFor(t, testDeadline, "a reply the socket did not take", func() bool { return ts.ep.stalls.Load() > 0 })
	expect(t, c, bytes.Repeat(okReply(), n))
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

// slowBatches is a batch backend whose every batch takes at least syncTime,
// as a flushLevel 2 batch waits for its fsync, and which records the batch
// sizes.
type slowBatches struct {
	batchBackend
	syncTime time.Duration
	mu       sync.Mutex
	sizes    []int
}

func (b *slowBatches) PublishBatch(ctx context.Context, ps []Pub) {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(ps))
	b.mu.Unlock()
	time.Sleep(b.syncTime)
	b.batchBackend.PublishBatch(ctx, ps)
}

// With flushLevel 2's group wait, publishers that each wait for their
// reply and come back a network round trip later share one batch (one
// fsync) per round: the loop waits for the connections it just answered.
// Without it, the ones that come back first start the next batch alone,
// and the publishers settle into two halves that alternate, a batch each.
// A lone publisher is what the loop expects and never waits.
func TestEpollGroupWait(t *testing.T) {
	const syncTime, roundTrip, rounds = 30 * time.Millisecond, 300 * time.Microsecond, 12
	run := func(t *testing.T, publishers int) (batches int, gathers int64) {
		var sb *slowBatches
		ts, b := startRealServerWith(t, nil, func(o *Options, b *broker.Broker) {
			sb = &slowBatches{batchBackend: batchBackend{fzBackend: fzBackend{b}}, syncTime: syncTime}
			o.Backend, o.Epoll, o.EpollGroupWait = sb, true, time.Second
		})
		if _, err := b.CreateTopic(context.Background(), []byte("t"), 0); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, publishers)
		for p := range publishers {
			c := ts.dial(t)
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Staggered starts: without the wait, these would never line up.
				time.Sleep(time.Duration(p) * syncTime / 3)
				reply := make([]byte, len(okReply()))
				for i := range rounds {
					if _, err := c.Write(pubReq("t", record(fmt.Sprint("m", i)))); err != nil {
						errs <- err
						return
					}
					if _, err := io.ReadFull(c, reply); err != nil || !bytes.Equal(reply, okReply()) {
						errs <- fmt.Errorf("reply %q, %v", reply, err)
						return
					}
					time.Sleep(roundTrip) // the reply's and the next request's trip
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		sb.mu.Lock()
		defer sb.mu.Unlock()
		t.Logf("%d publishers, %d rounds: batches of %v, %d group waits", publishers, rounds, sb.sizes, ts.ep.gathers.Load())
		return len(sb.sizes), ts.ep.gathers.Load()
	}
	t.Run("publishers", func(t *testing.T) {
		// The staggered start costs a few extra batches (more on a busy
		// machine, where a publisher may miss a wait), then one per round;
		// alternating halves need two per round (24).
		// The property is about timing, so a machine busy with other
		// tests can break one run's lockstep (a publisher's goroutine not
		// scheduled within the wait). The best of three runs is judged:
		// without the wait every run alternates, so this still fails.
		most := rounds + rounds/2
		var batches int
		var gathers int64
		for attempt := 1; attempt <= 3; attempt++ {
			batches, gathers = run(t, 4)
			if gathers > 0 && batches <= most {
				return
			}
			t.Logf("run %d: %d batches, %d group waits; want at most %d batches", attempt, batches, gathers, most)
		}
		if gathers == 0 {
			t.Fatal("the loop never waited for the publishers it answered")
		}
		t.Fatalf("%d batches for %d rounds of 4 publishers in each of 3 runs (the last shown); want at most %d", batches, rounds, most)
	})
	t.Run("lone", func(t *testing.T) {
		if _, gathers := run(t, 1); gathers != 0 {
			t.Fatalf("a lone publisher made the loop wait %d times", gathers)
		}
	})
}

// Below server.epollMinConns publishing connections a connection keeps its
// goroutine (connections that never published, such as subscribers, do
// not count); once that many have published, the next time it waits for a
// request the loop takes it over.
func TestEpollMinConns(t *testing.T) {
	ts := startServer(t, topicsBackend(t), func(o *Options) { o.Epoll, o.EpollMinConns = true, 3 })
	pub := func(c net.Conn, body string) {
		t.Helper()
		send(t, c, pubReq("t", record(body)))
		expect(t, c, okReply())
	}
	c := ts.dial(t)
	pub(c, "alone")
	pub(c, "still alone")
	d1, d2 := ts.dial(t), ts.dial(t)
	smsstest.WaitFor(t, testDeadline, "3 connections open", func() bool { return ts.connCount() == 3 })
	pub(c, "3 open, 1 publishing")
	if served, owned := ts.ep.served.Load(), ts.ep.ownCount(); served != 0 || owned != 0 {
		t.Fatalf("with 1 of 3 publishing connections the loop served %d publishes and holds %d connections", served, owned)
	}
	pub(d1, "second publisher")
	pub(d2, "third publisher")
	// Served by c's goroutine, which then hands c over (or already by the
	// loop, if the goroutine looked again after the others published).
	pub(c, "3 publishing")
	before := ts.ep.served.Load()
	pub(c, "in the loop")
	pub(c, "in the loop again")
	if served := ts.ep.served.Load() - before; served != 2 {
		t.Fatalf("with 3 of 3 publishing connections the loop served %d of 2 publishes", served)
	}
}

// A turn stops reading once its publishes hold EpollTurnBytes; the sockets
// still ready are read in the next turns, so nothing is lost or reordered
// however small the budget (here: one socket per turn).
func TestEpollTurnBudget(t *testing.T) {
	ts := startServer(t, topicsBackend(t), func(o *Options) { o.Epoll, o.EpollMinConns, o.EpollTurnBytes = true, 0, 1 })
	const conns, each = 8, 30
	pipelinePubs(t, ts, conns, each, func(i, j int) []byte { return bigRecord(200 + i*each + j) })
	if served, _ := ts.loopCounts(); served != conns*each {
		t.Fatalf("the loop served %d publishes, want %d", served, conns*each)
	}
	// One socket's read per turn: at most one connection's ~14 KB.
	if peak := ts.ep.turnPeak.Load(); peak > 16<<10 {
		t.Fatalf("a turn held %d bytes of publishes with a budget of 1 byte", peak)
	}
}

// pipelinePubs has conns connections each write each publishes to topic t
// at once (rec(i, j) is connection i's j-th record) and read their
// replies, which must all be OK.
func pipelinePubs(t *testing.T, ts *testServer, conns, each int, rec func(i, j int) []byte) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		c := ts.dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var reqs [][]byte
			for j := range each {
				reqs = append(reqs, pubReq("t", rec(i, j)))
			}
			if _, err := c.Write(bytes.Join(reqs, nil)); err != nil {
				errs <- err
				return
			}
			want := bytes.Repeat(okReply(), each)
			got := make([]byte, len(want))
			if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
				errs <- fmt.Errorf("replies %q, %v", got, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
