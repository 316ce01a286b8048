package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

// qmsg is one message a fake queue server delivers.
type qmsg struct {
	id      int64
	attempt uint32
}

// qframe encodes a queue frame of messages with a header and a body naming
// their eventId.
func qframe(t *testing.T, ms ...qmsg) []byte {
	t.Helper()
	var area []byte
	for _, m := range ms {
		rec, err := protocol.AppendRecord(nil, protocol.Record{
			Headers: []protocol.KV{{Key: "k", Value: "v"}}, Body: fmt.Appendf(nil, "body-%d", m.id),
		})
		if err != nil {
			t.Fatal(err)
		}
		area = protocol.AppendQueueMessage(area, 1000+m.id, m.id, m.attempt, rec)
	}
	return append(protocol.AppendQueueFrameHeader(nil, uint16(len(ms)), uint32(len(area))), area...)
}

func readOutcome(r io.Reader) (protocol.QueueOutcome, error) {
	var b [protocol.QueueOutcomeSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return protocol.QueueOutcome{}, err
	}
	return protocol.DecodeQueueOutcome(b[:])
}

// readConsume reads a consume request; ok false (after a refusal) when it
// is something else or malformed.
func readConsume(t *testing.T, c net.Conn, r *bufio.Reader) (string, protocol.QueueConsume, bool) {
	req, err := readReq(r)
	if err != nil {
		return "", protocol.QueueConsume{}, false
	}
	var qc protocol.QueueConsume
	if req.Header.Cmd != protocol.CmdQueueConsume || protocol.DecodeQueueBody(req.Payload, &qc) != nil {
		t.Errorf("fake: request %v %q, want a consume", req.Header.Cmd, req.Payload)
		c.Write(protocol.AppendReplyError(nil, "bad request"))
		return "", qc, false
	}
	return string(req.Topic), qc, true
}

func fastWorker(t *testing.T, addr string, cfg WorkerConfig) *Worker {
	t.Helper()
	cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	if cfg.Topic == "" {
		cfg.Topic = "t"
	}
	if cfg.Group == "" {
		cfg.Group = "g"
	}
	w, err := NewWorker(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// confirms records the confirmations a Worker reports.
type confirms struct {
	mu  sync.Mutex
	got []QueueConfirm
	ch  chan QueueConfirm
}

func newConfirms() *confirms { return &confirms{ch: make(chan QueueConfirm, 100)} }

func (c *confirms) on(qc QueueConfirm) {
	c.mu.Lock()
	c.got = append(c.got, qc)
	c.mu.Unlock()
	c.ch <- qc
}

// wait returns the next n confirmations, failing the test after d.
func (c *confirms) wait(t *testing.T, n int, d time.Duration) []QueueConfirm {
	t.Helper()
	var out []QueueConfirm
	timer := time.NewTimer(d)
	defer timer.Stop()
	for len(out) < n {
		select {
		case qc := <-c.ch:
			out = append(out, qc)
		case <-timer.C:
			t.Fatalf("%d of %d confirmations within %v: %v", len(out), n, d, out)
		}
	}
	return out
}

// runWorker runs w.Run in the background; the returned channel gets its
// result.
func runWorker(ctx context.Context, w *Worker) <-chan error {
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return done
}

func waitDone(t *testing.T, done <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("Run did not return within %v", d)
		return nil
	}
}

// TestWorkerOutcomesOnTheWire: each handler result becomes its outcome
// unit (nil ack, an error nak with the group's backoff, NakDelay a nak
// with a delay, Term a term, InProgress a progress first), the message
// reaches the handler intact, the server's confirmations reach OnConfirm,
// and a cancelled context sends stop and returns after the server's 255.
func TestWorkerOutcomesOnTheWire(t *testing.T) {
	type result struct {
		topic string
		qc    protocol.QueueConsume
		units []protocol.QueueOutcome
	}
	got := make(chan result, 1)
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		topic, qc, ok := readConsume(t, c, r)
		if !ok {
			return
		}
		res := result{topic: topic, qc: qc}
		c.Write(protocol.AppendReplyAlive(nil))
		c.Write(qframe(t, qmsg{1, 1}, qmsg{2, 1}, qmsg{3, 2}))
		c.Write(qframe(t, qmsg{4, 1}, qmsg{5, 3}))
		for {
			o, err := readOutcome(r)
			if err != nil {
				t.Errorf("fake: read outcome: %v", err)
				return
			}
			res.units = append(res.units, o)
			switch o.Op {
			case protocol.QueueOpStop:
				c.Write(protocol.AppendReplySubEnd(nil))
				got <- res
				return
			case protocol.QueueOpProgress:
			default:
				c.Write(protocol.AppendQueueConfirms(nil, []protocol.QueueConfirm{{EventID: o.EventID, Op: o.Op}}))
			}
		}
	})
	cf := newConfirms()
	var mu sync.Mutex
	var seen []string
	ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
	defer cancel()
	w := fastWorker(t, f.addr(), WorkerConfig{Topic: "orders", Group: "billing", Consumer: "w1", OnConfirm: cf.on,
		Handler: func(ctx context.Context, m *QueueMessage) error {
			v, _ := m.Header("k")
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s/%s %d#%d %s %s %d", m.Topic, m.Group, m.EventID, m.Attempt, v, m.Body, m.Time.UnixMilli()))
			mu.Unlock()
			switch m.EventID {
			case 2:
				return errors.New("try again")
			case 3:
				return NakDelay(errors.New("later"), 1500*time.Millisecond)
			case 4:
				return fmt.Errorf("wrapped: %w", Term(errors.New("poison")))
			case 5:
				if err := m.InProgress(); err != nil {
					t.Errorf("InProgress: %v", err)
				}
			}
			return nil
		}})
	done := runWorker(ctx, w)
	confirmed := cf.wait(t, 5, 10*time.Second)
	cancel()
	if err := waitDone(t, done, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	res := <-got
	if res.topic != "orders" || res.qc != (protocol.QueueConsume{Group: "billing", Consumer: "w1", MaxInFlight: 1}) {
		t.Errorf("consume request %q %+v", res.topic, res.qc)
	}
	want := []protocol.QueueOutcome{
		{Op: protocol.QueueOpAck, EventID: 1},
		{Op: protocol.QueueOpNak, EventID: 2},
		{Op: protocol.QueueOpNak, EventID: 3, DelayMs: 1500},
		{Op: protocol.QueueOpTerm, EventID: 4},
		{Op: protocol.QueueOpProgress, EventID: 5},
		{Op: protocol.QueueOpAck, EventID: 5},
		{Op: protocol.QueueOpStop},
	}
	if !slices.Equal(res.units, want) {
		t.Errorf("outcomes on the wire\n got %+v\nwant %+v", res.units, want)
	}
	wantConfirmed := []QueueConfirm{{EventID: 1, Op: QueueOpAck}, {EventID: 2, Op: QueueOpNak},
		{EventID: 3, Op: QueueOpNak}, {EventID: 4, Op: QueueOpTerm}, {EventID: 5, Op: QueueOpAck}}
	if !slices.Equal(confirmed, wantConfirmed) {
		t.Errorf("confirmations %+v, want %+v", confirmed, wantConfirmed)
	}
	wantSeen := []string{"orders/billing 1#1 v body-1 1001", "orders/billing 2#1 v body-2 1002", "orders/billing 3#2 v body-3 1003",
		"orders/billing 4#1 v body-4 1004", "orders/billing 5#3 v body-5 1005"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, wantSeen) {
		t.Errorf("handler saw\n%q\nwant\n%q", seen, wantSeen)
	}
}

// TestWorkerReconnectsAfterStreamDrops: an ack lost with its stream is not
// reported confirmed; the worker reconnects, gets the message again (the
// server redelivers it, attempt 2) and acks it on the new stream.
func TestWorkerReconnectsAfterStreamDrops(t *testing.T) {
	var mu sync.Mutex
	sessions := 0
	f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, _, ok := readConsume(t, c, r); !ok {
			return
		}
		mu.Lock()
		sessions++
		n := sessions
		mu.Unlock()
		if n == 1 {
			c.Write(qframe(t, qmsg{7, 1}))
			readOutcome(r) // the ack, never confirmed: the stream drops
			return
		}
		c.Write(qframe(t, qmsg{7, 2}))
		for {
			o, err := readOutcome(r)
			if err != nil {
				return
			}
			if o.Op == protocol.QueueOpStop {
				c.Write(protocol.AppendReplySubEnd(nil))
				return
			}
			c.Write(protocol.AppendQueueConfirms(nil, []protocol.QueueConfirm{{EventID: o.EventID, Op: o.Op}}))
		}
	})
	cf := newConfirms()
	var attempts []int
	ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
	defer cancel()
	w := fastWorker(t, f.addr(), WorkerConfig{OnConfirm: cf.on, Handler: func(_ context.Context, m *QueueMessage) error {
		mu.Lock()
		attempts = append(attempts, m.Attempt)
		mu.Unlock()
		return nil
	}})
	done := runWorker(ctx, w)
	if c := cf.wait(t, 1, 10*time.Second); c[0] != (QueueConfirm{EventID: 7, Op: QueueOpAck}) {
		t.Errorf("confirmation %+v", c[0])
	}
	cancel()
	if err := waitDone(t, done, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 2}) || sessions != 2 {
		t.Errorf("attempts %v over %d sessions, want [1 2] over 2", attempts, sessions)
	}
	cf.mu.Lock()
	defer cf.mu.Unlock()
	if len(cf.got) != 1 {
		t.Errorf("confirmations %+v: the lost ack must not be reported", cf.got)
	}
}

// TestWorkerStopOnCancel: on cancel the running handlers see ctx end and
// their outcomes still go out (nil acks, ctx.Err() naks), a message never
// handed to a handler is nak'd for redelivery at once, and stop comes
// last. Without the server's 255 Run still returns, after StopTimeout.
func TestWorkerStopOnCancel(t *testing.T) {
	for _, answer := range []bool{true, false} {
		t.Run(fmt.Sprintf("server ends the stream: %v", answer), func(t *testing.T) {
			units := make(chan []protocol.QueueOutcome, 1)
			f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
				if _, qc, ok := readConsume(t, c, r); !ok || qc.MaxInFlight != 3 {
					t.Errorf("consume %+v", qc)
					return
				}
				c.Write(qframe(t, qmsg{1, 1}, qmsg{2, 1}, qmsg{3, 1}))
				var got []protocol.QueueOutcome
				for {
					o, err := readOutcome(r)
					if err != nil {
						t.Errorf("fake: %v", err)
						return
					}
					got = append(got, o)
					if o.Op == protocol.QueueOpStop {
						break
					}
				}
				units <- got
				if answer {
					c.Write(protocol.AppendReplySubEnd(nil))
					return
				}
				io.Copy(io.Discard, r) // hold the stream open, answer nothing
			})
			started := make(chan int64, 2)
			ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
			defer cancel()
			w := fastWorker(t, f.addr(), WorkerConfig{Concurrency: 2, MaxInFlight: 3, StopTimeout: 2 * time.Second,
				Handler: func(ctx context.Context, m *QueueMessage) error {
					started <- m.EventID
					<-ctx.Done()
					if m.EventID == 1 {
						return nil // finished despite the stop
					}
					return ctx.Err()
				}})
			done := runWorker(ctx, w)
			for range 2 {
				select {
				case <-started:
				case <-time.After(10 * time.Second):
					t.Fatal("handlers did not start")
				}
			}
			cancel()
			start := time.Now()
			if err := waitDone(t, done, 10*time.Second); !errors.Is(err, context.Canceled) {
				t.Fatalf("Run: %v", err)
			}
			// A clean stop does not wait for StopTimeout.
			if d := time.Since(start); answer && d > 1500*time.Millisecond {
				t.Errorf("clean stop took %v", d)
			}
			got := <-units
			if len(got) != 4 || got[3] != (protocol.QueueOutcome{Op: protocol.QueueOpStop}) {
				t.Fatalf("outcomes %+v, want three then stop", got)
			}
			first := got[:3]
			slices.SortFunc(first, func(a, b protocol.QueueOutcome) int { return int(a.EventID - b.EventID) })
			want := []protocol.QueueOutcome{{Op: protocol.QueueOpAck, EventID: 1}, {Op: protocol.QueueOpNak, EventID: 2},
				{Op: protocol.QueueOpNak, EventID: 3, DelayMs: 1}}
			if !slices.Equal(first, want) {
				t.Errorf("outcomes before stop %+v, want %+v", first, want)
			}
		})
	}
}

// TestWorkerRefusals: a refusal of the consume request ends Run with the
// server's text (no retry), an original server's with ErrNoQueues, and a
// 255 the worker did not ask for with ErrQueueDeleted.
func TestWorkerRefusals(t *testing.T) {
	tests := []struct {
		name  string
		reply []byte
		is    error
		text  string
	}{
		{"unknown group", protocol.AppendReplyError(nil, "queue group g of topic t not exist"), nil, "queue group g of topic t not exist"},
		{"original server", protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg), ErrNoQueues, "no work queues"},
		{"permission", protocol.AppendReplyError(nil, "permission denied: consume t"), ErrPermissionDenied, "permission denied: consume t"},
		{"group deleted", protocol.AppendReplySubEnd(protocol.AppendReplyAlive(nil)), ErrQueueDeleted, "deleted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
				if _, _, ok := readConsume(t, c, r); ok {
					c.Write(tc.reply)
				}
			})
			w := fastWorker(t, f.addr(), WorkerConfig{Handler: func(context.Context, *QueueMessage) error { return nil }})
			err := w.Run(ctxT(t, 10*time.Second))
			if err == nil || !strings.Contains(err.Error(), tc.text) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Run: %v, want %q (%v)", err, tc.text, tc.is)
			}
			if n := f.conns.Load(); n != 1 {
				t.Errorf("%d connections, want 1 (no retry)", n)
			}
		})
	}
}

// TestWorkerSkipsSlave: with several addresses a server refusing "just
// master can ..." is skipped for the next one.
func TestWorkerSkipsSlave(t *testing.T) {
	slave := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, _, ok := readConsume(t, c, r); ok {
			c.Write(protocol.AppendReplyError(nil, "just master can manage queues"))
		}
	})
	master := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, _, ok := readConsume(t, c, r); !ok {
			return
		}
		c.Write(qframe(t, qmsg{9, 1}))
		for {
			o, err := readOutcome(r)
			if err != nil {
				return
			}
			if o.Op == protocol.QueueOpStop {
				c.Write(protocol.AppendReplySubEnd(nil))
				return
			}
			c.Write(protocol.AppendQueueConfirms(nil, []protocol.QueueConfirm{{EventID: o.EventID, Op: o.Op}}))
		}
	})
	cf := newConfirms()
	ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
	defer cancel()
	w := fastWorker(t, slave.addr(), WorkerConfig{Addrs: []string{master.addr()}, OnConfirm: cf.on,
		Handler: func(context.Context, *QueueMessage) error { return nil }})
	done := runWorker(ctx, w)
	cf.wait(t, 1, 10*time.Second)
	if w.Addr() != master.addr() {
		t.Errorf("worker at %s, want the master %s", w.Addr(), master.addr())
	}
	cancel()
	if err := waitDone(t, done, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}

func TestNewWorkerValidates(t *testing.T) {
	h := func(context.Context, *QueueMessage) error { return nil }
	for _, tc := range []struct {
		cfg  WorkerConfig
		want string
	}{
		{WorkerConfig{Group: "g", Handler: h}, "Topic"},
		{WorkerConfig{Topic: "t", Handler: h}, "group name"},
		{WorkerConfig{Topic: "t", Group: "g"}, "Handler"},
		{WorkerConfig{Topic: "t", Group: "g", Handler: h, Consumer: "a b"}, "consumer name"},
		{WorkerConfig{Topic: "t", Group: "g", Handler: h, Concurrency: 4, MaxInFlight: 2}, "MaxInFlight"},
	} {
		if _, err := NewWorker("127.0.0.1:1", tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	w, err := NewWorker("127.0.0.1:1", WorkerConfig{Topic: "t", Group: "g", Handler: h})
	if err != nil || protocol.ValidateQueueName("consumer", w.Consumer()) != nil {
		t.Errorf("default consumer %q: %v", w.Consumer(), err)
	}
}

// TestWorkerFollowsMasterChange: a master that stops serving the group
// mid-stream (it was demoted) ends the stream with a 400 and refuses the
// next consume; the worker moves to the node that serves now and carries
// on there.
func TestWorkerFollowsMasterChange(t *testing.T) {
	const notActive = "queue groups are served by the master only; this node is not serving them (a slave, or changing role)"
	var mu sync.Mutex
	served := false
	confirmLoop := func(c net.Conn, r *bufio.Reader, until func(protocol.QueueOutcome) bool) bool {
		for {
			o, err := readOutcome(r)
			if err != nil {
				return false
			}
			if o.Op == protocol.QueueOpStop {
				c.Write(protocol.AppendReplySubEnd(nil))
				return false
			}
			c.Write(protocol.AppendQueueConfirms(nil, []protocol.QueueConfirm{{EventID: o.EventID, Op: o.Op}}))
			if until(o) {
				return true
			}
		}
	}
	old := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, _, ok := readConsume(t, c, r); !ok {
			return
		}
		mu.Lock()
		first := !served
		served = true
		mu.Unlock()
		if !first {
			c.Write(protocol.AppendReplyError(nil, notActive))
			return
		}
		c.Write(qframe(t, qmsg{1, 1}))
		if confirmLoop(c, r, func(o protocol.QueueOutcome) bool { return o.EventID == 1 }) {
			c.Write(protocol.AppendReplyError(nil, notActive))
		}
	})
	next := startFakeSub(t, func(c net.Conn, r *bufio.Reader) {
		if _, _, ok := readConsume(t, c, r); !ok {
			return
		}
		c.Write(qframe(t, qmsg{2, 1}))
		confirmLoop(c, r, func(protocol.QueueOutcome) bool { return false })
	})
	cf := newConfirms()
	ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
	defer cancel()
	w := fastWorker(t, old.addr(), WorkerConfig{Addrs: []string{next.addr()}, OnConfirm: cf.on,
		Handler: func(context.Context, *QueueMessage) error { return nil }})
	done := runWorker(ctx, w)
	got := cf.wait(t, 2, 10*time.Second)
	if got[0].EventID != 1 || got[1].EventID != 2 || w.Addr() != next.addr() {
		t.Errorf("confirmations %+v at %s, want 1 then 2 at %s", got, w.Addr(), next.addr())
	}
	cancel()
	if err := waitDone(t, done, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}
