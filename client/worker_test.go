package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/client/internal/testserver"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// queueLog records, against one clock of sequence numbers shared by every
// worker of a test, each delivery a handler got and each confirmation.
type queueLog struct {
	seq atomic.Int64

	mu         sync.Mutex
	deliveries map[int64][]delivery   // by eventId
	acked      map[int64]int64        // eventId -> seq of its confirmed ack
	confirmed  map[int64]QueueConfirm // eventId -> its last confirmation
	byWorker   map[string]int
}

type delivery struct {
	seq     int64
	attempt int
	worker  string
}

func newQueueLog() *queueLog {
	return &queueLog{deliveries: map[int64][]delivery{}, acked: map[int64]int64{},
		confirmed: map[int64]QueueConfirm{}, byWorker: map[string]int{}}
}

func (l *queueLog) delivered(worker string, m *QueueMessage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliveries[m.EventID] = append(l.deliveries[m.EventID], delivery{l.seq.Add(1), m.Attempt, worker})
	l.byWorker[worker]++
}

func (l *queueLog) confirm(c QueueConfirm) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.Op == QueueOpAck && c.Result == QueueResultDone {
		l.acked[c.EventID] = l.seq.Add(1)
	}
	if c.Op != QueueOpProgress {
		l.confirmed[c.EventID] = c
	}
}

// settled counts the eventIds whose last confirmation is op with result
// done.
func (l *queueLog) settled(op QueueOp) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.confirmed {
		if c.Op == op && c.Result == QueueResultDone {
			n++
		}
	}
	return n
}

// redeliveredAfterAck lists the eventIds delivered again after their ack
// was confirmed: a work queue must never do that.
func (l *queueLog) redeliveredAfterAck() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int64
	for id, at := range l.acked {
		for _, d := range l.deliveries[id] {
			if d.seq > at {
				out = append(out, id)
			}
		}
	}
	return out
}

func (l *queueLog) attempts(id int64) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for _, d := range l.deliveries[id] {
		out = append(out, d.attempt)
	}
	return out
}

// TestWorkQueueRealServer: two workers share a group's messages on a real
// server; a handler error redelivers with attempt 2, a message failing
// every time is dead-lettered after MaxDeliver, Term dead-letters at once;
// nothing whose ack was confirmed is delivered again, and the group's
// counters and consumers agree.
func TestWorkQueueRealServer(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateTopic(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	cfg := QueueConfig{Group: "g", AckWaitMs: 5000, MaxDeliver: 3, BackoffMs: []int64{20, 50}, DeadLetter: "jobs.dead", From: "oldest"}
	info, err := c.CreateQueue(ctx, "jobs", cfg)
	if err != nil || info.Config.MaxDeliver != 3 || info.Config.DeadLetter != "jobs.dead" {
		t.Fatalf("CreateQueue: %+v %v", info, err)
	}
	if _, err := c.CreateQueue(ctx, "jobs", cfg); err != nil {
		t.Fatalf("the same create again: %v", err)
	}
	other := cfg
	other.AckWaitMs = 9000
	if _, err := c.CreateQueue(ctx, "jobs", other); !IsServerError(err) || !strings.Contains(err.Error(), "other settings") {
		t.Fatalf("a create with other settings: %v", err)
	}

	log := newQueueLog()
	handler := func(name string) QueueHandler {
		return func(ctx context.Context, m *QueueMessage) error {
			log.delivered(name, m)
			switch body := string(m.Body); {
			case body == "fail-once" && m.Attempt == 1:
				return errors.New("transient")
			case body == "always-fail":
				return errors.New("broken")
			case body == "poison":
				return Term(errors.New("poison"))
			}
			if v, _ := m.Header("n"); v == "" && strings.HasPrefix(string(m.Body), "job-") {
				return Term(fmt.Errorf("eventId %d lost its header", m.EventID))
			}
			// A little work, so that both workers get some.
			select {
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var runs []<-chan error
	for _, name := range []string{"w1", "w2"} {
		w, err := c.NewWorker(WorkerConfig{Topic: "jobs", Group: "g", Consumer: name, Concurrency: 2,
			OnConfirm: log.confirm, Handler: handler(name)})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, runWorker(wctx, w))
	}
	consumers := func(n int) bool {
		qs, err := c.Queues(ctx, "jobs", "g")
		return err == nil && len(qs) == 1 && len(qs[0].Consumers) == n
	}
	if !smsstest.Poll(20*time.Second, func() bool { return consumers(2) }) {
		t.Fatal("the two workers did not join the group")
	}

	const plain = 60
	var msgs []*Message
	for i := range plain {
		msgs = append(msgs, NewMessage([]byte("job-"+strconv.Itoa(i))).SetHeader("n", strconv.Itoa(i)))
	}
	if err := c.PublishBatch(ctx, "jobs", msgs); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"fail-once", "always-fail", "poison"} {
		if err := c.Publish(ctx, "jobs", NewMessage([]byte(body))); err != nil {
			t.Fatal(err)
		}
	}
	if !smsstest.Poll(30*time.Second, func() bool {
		return log.settled(QueueOpAck) == plain+1 && log.settled(QueueOpTerm) == 1
	}) {
		t.Fatalf("confirmed acks %d (want %d), terms %d (want 1)", log.settled(QueueOpAck), plain+1, log.settled(QueueOpTerm))
	}
	log.mu.Lock()
	var ids []int64
	for id := range log.deliveries {
		ids = append(ids, id)
	}
	log.mu.Unlock()
	slices.Sort(ids)
	special := map[string]int64{}
	if len(ids) != plain+3 {
		t.Fatalf("%d eventIds delivered, want %d", len(ids), plain+3)
	}
	// The specials were published last, in this order.
	special["fail-once"], special["always-fail"], special["poison"] = ids[plain], ids[plain+1], ids[plain+2]
	if got := log.attempts(special["fail-once"]); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("fail-once attempts %v, want [1 2]", got)
	}
	if !smsstest.Poll(20*time.Second, func() bool { return len(log.attempts(special["always-fail"])) == 3 }) {
		t.Errorf("always-fail attempts %v, want 3", log.attempts(special["always-fail"]))
	}
	if got := log.attempts(special["poison"]); !slices.Equal(got, []int{1}) {
		t.Errorf("poison attempts %v, want [1]", got)
	}

	// Both dead letters reach the dead-letter topic with their reasons.
	dead := map[string]Delivery{}
	var deadMu sync.Mutex
	sub, err := c.NewSubscriber(SubscriberConfig{Topic: "jobs.dead", Who: "check", Handler: func(_ context.Context, b []Delivery) AckAction {
		deadMu.Lock()
		defer deadMu.Unlock()
		for _, d := range b {
			dead[string(d.Body)] = d
		}
		if len(dead) == 2 {
			return AckAndStop
		}
		return Ack
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Run(ctx); err != nil {
		t.Fatalf("reading the dead letters: %v (%v)", err, dead)
	}
	for body, reason := range map[string]string{"poison": "term", "always-fail": "maxDeliver"} {
		d, ok := dead[body]
		if !ok {
			t.Errorf("no dead letter of %s", body)
			continue
		}
		if v, _ := d.Header(protocol.DeadHeaderReason); v != reason {
			t.Errorf("%s: reason %q, want %q", body, v, reason)
		}
		if v, _ := d.Header(protocol.DeadHeaderEventID); v != strconv.FormatInt(special[body], 10) {
			t.Errorf("%s: dead eventId %q, want %d", body, v, special[body])
		}
		if v, _ := d.Header(protocol.DeadHeaderGroup); v != "g" {
			t.Errorf("%s: dead group %q", body, v)
		}
	}

	if ids := log.redeliveredAfterAck(); len(ids) > 0 {
		t.Errorf("delivered again after a confirmed ack: %v", ids)
	}
	log.mu.Lock()
	if log.byWorker["w1"] == 0 || log.byWorker["w2"] == 0 {
		t.Errorf("the workers did not share the messages: %v", log.byWorker)
	}
	log.mu.Unlock()
	if !smsstest.Poll(10*time.Second, func() bool {
		qs, err := c.Queues(ctx, "jobs", "g")
		return err == nil && len(qs) == 1 && qs[0].Pending == 0 && qs[0].Acked == plain+1 && qs[0].DeadLettered == 2
	}) {
		qs, err := c.Queues(ctx, "jobs", "g")
		t.Errorf("group counters %+v %v", qs, err)
	}

	stop()
	for _, done := range runs {
		if err := waitDone(t, done, 20*time.Second); !errors.Is(err, context.Canceled) {
			t.Errorf("Run after stop: %v", err)
		}
	}
	if !smsstest.Poll(10*time.Second, func() bool { return consumers(0) }) {
		t.Error("consumers still listed after the workers stopped")
	}
	if err := c.DeleteQueue(ctx, "jobs", "g"); err != nil {
		t.Fatal(err)
	}
	if qs, err := c.Queues(ctx, "", ""); err != nil || len(qs) != 0 {
		t.Errorf("Queues after delete: %+v %v", qs, err)
	}
}

// TestWorkQueueMasterAmongAddresses: given a slave and its master, the
// queue calls and a worker go to the master; the slave refuses them
// itself as "not the master".
func TestWorkQueueMasterAmongAddresses(t *testing.T) {
	master := testserver.Start(t, fastAlive)
	slave := testserver.StartSlave(t, master, fastAlive)
	ctx := ctxT(t, 60*time.Second)
	direct := dialT(t, slave.Addr, Options{})
	if _, err := direct.Queues(ctx, "", ""); !errors.Is(err, ErrNotMaster) {
		t.Fatalf("queue info on the slave: %v, want ErrNotMaster", err)
	}
	c := dialT(t, "", Options{Addrs: []string{slave.Addr, master.Addr}})
	if err := c.CreateTopic(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "jobs", QueueConfig{Group: "g", From: "oldest"}); err != nil {
		t.Fatalf("CreateQueue among the addresses: %v", err)
	}
	if err := c.Publish(ctx, "jobs", NewMessage([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	log := newQueueLog()
	w, err := c.NewWorker(WorkerConfig{Topic: "jobs", Group: "g", OnConfirm: log.confirm,
		Handler: func(_ context.Context, m *QueueMessage) error {
			log.delivered("w", m)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := runWorker(wctx, w)
	if !smsstest.Poll(30*time.Second, func() bool { return log.settled(QueueOpAck) == 1 }) {
		t.Fatal("the message was not acked")
	}
	if w.Addr() != master.Addr {
		t.Errorf("worker at %s, want the master %s", w.Addr(), master.Addr)
	}
	stop()
	if err := waitDone(t, done, 20*time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}
