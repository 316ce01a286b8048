package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

// frame encodes a subscription data frame holding messages with ids.
func frame(t *testing.T, ids ...int64) []byte {
	t.Helper()
	var area []byte
	for _, id := range ids {
		rec, err := protocol.AppendRecord(nil, protocol.Record{
			Headers: []protocol.KV{{Key: "id", Value: "v"}}, Body: []byte("body"),
		})
		if err != nil {
			t.Fatal(err)
		}
		area = protocol.AppendSubMessage(area, 1000+id, id, 0, 0, rec)
	}
	return append(protocol.AppendSubFrameHeader(nil, uint8(len(ids)), uint32(len(area))), area...)
}

func readAck(r io.Reader) (uint16, error) {
	var b [2]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b[:]), nil
}

// recorder collects what a handler saw and what was acknowledged.
type recorder struct {
	mu    sync.Mutex
	seen  []int64
	acked []int64
}

func (r *recorder) handler(action AckAction) Handler {
	return func(_ context.Context, batch []Delivery) AckAction {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, d := range batch {
			r.seen = append(r.seen, d.EventID)
		}
		return action
	}
}

func (r *recorder) afterAck(id int64) {
	r.mu.Lock()
	r.acked = append(r.acked, id)
	r.mu.Unlock()
}

func (r *recorder) snapshot() (seen, acked []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen), slices.Clone(r.acked)
}

func fastSub(addr string, cfg SubscriberConfig) (*Subscriber, error) {
	cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	return NewSubscriber(addr, cfg)
}

func TestSubscriberResumesFromLastAck(t *testing.T) {
	var mu sync.Mutex
	var froms []int64
	session := 0
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		req, err := readReq(r)
		if err != nil {
			return
		}
		mu.Lock()
		froms = append(froms, req.EventID)
		session++
		n := session
		mu.Unlock()
		if string(req.Topic) != "t" || string(req.Who) != "w" || req.Header.BatchSize() != 2 ||
			req.AckTimeout != int64(4*time.Second) {
			c.Write(protocol.AppendReplyError(nil, "bad request"))
			return
		}
		switch n {
		case 1:
			c.Write(frame(t, 5, 6))
			if code, err := readAck(r); err != nil || code != 0 {
				return
			}
			c.Write(protocol.AppendReplyAlive(nil))
			c.Write(frame(t, 7))
			readAck(r)
			// Batch 8 is delivered but the connection dies before the ack.
			c.Write(frame(t, 8))
		case 2:
			c.Write(frame(t, 8, 9))
			readAck(r)
			c.Write(protocol.AppendReplySubEnd(nil))
		}
	})
	var rec recorder
	s, err := fastSub(f.addr(), SubscriberConfig{Topic: "t", Who: "w", BatchSize: 2, AckTimeout: 4 * time.Second,
		Handler: func(ctx context.Context, b []Delivery) AckAction {
			for _, d := range b {
				if v, _ := d.Header("id"); v != "v" || string(d.Body) != "body" || d.Time.UnixMilli() != 1000+d.EventID {
					t.Errorf("delivery %+v", d)
				}
			}
			return rec.handler(Ack)(ctx, b)
		},
		AfterAck: rec.afterAck})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(ctxT(t, 10*time.Second))
	if !errors.Is(err, ErrTopicDeleted) {
		t.Fatalf("Run: %v, want ErrTopicDeleted", err)
	}
	seen, acked := rec.snapshot()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(froms, []int64{0, 7}) && !slices.Equal(froms, []int64{0, 8}) {
		t.Errorf("subscribe requests from %v, want 0 then the last acknowledged id", froms)
	}
	// The ack of 8 may or may not reach the socket before it closes. If it
	// did, the second session resumes after 8 and the server's resend of
	// 8 is filtered; if not, 8 is delivered again (at-least-once).
	want := []int64{5, 6, 7, 8, 9}
	if froms[1] == 7 {
		want = []int64{5, 6, 7, 8, 8, 9}
	}
	if !slices.Equal(seen, want) {
		t.Errorf("handler saw %v, want %v", seen, want)
	}
	if !slices.IsSorted(acked) || acked[len(acked)-1] != 9 || s.LastAcked() != 9 {
		t.Errorf("acks %v, LastAcked %d", acked, s.LastAcked())
	}
}

func TestSubscriberSurvivesMalformedFrames(t *testing.T) {
	var mu sync.Mutex
	session := 0
	bad := [][]byte{
		protocol.AppendSubFrameHeader(nil, 0, 0),                     // count 0 (§10.34)
		append(protocol.AppendSubFrameHeader(nil, 3, 4), 1, 2, 3, 4), // count/size mismatch
		append(frame(t, 3)[:10], frame(t, 3)[10:20]...),              // truncated
		{0x2a, 0, 0, 0, 0, 0, 0, 0, 0, 0},                            // unknown status
	}
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := readReq(r); err != nil {
			return
		}
		mu.Lock()
		n := session
		session++
		mu.Unlock()
		if n < len(bad) {
			c.Write(bad[n])
			return
		}
		c.Write(frame(t, 3))
		if code, _ := readAck(r); code == 1 {
			return
		}
	})
	var rec recorder
	s, err := fastSub(f.addr(), SubscriberConfig{Topic: "t", Who: "w", Handler: rec.handler(AckAndStop), AfterAck: rec.afterAck})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if seen, acked := rec.snapshot(); !slices.Equal(seen, []int64{3}) || !slices.Equal(acked, []int64{3}) {
		t.Errorf("seen %v acked %v", seen, acked)
	}
}

func TestSubscriberStopWithoutAck(t *testing.T) {
	result := make(chan error, 1)
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := readReq(r); err != nil {
			return
		}
		c.Write(frame(t, 4))
		_, err := readAck(r)
		result <- err
	})
	var rec recorder
	s, err := fastSub(f.addr(), SubscriberConfig{Topic: "t", Who: "w", From: 3, Handler: rec.handler(StopWithoutAck), AfterAck: rec.afterAck})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if !errors.Is(err, io.EOF) {
			t.Errorf("server side read %v, want EOF (connection closed, no ack)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed after StopWithoutAck")
	}
	if _, acked := rec.snapshot(); len(acked) != 0 || s.LastAcked() != 3 {
		t.Errorf("acked %v LastAcked %d, want nothing acknowledged", acked, s.LastAcked())
	}
}

func TestSubscriberRetriesOnlyWhatCanHeal(t *testing.T) {
	var mu sync.Mutex
	session := 0
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		req, err := readReq(r)
		if err != nil {
			return
		}
		mu.Lock()
		n := session
		session++
		mu.Unlock()
		switch {
		case string(req.Topic) == "gone":
			c.Write(protocol.AppendReplyError(nil, "topic not exist"))
		case n < 3:
			c.Write(protocol.AppendReplyError(nil, "w regiester exist"))
		default:
			c.Write(frame(t, 1))
			readAck(r)
		}
	})
	var rec recorder
	s, _ := fastSub(f.addr(), SubscriberConfig{Topic: "gone", Who: "w", Handler: rec.handler(Ack)})
	if err := s.Run(ctxT(t, 10*time.Second)); !errors.Is(err, ErrTopicNotExist) {
		t.Fatalf("unknown topic: %v", err)
	}
	s, _ = fastSub(f.addr(), SubscriberConfig{Topic: "t", Who: "w", Handler: rec.handler(AckAndStop)})
	if err := s.Run(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("who registered twice, then free: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if session != 4 {
		t.Errorf("%d sessions, want 1 refused + 2 'regiester exist' + 1 served", session)
	}
}

// TestStreamsRetryStoppingServer: a server that refuses a subscription or
// a consume because it is stopping (a cluster node changing role in place
// answers "server shutting down" for a moment) is asked again; the
// answer after it is the one that counts.
func TestStreamsRetryStoppingServer(t *testing.T) {
	var mu sync.Mutex
	session := 0
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := readReq(r); err != nil {
			return
		}
		mu.Lock()
		session++
		n := session
		mu.Unlock()
		if n == 1 {
			c.Write(protocol.AppendReplyError(nil, "server shutting down"))
			return
		}
		c.Write(protocol.AppendReplyError(nil, "topic not exist"))
	})
	var rec recorder
	s, _ := fastSub(f.addr(), SubscriberConfig{Topic: "t", Who: "w", Handler: rec.handler(Ack)})
	if err := s.Run(ctxT(t, 10*time.Second)); !errors.Is(err, ErrTopicNotExist) {
		t.Fatalf("after a stopping server's refusal: %v, want the next answer (topic not exist)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if session != 2 {
		t.Fatalf("%d sessions, want the refused one and the next", session)
	}
	for _, tc := range []struct {
		err        error
		progressed bool
		want       bool
	}{
		{newServerError("server shutting down", "t"), false, true},
		{newServerError("the server is shutting down", "t"), false, true},
		{newServerError("topic not exist", "t"), false, false},
		{newServerError("some refusal", "t"), false, false},
		{newServerError("some refusal", "t"), true, true},
	} {
		if got := workerRetryable(tc.err, tc.progressed); got != tc.want {
			t.Errorf("worker: %v (stream had run: %v) retryable %v, want %v", tc.err, tc.progressed, got, tc.want)
		}
	}
}

func TestSubscriberIdleTimeoutReconnects(t *testing.T) {
	var mu sync.Mutex
	session := 0
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := readReq(r); err != nil {
			return
		}
		mu.Lock()
		n := session
		session++
		mu.Unlock()
		if n == 0 {
			io.Copy(io.Discard, r) // silent until the client gives up
			return
		}
		c.Write(frame(t, 1))
		readAck(r)
	})
	var rec recorder
	s, _ := fastSub(f.addr(), SubscriberConfig{Topic: "t", Who: "w", IdleTimeout: 100 * time.Millisecond, Handler: rec.handler(AckAndStop)})
	if err := s.Run(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestSubscriberCancel(t *testing.T) {
	inHandler := make(chan struct{})
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := readReq(r); err != nil {
			return
		}
		c.Write(frame(t, 1))
		io.Copy(io.Discard, r)
	})
	ctx, cancel := context.WithCancel(context.Background())
	s, _ := fastSub(f.addr(), SubscriberConfig{Topic: "t", Who: "w", Handler: func(hctx context.Context, _ []Delivery) AckAction {
		close(inHandler)
		<-hctx.Done() // the handler's context ends with Run's
		return Ack
	}})
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-inHandler
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if s.LastAcked() != 0 {
		t.Errorf("batch handled during cancellation counted as acknowledged: %d", s.LastAcked())
	}
}

func TestBackoff(t *testing.T) {
	for attempt, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second} {
		for i := 0; i < 100; i++ {
			d := backoff(time.Second, 30*time.Second, attempt)
			if d < want/2 || d > want {
				t.Fatalf("attempt %d: %v not in [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
	if d := backoff(time.Second, 30*time.Second, 1000); d > 30*time.Second {
		t.Fatalf("overflow: %v", d)
	}
}

func TestSubscriberUnencodableRequestIsNotRetried(t *testing.T) {
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) { readReq(r) })
	var rec recorder
	s, _ := fastSub(f.addr(), SubscriberConfig{Topic: "t", Who: "w", Handler: rec.handler(Ack)})
	ctx := WithTraceID(ctxT(t, 10*time.Second), string(make([]byte, 300)))
	if err := s.Run(ctx); !errors.Is(err, protocol.ErrFieldTooLong) {
		t.Fatalf("Run with a 300-byte traceId: %v", err)
	}
}

// TestSubscriberAcceptsLargestServerFrame: a server sends one message alone
// however large limit.maxPayload (at most protocol.MaxPayloadCap) lets it
// be; the default client cap must take that frame, or the consumer could
// never get past the message.
func TestSubscriberAcceptsLargestServerFrame(t *testing.T) {
	if testing.Short() {
		t.Skip("moves a 256 MiB frame")
	}
	empty, err := protocol.AppendRecord(nil, protocol.Record{})
	if err != nil {
		t.Fatal(err)
	}
	// The largest record a pub may carry: exactly limit.maxPayload's cap.
	body := make([]byte, protocol.MaxPayloadCap-len(empty))
	rec, err := protocol.AppendRecord(nil, protocol.Record{Body: body})
	if err != nil || len(rec) != protocol.MaxPayloadCap {
		t.Fatalf("record of %d bytes (%v), want %d", len(rec), err, protocol.MaxPayloadCap)
	}
	area := protocol.AppendSubMessage(nil, 1000, 1, 0, 0, rec)
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := readReq(r); err != nil {
			return
		}
		c.Write(protocol.AppendSubFrameHeader(nil, 1, uint32(len(area))))
		c.Write(area)
		if code, err := readAck(r); err != nil || code != 0 {
			return
		}
		c.Write(protocol.AppendReplySubEnd(nil))
	})
	var got int
	s, err := fastSub(f.addr(), SubscriberConfig{Topic: "t", Who: "w",
		Handler: func(_ context.Context, b []Delivery) AckAction {
			for _, d := range b {
				got = len(d.Body)
			}
			return Ack
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctxT(t, 60*time.Second)); !errors.Is(err, ErrTopicDeleted) {
		t.Fatalf("Run: %v, want ErrTopicDeleted after the message", err)
	}
	if got != len(body) || s.LastAcked() != 1 {
		t.Fatalf("delivered a body of %d bytes, last acked %d; want %d bytes, 1", got, s.LastAcked(), len(body))
	}
}

// Resume asks for the server's position (-1, with ResumeNew in header bytes
// 5..12) until a batch is acknowledged, then after LastAcked.
func TestSubscriberResumeMode(t *testing.T) {
	var mu sync.Mutex
	type req struct{ from, whenNone int64 }
	var reqs []req
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		rq, err := readReq(r)
		if err != nil {
			return
		}
		mu.Lock()
		reqs = append(reqs, req{rq.EventID, rq.Header.ResumeDefault()})
		n := len(reqs)
		mu.Unlock()
		switch n {
		case 1: // dies before any frame
		case 2:
			c.Write(frame(t, 5, 6))
			readAck(r)
		case 3:
			c.Write(frame(t, 7))
			readAck(r)
			c.Write(protocol.AppendReplySubEnd(nil))
		}
	})
	var rec recorder
	s, err := fastSub(f.addr(), SubscriberConfig{Topic: "t", Who: "w", BatchSize: 2, Resume: true, ResumeNew: ResumeFromEnd,
		Handler: rec.handler(Ack), AfterAck: rec.afterAck})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctxT(t, 10*time.Second)); !errors.Is(err, ErrTopicDeleted) {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []req{{-1, -1}, {-1, -1}, {6, 0}}
	if !slices.Equal(reqs, want) {
		t.Errorf("requests %v, want %v", reqs, want)
	}
	if seen, _ := rec.snapshot(); !slices.Equal(seen, []int64{5, 6, 7}) {
		t.Errorf("handler saw %v", seen)
	}
	if _, err := NewSubscriber("x:1", SubscriberConfig{Topic: "t", Handler: rec.handler(Ack), Resume: true, ResumeNew: -2}); err == nil {
		t.Error("ResumeNew -2 accepted")
	}
}

// startFakeSub is startFake for a subscriber's server that answers the
// status request a session starts with as an original smss does ("don't
// support action", connection closed): the subscriber then has no epoch
// history to check positions against, and behaves as before.
func startFakeSub(t *testing.T, serve func(c net.Conn, r *bufio.Reader)) *fake {
	t.Helper()
	return startFake(t, func(c net.Conn, r *bufio.Reader) {
		if b, err := r.Peek(1); err == nil && b[0] == byte(protocol.CmdStatus) {
			if _, err := readReq(r); err == nil {
				c.Write(protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg))
			}
			return
		}
		serve(c, r)
	})
}
