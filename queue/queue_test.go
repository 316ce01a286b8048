package queue

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/protocol"
)

func openBroker(t *testing.T, dir string) *broker.Broker {
	t.Helper()
	b, err := broker.Open(broker.Options{Dir: dir, FlushLevel: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func startManager(t *testing.T, b *broker.Broker) *Manager {
	t.Helper()
	m := New(Options{Broker: b, Logger: slog.New(slog.DiscardHandler), FeedWait: 200 * time.Millisecond})
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	return m
}

func publish(t *testing.T, b *broker.Broker, topic string, bodies ...string) []int64 {
	t.Helper()
	var ids []int64
	for _, s := range bodies {
		rec, _ := protocol.AppendRecord(nil, protocol.Record{Body: []byte(s)})
		id, err := b.Publish(context.Background(), []byte(topic), rec, 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// recv waits for the next frame a consumer is sent, with a deadline.
type recv struct {
	t    *testing.T
	c    *Consumer
	buf  []byte
	kept []protocol.QueueMessage // messages seen while waiting for a confirmation
}

func (r *recv) next(d time.Duration) (msgs []protocol.QueueMessage, confirms []protocol.QueueConfirm) {
	r.t.Helper()
	deadline := time.After(d)
	for {
		r.buf = r.c.Take(r.buf)
		for len(r.buf) >= 10 {
			var h protocol.RespHeader
			copy(h[:], r.buf)
			switch h.Code() {
			case protocol.StatusQueueMessages:
				l := int(h.FrameLen())
				ms, err := protocol.ParseQueueMessages(r.buf[10:10+l], int(r.buf[2])|int(r.buf[3])<<8)
				if err != nil {
					r.t.Fatal(err)
				}
				msgs = append(msgs, ms...)
				r.buf = r.buf[10+l:]
			case protocol.StatusQueueConfirm:
				n := int(h.JSONLen()) * protocol.QueueConfirmSize
				cs, err := protocol.ParseQueueConfirms(r.buf[10 : 10+n])
				if err != nil {
					r.t.Fatal(err)
				}
				confirms = append(confirms, cs...)
				r.buf = r.buf[10+n:]
			default:
				r.t.Fatalf("unexpected code %d", h.Code())
			}
		}
		if len(msgs)+len(confirms) > 0 {
			return msgs, confirms
		}
		select {
		case <-r.c.Wake():
		case <-r.c.Done():
			r.buf = r.c.Take(r.buf)
			if len(r.buf) == 0 {
				r.t.Fatalf("consumer ended: %v", r.c.Err())
			}
		case <-deadline:
			return nil, nil
		}
	}
}

func (r *recv) want(n int, d time.Duration) []protocol.QueueMessage {
	r.t.Helper()
	all := r.kept
	r.kept = nil
	until := time.Now().Add(d)
	for len(all) < n && time.Now().Before(until) {
		ms, _ := r.next(time.Until(until))
		all = append(all, ms...)
	}
	if len(all) < n {
		r.t.Fatalf("got %d messages, want %d", len(all), n)
	}
	r.kept = all[n:]
	return all[:n]
}

func (r *recv) confirm(d time.Duration) []protocol.QueueConfirm {
	r.t.Helper()
	until := time.Now().Add(d)
	for time.Now().Before(until) {
		ms, cs := r.next(time.Until(until))
		r.kept = append(r.kept, ms...)
		if len(cs) > 0 {
			return cs
		}
	}
	r.t.Fatal("no confirmation")
	return nil
}

func body(m protocol.QueueMessage) string {
	r, _, _ := protocol.ParseRecord(m.Record)
	return string(r.Body)
}

func TestGroupDeliverAckNakTermAndRestart(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir)
	ctx := context.Background()
	if _, err := b.CreateTopic(ctx, []byte("jobs"), 0); err != nil {
		t.Fatal(err)
	}
	m := startManager(t, b)
	qi, err := m.Create(ctx, "jobs", protocol.QueueConfig{Group: "g", From: "oldest", AckWaitMs: 1000, DeadLetter: "jobs-dead", MaxDeliver: 3})
	if err != nil {
		t.Fatal(err)
	}
	if qi.Config.MaxDeliver != 3 {
		t.Fatalf("info %+v", qi)
	}
	// The same settings again are accepted; other settings are not.
	if _, err := m.Create(ctx, "jobs", protocol.QueueConfig{Group: "g", From: "oldest", AckWaitMs: 1000, DeadLetter: "jobs-dead", MaxDeliver: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "jobs", protocol.QueueConfig{Group: "g", AckWaitMs: 400}); err == nil {
		t.Fatal("other settings accepted")
	}
	ids := publish(t, b, "jobs", "a", "b", "c", "d")
	c, err := m.Join("jobs", "g", "w1", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	r := &recv{t: t, c: c}
	got := r.want(2, 5*time.Second) // maxInFlight 2
	if got[0].EventID != ids[0] || got[1].EventID != ids[1] || got[0].Attempt != 1 {
		t.Fatalf("first deliveries %+v", got)
	}
	c.Outcomes([]protocol.QueueOutcome{{Op: protocol.QueueOpAck, EventID: ids[0]}, {Op: protocol.QueueOpNak, EventID: ids[1]}})
	cs := r.confirm(5 * time.Second)
	if len(cs) != 2 || cs[0].Result != protocol.QueueResultDone {
		t.Fatalf("confirms %+v", cs)
	}
	// b again (attempt 2) and c.
	got = r.want(2, 5*time.Second)
	seen := map[int64]uint32{}
	for _, m := range got {
		seen[m.EventID] = m.Attempt
	}
	if seen[ids[1]] != 2 || seen[ids[2]] != 1 {
		t.Fatalf("after nak: %v", seen)
	}
	// An ack twice: the second is gone.
	c.Outcomes([]protocol.QueueOutcome{{Op: protocol.QueueOpAck, EventID: ids[0]}, {Op: protocol.QueueOpTerm, EventID: ids[2]}})
	cs = r.confirm(5 * time.Second)
	if cs[0].Result != protocol.QueueResultGone || cs[1].Result != protocol.QueueResultDone {
		t.Fatalf("confirms %+v", cs)
	}
	// d arrives; c is in the dead-letter topic with its headers.
	got = r.want(1, 5*time.Second)
	if got[0].EventID != ids[3] {
		t.Fatalf("got %+v", got)
	}
	dl, err := b.Subscribe([]byte("jobs-dead"), []byte("t"), 0)
	if err != nil {
		t.Fatal(err)
	}
	buf, n, err := dl.Next(ctx, nil, 10, 5*time.Second)
	dl.Close()
	if err != nil || n != 1 {
		t.Fatalf("dead letters: %d %v", n, err)
	}
	msgs, err := protocol.ParseSubMessages(buf, n)
	if err != nil {
		t.Fatal(err)
	}
	hs := map[string]string{}
	for _, h := range msgs[0].Headers {
		hs[h.Key] = h.Value
	}
	if hs[protocol.DeadHeaderTopic] != "jobs" || hs[protocol.DeadHeaderGroup] != "g" || hs[protocol.DeadHeaderEventID] != strconv.FormatInt(ids[2], 10) ||
		hs[protocol.DeadHeaderReason] != "term" || hs[protocol.DeadHeaderAttempts] != "1" || string(msgs[0].Body) != "c" {
		t.Fatalf("dead letter %v %q", hs, msgs[0].Body)
	}

	// Restart with b (attempt 2) and d in flight: both come back, after
	// the ack wait, and a is never delivered again.
	m.Stop()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, dir)
	defer b.Close()
	m = startManager(t, b)
	defer m.Stop()
	c, err = m.Join("jobs", "g", "w2", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r = &recv{t: t, c: c}
	got = r.want(2, 5*time.Second)
	if e := time.Since(start); e < 900*time.Millisecond {
		t.Fatalf("redelivered %v after the restart, before the ack wait", e)
	}
	seen = map[int64]uint32{}
	for _, m := range got {
		seen[m.EventID] = m.Attempt
	}
	if seen[ids[1]] != 3 || seen[ids[3]] != 2 {
		t.Fatalf("after restart: %v", seen)
	}
	// b reaches max deliveries (3) when its ack wait passes.
	got = r.want(1, 5*time.Second)
	if got[0].EventID != ids[3] || got[0].Attempt != 3 {
		t.Fatalf("got %+v", got)
	}
	qs, err := m.Info("jobs", "g")
	if err != nil || len(qs) != 1 {
		t.Fatal(qs, err)
	}
	want := fmt.Sprintf("acked=1 dead=%d", 2)
	if g := fmt.Sprintf("acked=%d dead=%d", qs[0].Acked, qs[0].DeadLettered); g != want {
		t.Fatalf("info %s, want %s (%+v)", g, want, qs[0])
	}
}
