package server

import (
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/internal/smsstest"

	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/protocol"
)

// Inline delivery (subinline.go) needs the real broker's commit hooks, so
// these tests run a server over a real broker and real files.

type inlineSetup struct {
	b    *broker.Broker
	srv  *Server
	addr string
	logs *smsstest.SyncBuffer
}

// startInline runs a server over a real broker with inline delivery set to
// inline (broker.Options.InlineDeliveries: negative is off).
func startInline(t *testing.T, inline int, tweak func(*Options)) *inlineSetup {
	t.Helper()
	logs := &smsstest.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b, err := broker.Open(broker.Options{Dir: t.TempDir(), FlushLevel: 1, Logger: logger, InlineDeliveries: inline})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Backend: fzBackend{b}, Logger: logger, AliveInterval: time.Hour}
	if tweak != nil {
		tweak(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
		b.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return &inlineSetup{b: b, srv: s, addr: s.Addr().String(), logs: logs}
}

func (is *inlineSetup) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", is.addr, testDeadline)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetDeadline(time.Now().Add(testDeadline)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (is *inlineSetup) create(t *testing.T, topic string) {
	t.Helper()
	if _, err := is.b.CreateTopic(context.Background(), []byte(topic), 0); err != nil {
		t.Fatal(err)
	}
}

// acked returns the acknowledged position of (topic, who), -1 if it is not
// subscribed.
func (is *inlineSetup) acked(topic, who string) int64 {
	for _, s := range is.b.Subscribers() {
		if s.Topic == topic && s.Who == who {
			return s.Position
		}
	}
	return -1
}

// readData reads one data frame of up to 64 MiB and returns its messages.
func readData(t *testing.T, c net.Conn) []protocol.SubMessage {
	t.Helper()
	f, err := protocol.ReadSubFrame(c, 64<<20)
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	if f.Code != protocol.StatusOK {
		t.Fatalf("got unit %d, want a data frame", f.Code)
	}
	msgs, err := protocol.ParseSubMessages(f.Body, f.Count)
	if err != nil {
		t.Fatalf("parse frame: %v", err)
	}
	return msgs
}

func publish(t *testing.T, c net.Conn, topic, body string) {
	t.Helper()
	send(t, c, pubReq(topic, record(body)))
	expect(t, c, okReply())
}

// One publisher and one caught-up subscriber in lockstep, the low-rate
// shape: every frame after the first is written by the publisher's own
// goroutine when inline delivery is on, none when it is off, and either
// way each message arrives once, in order, with its body.
func TestSubInlineLockstep(t *testing.T) {
	const n = 60
	for _, tc := range []struct {
		name      string
		inline    int
		minInline int64
		maxInline int64
	}{
		{"inline on", 4, n - 1, n},
		{"inline off", -1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := startInline(t, tc.inline, nil)
			is.create(t, "lock")
			pub, sub := is.dial(t), is.dial(t)
			send(t, sub, subReq("lock", "w1", 0, 1, 30*time.Second))
			smsstest.WaitFor(t, testDeadline, "the subscription", func() bool { return is.acked("lock", "w1") == 0 })
			for i := 1; i <= n; i++ {
				publish(t, pub, "lock", fmt.Sprint("m", i))
				msgs := readData(t, sub)
				if len(msgs) != 1 || string(msgs[0].Body) != fmt.Sprint("m", i) {
					t.Fatalf("message %d: got %d messages, first %q", i, len(msgs), msgs[0].Body)
				}
				id := msgs[0].EventID
				send(t, sub, ack(ackContinue))
				// The next commit finds the ack in, so it may go inline.
				smsstest.WaitFor(t, testDeadline, "the ack", func() bool { return is.acked("lock", "w1") == id })
			}
			got := is.srv.inlineFrames.Load()
			if got < tc.minInline || got > tc.maxInline {
				t.Fatalf("inline frames %d, want %d..%d", got, tc.minInline, tc.maxInline)
			}
		})
	}
}

// bigBody is a message larger than a socket's send buffer can grow
// (net.ipv4.tcp_wmem's 4 MiB) and the subscriber's receive buffer (set
// small), so that a frame of it never goes out in one non-blocking write.
func bigBody(i int) string {
	return fmt.Sprintf("m%d-", i) + strings.Repeat(string(rune('a'+i%26)), 6<<20)
}

// settledSmallSubscriber creates topic, subscribes to it as w1 (batch 1)
// on a connection with a small receive buffer, and settles the stream
// (settle); it returns the publisher's and the subscriber's connections.
func (is *inlineSetup) settledSmallSubscriber(t *testing.T, topic string) (pub, sub net.Conn) {
	t.Helper()
	is.create(t, topic)
	pub, sub = is.dial(t), is.dial(t)
	smallRcvBuf(sub)
	send(t, sub, subReq(topic, "w1", 0, 1, time.Minute))
	smsstest.WaitFor(t, testDeadline, "the subscription", func() bool { return is.acked(topic, "w1") == 0 })
	is.settle(t, pub, sub, topic, "w1")
	return pub, sub
}

// settle publishes small messages in lockstep with the subscriber until one
// was delivered inline: the stream is then parked (a hook parks it again
// before the publish is answered) and the next commit's hook claims it.
func (is *inlineSetup) settle(t *testing.T, pub, sub net.Conn, topic, who string) {
	t.Helper()
	for i := 0; is.srv.inlineFrames.Load() == 0; i++ {
		if i == 50 {
			t.Fatal("no frame delivered inline")
		}
		publish(t, pub, topic, "warm")
		msgs := readData(t, sub)
		send(t, sub, ack(ackContinue))
		id := msgs[len(msgs)-1].EventID
		smsstest.WaitFor(t, testDeadline, "the ack", func() bool { return is.acked(topic, who) == id })
	}
}

// smallRcvBuf keeps the subscriber's receive buffer small, but above the
// loopback MSS so that the transfer does not crawl.
func smallRcvBuf(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(256 << 10)
	}
}

// A subscriber that stops reading while its frame is being delivered
// inline: the publisher's goroutine must not wait for it (the rest of the
// frame is written by the subscriber's own goroutine), later publishes go
// through, and once the subscriber reads again it gets every message once,
// in order, whole.
func TestSubInlineStalledSubscriberDoesNotBlockPublisher(t *testing.T) {
	is := startInline(t, 4, nil)
	pub, sub := is.settledSmallSubscriber(t, "slow")
	// The subscriber reads nothing while these are published; each
	// publish must still be answered promptly.
	const n = 3
	start := time.Now()
	for i := 1; i <= n; i++ {
		if err := pub.SetDeadline(time.Now().Add(testDeadline / 2)); err != nil {
			t.Fatal(err)
		}
		publish(t, pub, "slow", bigBody(i))
	}
	t.Logf("%d publishes of %d MiB with a stalled subscriber: %v", n, len(bigBody(0))>>20, time.Since(start))
	if got := is.srv.inlinePartial.Load(); got != 1 {
		t.Fatalf("frames handed back part-written: %d, want 1 (the first big one)", got)
	}
	for i := 1; i <= n; i++ {
		msgs := readData(t, sub)
		if len(msgs) != 1 || string(msgs[0].Body) != bigBody(i) {
			t.Fatalf("frame %d: %d messages, body %.20q", i, len(msgs), msgs[0].Body)
		}
		send(t, sub, ack(ackContinue))
	}
	// And the stream is live again: a small message arrives too.
	publish(t, pub, "slow", "tail")
	if msgs := readData(t, sub); len(msgs) != 1 || string(msgs[0].Body) != "tail" {
		t.Fatalf("tail: %d messages, %.20q", len(msgs), msgs[0].Body)
	}
}

// A subscriber that goes away in the middle of a frame being delivered
// inline: the publisher goes on, the stream ends and frees its who, and a
// new subscription under that who gets every message from the start.
func TestSubInlineSubscriberGoneMidFrame(t *testing.T) {
	is := startInline(t, 4, nil)
	pub, sub := is.settledSmallSubscriber(t, "gone")
	publish(t, pub, "gone", bigBody(1))
	if got := is.srv.inlinePartial.Load(); got != 1 {
		t.Fatalf("frames handed back part-written: %d, want 1", got)
	}
	var part [1000]byte
	if _, err := io.ReadFull(sub, part[:]); err != nil {
		t.Fatal(err)
	}
	sub.Close()
	publish(t, pub, "gone", "after")
	smsstest.WaitFor(t, testDeadline, "the who freed", func() bool { return is.acked("gone", "w1") == -1 })
	again := is.dial(t)
	send(t, again, subReq("gone", "w1", 0, 8, time.Minute))
	var bodies []string // past the warm-up messages
	for len(bodies) < 2 {
		for _, m := range readData(t, again) {
			if string(m.Body) != "warm" {
				bodies = append(bodies, string(m.Body))
			}
		}
		send(t, again, ack(ackContinue))
	}
	if len(bodies) != 2 || bodies[0] != bigBody(1) || bodies[1] != "after" {
		t.Fatalf("resubscribed: %d messages", len(bodies))
	}
	if !strings.Contains(is.logs.String(), `msg="subscription ended"`) {
		t.Fatal("the first stream never ended")
	}
}

// Many publishers at once against one subscriber with small batches: the
// hooks, the subscriber's goroutine and the watcher take turns (inline,
// handed back while an ack is pending, handed to the watcher); every
// message still arrives exactly once and in eventId order, each
// publisher's in its own order.
func TestSubInlineConcurrentPublishers(t *testing.T) {
	for _, tc := range []struct {
		pubs  int
		batch uint8
	}{{4, 3}, {2, 1}} {
		t.Run(fmt.Sprintf("%d publishers batch %d", tc.pubs, tc.batch), func(t *testing.T) {
			concurrentPublishers(t, tc.pubs, tc.batch)
		})
	}
}

func concurrentPublishers(t *testing.T, pubs int, batch uint8) {
	const each = 150
	is := startInline(t, 4, nil)
	is.create(t, "many")
	sub := is.dial(t)
	send(t, sub, subReq("many", "w1", 0, batch, time.Minute))
	smsstest.WaitFor(t, testDeadline, "the subscription", func() bool { return is.acked("many", "w1") == 0 })
	var wg sync.WaitGroup
	for p := 0; p < pubs; p++ {
		c := is.dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := c.Write(pubReq("many", record(fmt.Sprintf("p%d-%d", p, i)))); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				got := make([]byte, len(okReply()))
				if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, okReply()) {
					t.Errorf("publish reply %q: %v", got, err)
					return
				}
			}
		}()
	}
	next := make([]int, pubs)
	var last int64
	for total := 0; total < pubs*each; {
		for _, m := range readData(t, sub) {
			if m.EventID <= last {
				t.Fatalf("eventId %d after %d", m.EventID, last)
			}
			last = m.EventID
			var p, i int
			if _, err := fmt.Sscanf(string(m.Body), "p%d-%d", &p, &i); err != nil || p >= pubs || i != next[p] {
				t.Fatalf("body %q, want p%d-%d", m.Body, p, next[p])
			}
			next[p]++
			total++
		}
		send(t, sub, ack(ackContinue))
	}
	wg.Wait()
	t.Logf("inline frames: %d of %d messages", is.srv.inlineFrames.Load(), pubs*each)
}

// A parked stream still sends alives when idle (pushed back by the frames
// written inline) and ends with a 255 when its topic is deleted.
func TestSubInlineAliveAndDelete(t *testing.T) {
	is := startInline(t, 4, func(o *Options) { o.AliveInterval = 300 * time.Millisecond })
	is.create(t, "idle")
	pub, sub := is.dial(t), is.dial(t)
	send(t, sub, subReq("idle", "w1", 0, 1, time.Minute))
	expectUnit(t, sub, protocol.StatusAlive)
	publish(t, pub, "idle", "one")
	if msgs := readData(t, sub); string(msgs[0].Body) != "one" {
		t.Fatalf("got %q", msgs[0].Body)
	}
	send(t, sub, ack(ackContinue))
	expectUnit(t, sub, protocol.StatusAlive)
	if _, err := is.b.DeleteTopic(context.Background(), []byte("idle")); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := protocol.ReadSubFrame(sub, 1<<20)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if f.Code == protocol.StatusAlive {
			continue
		}
		if f.Code != protocol.StatusSubEnd {
			t.Fatalf("got unit %d, want 255", f.Code)
		}
		break
	}
}

// The watcher of an inline stream reads with raw system calls (readRaw):
// its ack rules, timeouts and hand-over to the command loop stay those of
// subwatch.go, over the real broker.
func TestSubInlineWatcherRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, is *inlineSetup, pub, sub net.Conn)
	}{
		{"ack 1 keeps a pipelined request", func(t *testing.T, is *inlineSetup, pub, sub net.Conn) {
			publish(t, pub, "w", "last")
			readData(t, sub)
			send(t, sub, append(ack(ackEnd), aliveReq()...))
			expect(t, sub, aliveReply())
			smsstest.WaitFor(t, testDeadline, "the who freed", func() bool { return is.acked("w", "w1") == -1 })
			send(t, sub, aliveReq())
			expect(t, sub, aliveReply())
		}},
		{"ack timeout closes", func(t *testing.T, is *inlineSetup, pub, sub net.Conn) {
			publish(t, pub, "w", "never acked")
			readData(t, sub)
			expectClosed(t, sub)
			smsstest.WaitFor(t, testDeadline, "the log", func() bool { return strings.Contains(is.logs.String(), "ack timeout after") })
		}},
		{"stray byte while idle closes", func(t *testing.T, is *inlineSetup, pub, sub net.Conn) {
			send(t, sub, []byte{7})
			expectClosed(t, sub)
			smsstest.WaitFor(t, testDeadline, "the who freed", func() bool { return is.acked("w", "w1") == -1 })
		}},
		{"EOF while idle frees the who", func(t *testing.T, is *inlineSetup, pub, sub net.Conn) {
			sub.Close()
			smsstest.WaitFor(t, testDeadline, "the who freed", func() bool { return is.acked("w", "w1") == -1 })
			publish(t, pub, "w", "nobody")
		}},
		{"invalid ack closes", func(t *testing.T, is *inlineSetup, pub, sub net.Conn) {
			publish(t, pub, "w", "one")
			readData(t, sub)
			send(t, sub, ack(9))
			expectClosed(t, sub)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := startInline(t, 4, nil)
			is.create(t, "w")
			pub, sub := is.dial(t), is.dial(t)
			send(t, sub, subReq("w", "w1", 0, 4, 400*time.Millisecond))
			smsstest.WaitFor(t, testDeadline, "the subscription", func() bool { return is.acked("w", "w1") == 0 })
			is.settle(t, pub, sub, "w", "w1")
			tc.run(t, is, pub, sub)
		})
	}
}

// TestSubInlineNotOverTLS: a subscriber over TLS never takes the inline
// path (a hook's raw write would bypass the TLS record layer); its stream
// goroutine writes every frame, in order. A plain subscriber of the same
// server does get inline frames, so the setup has inline delivery on.
func TestSubInlineNotOverTLS(t *testing.T) {
	pki := authtest.NewPKI(t)
	is := startInline(t, 4, func(o *Options) {
		o.Security = Security{TLS: pki.ServerConfig(t, false), TLSListen: "127.0.0.1:0"}
	})
	lockstep := func(sub net.Conn, topic string, n int) {
		t.Helper()
		is.create(t, topic)
		pub := is.dial(t)
		send(t, sub, subReq(topic, "w1", 0, 1, 30*time.Second))
		smsstest.WaitFor(t, testDeadline, "the subscription", func() bool { return is.acked(topic, "w1") == 0 })
		for i := 1; i <= n; i++ {
			publish(t, pub, topic, fmt.Sprint("m", i))
			msgs := readData(t, sub)
			if len(msgs) != 1 || string(msgs[0].Body) != fmt.Sprint("m", i) {
				t.Fatalf("%s message %d: got %d messages", topic, i, len(msgs))
			}
			id := msgs[0].EventID
			send(t, sub, ack(ackContinue))
			smsstest.WaitFor(t, testDeadline, "the ack", func() bool { return is.acked(topic, "w1") == id })
		}
	}
	sub, err := tlsDial(t, is.srv.TLSAddr().String(), pki.ClientConfig(t, false))
	if err != nil {
		t.Fatal(err)
	}
	lockstep(sub, "overtls", 20)
	if got := is.srv.inlineFrames.Load() + is.srv.inlinePartial.Load(); got != 0 {
		t.Fatalf("%d frames written inline to a TLS subscriber", got)
	}
	lockstep(is.dial(t), "plain", 20)
	if is.srv.inlineFrames.Load() == 0 {
		t.Fatal("no frame inline to a plain subscriber: inline delivery is off in this setup")
	}
}
