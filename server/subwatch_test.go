package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// spyBackend counts what its subscriptions' Next calls do, so that a test
// can wait until a stream is at a given point (subwatch.go's phases).
type spyBackend struct {
	*fakeBackend
	panicOnAck atomic.Bool  // subscriptions track acks, and panic when told of one
	waits      atomic.Int64 // Next calls entered that may block (the stream waits for data)
	got        atomic.Int64 // messages Next returned
	errs       atomic.Int64 // errors Next returned
}

func (b *spyBackend) Subscribe(topic, who []byte, after int64) (Subscription, error) {
	s, err := b.fakeBackend.Subscribe(topic, who, after)
	if err != nil {
		return nil, err
	}
	if b.panicOnAck.Load() {
		return &panickySub{spySub{Subscription: s, b: b}}, nil
	}
	return &spySub{Subscription: s, b: b}, nil
}

// panickySub stands for a backend bug reached while an ack is recorded.
type panickySub struct{ spySub }

func (s *panickySub) Acked(int64) { panic("acked: simulated backend bug") }

type spySub struct {
	Subscription
	b *spyBackend
}

func (s *spySub) Next(ctx context.Context, dst []byte, max int, wait time.Duration) ([]byte, int, error) {
	if wait > 0 {
		s.b.waits.Add(1)
	}
	dst, n, err := s.Subscription.Next(ctx, dst, max, wait)
	s.b.got.Add(int64(n))
	if err != nil {
		s.b.errs.Add(1)
	}
	return dst, n, err
}

// startSpy starts a server on a spied fake backend with topic "s" created.
func startSpy(t *testing.T, tweak func(*Options)) (*spyBackend, *testServer, net.Conn) {
	t.Helper()
	spy := &spyBackend{fakeBackend: newFakeBackend()}
	ts := startServer(t, spy.fakeBackend, func(o *Options) {
		o.Backend = spy
		o.AliveInterval = time.Hour
		if tweak != nil {
			tweak(o)
		}
	})
	pub := ts.dial(t)
	send(t, pub, createReq("s", 0)) // eventId 1
	expect(t, pub, okReply())
	return spy, ts, pub
}

// subscribeIdle subscribes who on "s" (empty so far) and waits until the
// stream is idle with its watcher reading the socket.
func subscribeIdle(t *testing.T, spy *spyBackend, c net.Conn, ackTimeout time.Duration) {
	t.Helper()
	waits := spy.waits.Load()
	send(t, c, subReq("s", "w", 0, 1, ackTimeout))
	smsstest.WaitFor(t, testDeadline, "stream idle with its watcher", func() bool { return spy.waits.Load() > waits })
}

// handOver delivers the next two ids so that the second is written by the
// watcher: it is read while the first frame awaits its ack, which makes
// the stream goroutine hand the stream over. The second frame is left
// unacknowledged.
func handOver(t *testing.T, spy *spyBackend, c, pub net.Conn, first int64) {
	t.Helper()
	pubIDs(t, pub, "s", first)
	expectData(t, c, first)
	got := spy.got.Load()
	pubIDs(t, pub, "s", first+1)
	smsstest.WaitFor(t, testDeadline, "next message read while a frame awaits its ack", func() bool { return spy.got.Load() > got })
	send(t, c, ack(0))
	expectData(t, c, first+1)
}

// expectNothing checks that no byte arrives for a moment.
func expectNothing(t *testing.T, c net.Conn, what string) {
	t.Helper()
	var b [1]byte
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(b[:]); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: got %d bytes, err %v", what, n, err)
	}
	c.SetReadDeadline(time.Now().Add(testDeadline))
}

// After ack 1 the watcher reads nothing more: a request sent in the same
// write, and one sent in pieces after it, are both answered.
func TestSubWatcherAckEndKeepsPipelinedRequest(t *testing.T) {
	for _, handed := range []bool{false, true} {
		name := "frame written by the stream goroutine"
		if handed {
			name = "frame written by the watcher"
		}
		t.Run(name, func(t *testing.T) {
			spy, ts, pub := startSpy(t, nil)
			c := ts.dial(t)
			subscribeIdle(t, spy, c, time.Second)
			if handed {
				handOver(t, spy, c, pub, 2)
			} else {
				pubIDs(t, pub, "s", 2)
				expectData(t, c, 2)
			}
			send(t, c, append(ack(1), aliveReq()...))
			expect(t, c, aliveReply())
			if ts.backend.active("s", "w") {
				t.Fatal("who slot still held after ack 1")
			}
			req := createReq("s2", 0)
			send(t, c, req[:3])
			send(t, c, req[3:])
			expect(t, c, okReply())
			expectNothing(t, c, "after the last reply")
		})
	}
}

// A client that goes away, or sends bytes while no frame awaits an ack,
// ends the subscription at once, whatever the watcher did before.
func TestSubWatcherNoticesClient(t *testing.T) {
	for _, stage := range []string{"before any frame", "after a frame", "after a handed-over frame"} {
		for _, action := range []string{"EOF", "stray byte"} {
			t.Run(stage+"/"+action, func(t *testing.T) {
				spy, ts, pub := startSpy(t, nil)
				c := ts.dial(t)
				subscribeIdle(t, spy, c, time.Second)
				switch stage {
				case "after a frame":
					pubIDs(t, pub, "s", 2)
					expectData(t, c, 2)
					send(t, c, ack(0))
				case "after a handed-over frame":
					handOver(t, spy, c, pub, 2)
					send(t, c, ack(0))
				}
				// The ack is read before the byte that follows it: it was
				// sent first, and only then is anything out of turn.
				start := time.Now()
				if action == "EOF" {
					c.Close()
				} else {
					send(t, c, []byte{0})
					expectClosed(t, c)
				}
				smsstest.WaitFor(t, testDeadline, "who slot freed", func() bool { return !ts.backend.active("s", "w") })
				// No ack is pending and alives are an hour apart: only the
				// watcher can have noticed. 5 s is prompt for a loaded
				// machine running the race detector.
				if d := time.Since(start); d > 5*time.Second {
					t.Fatalf("slot freed %v after the client's move", d)
				}
				logs := ts.logs.String()
				want := "client closed the connection"
				if action != "EOF" {
					want = "protocol violation"
				}
				if !strings.Contains(logs, want) {
					t.Fatalf("log does not say %q:\n%s", want, logs)
				}
			})
		}
	}
}

// The ack timeout holds once the watcher reads the acks, whichever
// goroutine wrote the frame.
func TestSubWatcherAckTimeout(t *testing.T) {
	const ackTimeout = 200 * time.Millisecond
	for _, handed := range []bool{false, true} {
		t.Run(fmt.Sprint("handed ", handed), func(t *testing.T) {
			spy, ts, pub := startSpy(t, nil)
			c := ts.dial(t)
			subscribeIdle(t, spy, c, ackTimeout)
			// The last frame is written, and its ack timer started, after
			// this point (after the publish, or after handOver's ack of the
			// first frame): the lower bound holds exactly however late this
			// goroutine reads the frame.
			start := time.Now()
			if handed {
				handOver(t, spy, c, pub, 2)
			} else {
				pubIDs(t, pub, "s", 2)
				expectData(t, c, 2)
			}
			expectClosed(t, c)
			if d := time.Since(start); d < ackTimeout || d > ackTimeout+5*time.Second {
				t.Fatalf("closed %v after the publish, ack timeout %v", d, ackTimeout)
			}
			smsstest.WaitFor(t, testDeadline, "who slot freed", func() bool { return !ts.backend.active("s", "w") })
			if !strings.Contains(ts.logs.String(), "ack timeout after 200ms") {
				t.Fatal("ack timeout not logged")
			}
		})
	}
}

// The read deadline is armed lazily; a subscriber that acks every frame in
// time, over several ack timeouts and with idle spells longer than one,
// must never be cut off. The sleeps are the slow subscriber being
// simulated, not waits for a condition.
//
// Each ack is sent a fifth of the timeout after its frame is read, so a
// loaded machine has 4/5 of the timeout (800 ms) to get the frame to the
// test and the ack back before the server may rightly give up; six such
// frames (1.2 timeouts) still outlast a deadline armed once and never
// moved, however slowly they go.
func TestSubWatcherAckTimeoutIsPerFrame(t *testing.T) {
	const (
		ackTimeout = time.Second
		ackDelay   = ackTimeout / 5
		frames     = 6
	)
	spy, ts, pub := startSpy(t, nil)
	c := ts.dial(t)
	subscribeIdle(t, spy, c, ackTimeout)
	id := int64(2)
	for round := 0; round < 2; round++ {
		for i := 0; i < frames; i++ {
			pubIDs(t, pub, "s", id)
			expectData(t, c, id)
			time.Sleep(ackDelay)
			send(t, c, ack(0))
			id++
		}
		// Idle: the deadline, due at most a timeout after the last frame
		// (ackDelay before its ack), fires with no ack pending.
		time.Sleep(ackTimeout + ackTimeout/2)
	}
	handOver(t, spy, c, pub, id)
	time.Sleep(ackDelay)
	send(t, c, append(ack(1), aliveReq()...))
	expect(t, c, aliveReply())
}

// A 255 or a 400 that comes while a frame awaits its ack is sent only after
// that ack, so the client reads it in turn and the command loop then reads
// requests in step; after ack 1 it is not sent at all.
func TestSubEndWhileAckPending(t *testing.T) {
	deleteTopic := func(t *testing.T, ts *testServer) {
		d := ts.dial(t)
		send(t, d, enc(protocol.AppendDelete(nil, []byte("s"), nil)))
		expect(t, d, okReply())
	}
	failNext := func(t *testing.T, ts *testServer) {
		b := ts.backend
		b.mu.Lock()
		b.nextErr = protocol.NewBizError("subscription position is gone: 3.log removed")
		close(b.changed)
		b.changed = make(chan struct{})
		b.mu.Unlock()
	}
	for _, tc := range []struct {
		name  string
		end   func(*testing.T, *testServer)
		ack   uint16
		reply []byte // nil: none
	}{
		{"topic deleted", deleteTopic, 0, protocol.AppendReplySubEnd(nil)},
		{"backend error", failNext, 0, errReply("subscription position is gone: 3.log removed")},
		{"topic deleted, ack 1", deleteTopic, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spy, ts, pub := startSpy(t, nil)
			c := ts.dial(t)
			subscribeIdle(t, spy, c, 5*time.Second)
			pubIDs(t, pub, "s", 2)
			expectData(t, c, 2)
			errs := spy.errs.Load()
			tc.end(t, ts)
			smsstest.WaitFor(t, testDeadline, "Next to report the end", func() bool { return spy.errs.Load() > errs })
			expectNothing(t, c, "before the ack")
			send(t, c, append(ack(tc.ack), aliveReq()...))
			if tc.reply != nil {
				expect(t, c, tc.reply)
			}
			expect(t, c, aliveReply())
			if ts.backend.active("s", "w") {
				t.Fatal("who slot still held")
			}
		})
	}
}

// Messages published in bursts, acked at random moments (some after more
// were published), move the stream between idle and busy and between the
// two goroutines many times; every message arrives once and in order.
func TestSubWatcherStress(t *testing.T) {
	const total = 400
	spy, ts, pub := startSpy(t, nil)
	rng := rand.New(rand.NewPCG(7, 11))
	for _, batch := range []uint8{1, 3} {
		c := ts.dial(t)
		published := ts.backend.lastID() // ids so far (create included)
		delivered := published
		waits := spy.waits.Load()
		send(t, c, subReq("s", "w", delivered, batch, 5*time.Second))
		awaiting := false
		for delivered < published+total {
			switch {
			case awaiting && rng.IntN(3) == 0:
				pubIDs(t, pub, "s", nextIDs(ts, rng.IntN(4)+1)...)
			case awaiting:
				send(t, c, ack(0))
				awaiting = false
			case delivered < ts.backend.lastID():
				f, msgs := readFrame(t, c)
				if f.Code != protocol.StatusOK {
					t.Fatalf("got unit %d, want data", f.Code)
				}
				for _, m := range msgs {
					if delivered++; m.EventID != delivered {
						t.Fatalf("got id %d, want %d", m.EventID, delivered)
					}
				}
				awaiting = true
			default:
				if rng.IntN(2) == 0 {
					// Publish only once the stream waits for data.
					smsstest.WaitFor(t, testDeadline, "stream idle", func() bool { return spy.waits.Load() > waits })
				}
				waits = spy.waits.Load()
				pubIDs(t, pub, "s", nextIDs(ts, rng.IntN(6)+1)...)
			}
		}
		if !awaiting {
			if delivered == ts.backend.lastID() {
				pubIDs(t, pub, "s", nextIDs(ts, 1)...)
			}
			if _, msgs := readFrame(t, c); len(msgs) == 0 || msgs[0].EventID != delivered+1 {
				t.Fatalf("last frame: %d messages, want some from id %d on", len(msgs), delivered+1)
			}
		}
		send(t, c, append(ack(1), aliveReq()...))
		expect(t, c, aliveReply())
		c.Close()
		smsstest.WaitFor(t, testDeadline, "who slot freed", func() bool { return !ts.backend.active("s", "w") })
	}
}

// nextIDs returns the ids the next n publishes will get.
func nextIDs(ts *testServer, n int) []int64 {
	next := ts.backend.lastID() + 1
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = next + int64(i)
	}
	return ids
}

func (b *fakeBackend) lastID() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nextID - 1
}

// A client that sends an "ack" before it has read the frame (here while
// the server is still blocked writing a large one) must not make the
// watcher and the stream goroutine work on the stream at once (the race
// detector watches); the stream then ends with the connection closed.
func TestSubEarlyAckWhileFrameIsWritten(t *testing.T) {
	spy, ts, pub := startSpy(t, func(o *Options) { o.Limits.MaxPayload = 16 << 20 })
	c := ts.dial(t)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(16 << 10) // keep the server's write blocked
	}
	subscribeIdle(t, spy, c, 5*time.Second)
	got := spy.got.Load()
	send(t, pub, pubReq("s", record(strings.Repeat("x", 12<<20))))
	expect(t, pub, okReply())
	smsstest.WaitFor(t, testDeadline, "large message read", func() bool { return spy.got.Load() > got })
	send(t, c, ack(0))
	// Whether the early bytes were taken as the ack or refused, a second
	// ack is out of turn: the connection ends.
	if f, err := protocol.ReadSubFrame(c, 32<<20); err == nil && f.Code == protocol.StatusOK {
		c.Write(ack(0))
	}
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, net.ErrClosed) &&
		!strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading to the end: %v", err)
	}
	smsstest.WaitFor(t, testDeadline, "who slot freed", func() bool { return !ts.backend.active("s", "w") })
}

// A frame write that fails while the watcher reads the socket closes the
// connection and stops the watcher.
func TestSubWatcherWriteFailureCloses(t *testing.T) {
	spy, ts, pub := startSpy(t, func(o *Options) {
		o.Limits.MaxPayload = 16 << 20
		o.WriteTimeout = 200 * time.Millisecond
	})
	c := ts.dial(t)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(16 << 10)
	}
	subscribeIdle(t, spy, c, 5*time.Second)
	send(t, pub, pubReq("s", record(strings.Repeat("x", 12<<20))))
	expect(t, pub, okReply())
	// Not reading: the write times out.
	smsstest.WaitFor(t, testDeadline, "who slot freed", func() bool { return !ts.backend.active("s", "w") })
	if !strings.Contains(ts.logs.String(), "frame write failed") {
		t.Fatal("write failure not logged")
	}
}

// A panic on the watcher (here in the backend while an ack is recorded)
// closes that connection only, and frees its slot.
func TestSubWatcherPanicClosesConnection(t *testing.T) {
	spy, ts, pub := startSpy(t, nil)
	spy.panicOnAck.Store(true)
	c := ts.dial(t)
	subscribeIdle(t, spy, c, time.Second)
	pubIDs(t, pub, "s", 2)
	expectData(t, c, 2)
	send(t, c, ack(0))
	expectClosed(t, c)
	smsstest.WaitFor(t, testDeadline, "who slot freed", func() bool { return !ts.backend.active("s", "w") })
	if !strings.Contains(ts.logs.String(), "panic in a subscription's watcher") {
		t.Fatal("panic not logged")
	}
	send(t, pub, aliveReq())
	expect(t, pub, aliveReply())
}
