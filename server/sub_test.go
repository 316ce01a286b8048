package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

func subReq(topic, who string, after int64, batch uint8, ackTimeout time.Duration) []byte {
	return enc(protocol.AppendSub(nil, []byte(topic), []byte("st"), after, batch, ackTimeout, []byte(who)))
}

func ack(code uint16) []byte { return binary.LittleEndian.AppendUint16(nil, code) }

// readFrame reads one stream unit; data frames are parsed.
func readFrame(t *testing.T, c net.Conn) (protocol.Frame, []protocol.SubMessage) {
	t.Helper()
	f, err := protocol.ReadSubFrame(c, 1<<20)
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	if f.Code != protocol.StatusOK {
		return f, nil
	}
	msgs, err := protocol.ParseSubMessages(f.Body, f.Count)
	if err != nil {
		t.Fatalf("parse frame: %v", err)
	}
	return f, msgs
}

// expectData reads a data frame and checks its eventIds and bodies.
func expectData(t *testing.T, c net.Conn, ids ...int64) {
	t.Helper()
	f, msgs := readFrame(t, c)
	if f.Code != protocol.StatusOK {
		t.Fatalf("got unit %d, want a data frame with ids %v", f.Code, ids)
	}
	if len(msgs) != len(ids) {
		t.Fatalf("frame has %d messages, want %d", len(msgs), len(ids))
	}
	for i, m := range msgs {
		if m.EventID != ids[i] || string(m.Body) != fmt.Sprint("m", ids[i]) || m.Ts != fakeNow {
			t.Fatalf("message %d: id %d body %q ts %d, want id %d", i, m.EventID, m.Body, m.Ts, ids[i])
		}
	}
}

func expectUnit(t *testing.T, c net.Conn, code uint16) {
	t.Helper()
	if f, _ := readFrame(t, c); f.Code != code {
		t.Fatalf("got unit %d, want %d", f.Code, code)
	}
}

// pubIDs publishes one record per id; the fake backend numbers them on from
// its counter, so callers pass the ids they expect.
func pubIDs(t *testing.T, c net.Conn, topic string, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		send(t, c, pubReq(topic, record(fmt.Sprint("m", id))))
		expect(t, c, okReply())
	}
}

func TestSubBatchesAcksAndLiveTail(t *testing.T) {
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.AliveInterval = time.Hour })
	pub := ts.dial(t)
	send(t, pub, createReq("s", 0)) // eventId 1
	expect(t, pub, okReply())
	pubIDs(t, pub, "s", 2, 3, 4, 5, 6)

	c := ts.dial(t)
	send(t, c, subReq("s", "w", 0, 2, time.Second))
	expectData(t, c, 2, 3)
	send(t, c, ack(0))
	expectData(t, c, 4, 5)
	send(t, c, ack(0))
	expectData(t, c, 6)
	send(t, c, ack(0))
	// Caught up: a publish wakes the subscriber.
	pubIDs(t, pub, "s", 7)
	expectData(t, c, 7)
	send(t, c, ack(0))
	send(t, pub, pubReq("s", record("m8"), record("m9"), record("m10")))
	expect(t, pub, okReply())
	expectData(t, c, 8, 9)
	// Ack 1 with the next request in the same write: nothing may be lost.
	send(t, c, append(ack(1), aliveReq()...))
	expect(t, c, aliveReply())
	if ts.backend.active("s", "w") {
		t.Fatal("who slot still held after ack 1")
	}
	// Resume from the last consumed id on the same connection, batch 0 = 1.
	send(t, c, subReq("s", "w", 9, 0, time.Second))
	expectData(t, c, 10)
	send(t, c, ack(1))
	send(t, c, aliveReq())
	expect(t, c, aliveReply())
}

func TestSubAckInPieces(t *testing.T) {
	ts := startServer(t, newFakeBackend(), nil)
	c := ts.dial(t)
	send(t, c, createReq("s", 0))
	expect(t, c, okReply())
	pubIDs(t, c, "s", 2, 3)
	send(t, c, subReq("s", "w", 0, 1, time.Second))
	expectData(t, c, 2)
	send(t, c, ack(0)[:1])
	send(t, c, ack(0)[1:])
	expectData(t, c, 3)
	send(t, c, ack(1)[:1])
	send(t, c, ack(1)[1:])
	send(t, c, aliveReq())
	expect(t, c, aliveReply())
}

func TestSubAliveWhileIdle(t *testing.T) {
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.AliveInterval = 50 * time.Millisecond })
	pub := ts.dial(t)
	send(t, pub, createReq("s", 0))
	expect(t, pub, okReply())
	c := ts.dial(t)
	send(t, c, subReq("s", "w", 0, 10, time.Second))
	start := time.Now()
	expectUnit(t, c, protocol.StatusAlive)
	expectUnit(t, c, protocol.StatusAlive)
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Fatalf("two alives within %v, interval is 50ms", d)
	}
	// Alives are not acknowledged; data after them still flows.
	pubIDs(t, pub, "s", 2)
	for {
		f, msgs := readFrame(t, c)
		if f.Code == protocol.StatusAlive {
			continue
		}
		if f.Code != protocol.StatusOK || len(msgs) != 1 || msgs[0].EventID != 2 {
			t.Fatalf("got unit %d with %d messages", f.Code, len(msgs))
		}
		break
	}
}

func TestSubAckFailuresCloseTheConnection(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ackTimeout time.Duration // in the request
		tweak      func(*Options)
		reply      []byte // nil: send nothing
		minWait    time.Duration
	}{
		{"invalid ack 2", time.Second, nil, ack(2), 0},
		{"invalid ack 256", time.Second, nil, ack(256), 0},
		{"ack timeout from request", 200 * time.Millisecond, nil, nil, 200 * time.Millisecond},
		{"default ack timeout", 0, func(o *Options) { o.DefaultAckTimeout = 200 * time.Millisecond }, nil, 200 * time.Millisecond},
		{"negative ack timeout takes default", -5, func(o *Options) { o.DefaultAckTimeout = 200 * time.Millisecond }, nil, 200 * time.Millisecond},
		{"ack timeout capped", time.Hour, func(o *Options) { o.MaxAckTimeout = 300 * time.Millisecond }, nil, 300 * time.Millisecond},
		{"half an ack then silence", 200 * time.Millisecond, nil, ack(0)[:1], 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, newFakeBackend(), tc.tweak)
			c := ts.dial(t)
			send(t, c, createReq("s", 0))
			expect(t, c, okReply())
			pubIDs(t, c, "s", 2, 3)
			// The ack timer starts once the frame is written, which is after
			// the server read the request: timing from before the request
			// keeps the lower bound exact however late this goroutine reads
			// the frame.
			start := time.Now()
			send(t, c, subReq("s", "w", 0, 1, tc.ackTimeout))
			expectData(t, c, 2)
			if tc.reply != nil {
				send(t, c, tc.reply)
			}
			expectClosed(t, c)
			if d := time.Since(start); d < tc.minWait || d > tc.minWait+5*time.Second {
				t.Fatalf("closed after %v, want about %v", d, tc.minWait)
			}
			smsstest.WaitFor(t, testDeadline, "who slot freed", func() bool { return !ts.backend.active("s", "w") })
		})
	}
}

// The slot is freed as soon as a caught-up subscriber's connection ends:
// nothing is being sent then, so only the watcher can notice.
func TestSubVanishedClientFreesSlot(t *testing.T) {
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.AliveInterval = time.Hour })
	c := ts.dial(t)
	send(t, c, createReq("s", 0))
	expect(t, c, okReply())
	pubIDs(t, c, "s", 2)
	send(t, c, subReq("s", "w", 0, 1, time.Second))
	expectData(t, c, 2)
	send(t, c, ack(0))
	// Wait until the server is blocked waiting for data (the who slot is
	// held), then hang up.
	second := ts.dial(t)
	send(t, second, subReq("s", "w", 0, 1, time.Second))
	expect(t, second, errReply("w regiester exist"))
	c.Close()
	smsstest.WaitFor(t, testDeadline, "who slot freed", func() bool { return !ts.backend.active("s", "w") })
	send(t, second, subReq("s", "w", 2, 1, time.Second))
	pubIDs(t, ts.dial(t), "s", 3)
	expectData(t, second, 3)
}

func TestSubClientTalkingWhileWaitingIsClosed(t *testing.T) {
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.AliveInterval = time.Hour })
	c := ts.dial(t)
	send(t, c, createReq("s", 0))
	expect(t, c, okReply())
	send(t, c, subReq("s", "w", 0, 1, time.Second))
	smsstest.WaitFor(t, testDeadline, "subscriber registered", func() bool { return ts.backend.active("s", "w") })
	send(t, c, aliveReq()) // no frame awaits an ack: out of turn
	expectClosed(t, c)
	smsstest.WaitFor(t, testDeadline, "who slot freed", func() bool { return !ts.backend.active("s", "w") })
	if !strings.Contains(ts.logs.String(), "protocol violation") {
		t.Fatal("violation not logged")
	}
}

func TestSubEndsInCommandLoop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, ts *testServer)
		unit  []byte
	}{
		{"topic deleted", func(t *testing.T, ts *testServer) {
			d := ts.dial(t)
			send(t, d, enc(protocol.AppendDelete(nil, []byte("s"), nil)))
			expect(t, d, okReply())
		}, protocol.AppendReplySubEnd(nil)},
		{"backend error", func(t *testing.T, ts *testServer) {
			ts.backend.mu.Lock()
			ts.backend.nextErr = protocol.NewBizError("subscription position is gone: 3.log removed")
			close(ts.backend.changed)
			ts.backend.changed = make(chan struct{})
			ts.backend.mu.Unlock()
		}, errReply("subscription position is gone: 3.log removed")},
		{"plain error", func(t *testing.T, ts *testServer) {
			ts.backend.mu.Lock()
			ts.backend.nextErr = errors.New("read 3.log: input/output error")
			close(ts.backend.changed)
			ts.backend.changed = make(chan struct{})
			ts.backend.mu.Unlock()
		}, errReply("read 3.log: input/output error")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, newFakeBackend(), func(o *Options) { o.AliveInterval = time.Hour })
			c := ts.dial(t)
			send(t, c, createReq("s", 0))
			expect(t, c, okReply())
			pubIDs(t, c, "s", 2)
			send(t, c, subReq("s", "w", 0, 1, time.Second))
			expectData(t, c, 2)
			send(t, c, ack(0))
			tc.setup(t, ts)
			expect(t, c, tc.unit)
			send(t, c, aliveReq())
			expect(t, c, aliveReply())
			if ts.backend.active("s", "w") {
				t.Fatal("who slot still held")
			}
		})
	}
}

func TestSubRefusals(t *testing.T) {
	ts := startServer(t, newFakeBackend(), nil)
	c := ts.dial(t)
	send(t, c, createReq("s", 0))
	expect(t, c, okReply())
	first := ts.dial(t)
	send(t, first, subReq("s", "w", 0, 1, time.Second))
	smsstest.WaitFor(t, testDeadline, "subscriber registered", func() bool { return ts.backend.active("s", "w") })
	runSteps(t, ts, []step{
		{"duplicate who", subReq("s", "w", 0, 1, time.Second), errReply("w regiester exist"), false},
		{"other who", subReq("s", "w2", 99, 1, time.Second), errReply("eventId beyond the last eventId"), false},
		{"unknown topic", subReq("nope", "w", 0, 1, time.Second), errReply("topic not exist"), false},
		{"empty topic", subReq("", "w", 0, 1, time.Second), errReply("invalid topic name: must not be empty"), false},
	})
}

// Shutdown does not wait for subscribers: their connections are closed.
func TestShutdownEndsStreams(t *testing.T) {
	be := newFakeBackend()
	s, err := New(Options{Backend: be, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), AliveInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	ts := &testServer{Server: s, backend: be}
	c := ts.dial(t)
	send(t, c, createReq("s", 0))
	expect(t, c, okReply())
	pubIDs(t, c, "s", 2)
	waiting, unacked := ts.dial(t), ts.dial(t)
	send(t, waiting, subReq("s", "a", 2, 1, time.Second))
	send(t, unacked, subReq("s", "b", 0, 1, time.Minute))
	expectData(t, unacked, 2)
	smsstest.WaitFor(t, testDeadline, "subscribers registered", func() bool { return be.active("s", "a") })
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// Waiting for the unacknowledged frame would take its 1-minute ack
	// timeout (or the 10 s ctx); 5 s leaves room for a loaded machine.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Shutdown took %v", d)
	}
	expectClosed(t, waiting)
	expectClosed(t, unacked)
	if be.active("s", "a") || be.active("s", "b") {
		t.Fatal("slots held after shutdown")
	}
}

func TestLastEventID(t *testing.T) {
	var area []byte
	for i := int64(1); i <= 3; i++ {
		area = protocol.AppendSubMessage(area, 1, 10*i, 0, 0, record(strings.Repeat("b", int(i))))
	}
	for n, want := range map[int]int64{1: 10, 2: 20, 3: 30} {
		if got := lastEventID(area, n); got != want {
			t.Errorf("lastEventID(n=%d) = %d, want %d", n, got, want)
		}
	}
}

func TestSubWatcherLeavesNoReader(t *testing.T) {
	// A subscriber ended by 255 while waiting must not leave a goroutine
	// reading: the next request's bytes, split across writes, all arrive.
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.AliveInterval = time.Hour })
	c := ts.dial(t)
	send(t, c, createReq("s", 0))
	expect(t, c, okReply())
	for i := 0; i < 20; i++ {
		send(t, c, subReq("s", "w", 0, 1, time.Second))
		smsstest.WaitFor(t, testDeadline, "subscriber registered", func() bool { return ts.backend.active("s", "w") })
		d := ts.dial(t)
		send(t, d, enc(protocol.AppendDelete(nil, []byte("s"), nil)))
		expect(t, d, okReply())
		expect(t, c, protocol.AppendReplySubEnd(nil))
		req := createReq("s", 0)
		send(t, c, req[:1])
		send(t, c, req[1:])
		expect(t, c, okReply())
	}
	var b [1]byte
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := c.Read(b[:]); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("unexpected bytes after the last reply: %d %v", n, err)
	}
}
