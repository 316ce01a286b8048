package e2e

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	smss "github.com/smssmq/smss/client"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// followSub is a consumer with a stored position (sub from -1) that
// follows the master across failovers: whenever its connection fails or a
// node refuses it, it subscribes again, at whatever address the load
// currently writes to, from the position the cluster stored for it.
//
// A stored position is at least once across a failover: acknowledgements
// the old master had not replicated yet are redelivered by the new one.
// The consumer skips those as a careful client does, by eventId: a
// message it is handed at or below the last eventId it acknowledged. That
// is safe only because delivery is read-committed (what a node hands out
// is in every later history, at the same eventId), so the consumer also
// checks that a redelivered message has the eventId it had before: a
// changed history fails the test.
type followSub struct {
	topic, who string
	addr       func() string

	mu      sync.Mutex
	got     map[string]int   // body → times handed above the last acknowledged eventId
	ids     map[string]int64 // body → the eventId it was handed with
	acked   int64            // the last eventId acknowledged
	changed []string         // bodies redelivered with another eventId

	resubscribed, redelivered atomic.Int64
	stop                      chan struct{}
	done                      chan struct{}
}

func startFollowSub(addr func() string, topic, who string) *followSub {
	s := &followSub{topic: topic, who: who, addr: addr, got: map[string]int{}, ids: map[string]int64{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *followSub) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *followSub) run() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		s.session()
		s.resubscribed.Add(1)
		select {
		case <-s.stop:
			return
		case <-time.After(100 * time.Millisecond): // resubscribe backoff
		}
	}
}

// session subscribes once and consumes until anything fails.
func (s *followSub) session() {
	nc, err := net.DialTimeout("tcp", s.addr(), time.Second)
	if err != nil {
		return
	}
	defer nc.Close()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-s.stop:
			nc.Close()
		case <-stopped:
		}
	}()
	c := &client{c: nc, r: bufio.NewReader(nc)}
	if err := c.sub(s.topic, s.who, -1, 10, 5*time.Second); err != nil {
		return
	}
	for {
		// A frozen or cut-off node sends nothing: give it up after a
		// while and ask the current master.
		u, err := c.next(3 * time.Second)
		if err != nil || u.code == protocol.StatusError || u.code == protocol.StatusSubEnd {
			return
		}
		if u.code != protocol.StatusOK {
			continue
		}
		s.mu.Lock()
		for _, m := range u.msgs {
			b := string(m.Record.Body)
			if id, seen := s.ids[b]; seen && id != m.EventID {
				s.changed = append(s.changed, b)
			}
			s.ids[b] = m.EventID
			if m.EventID <= s.acked {
				s.redelivered.Add(1)
				continue
			}
			s.got[b]++
		}
		if n := len(u.msgs); n > 0 {
			s.acked = max(s.acked, u.msgs[n-1].EventID)
		}
		s.mu.Unlock()
		if err := c.ack(0); err != nil {
			return
		}
	}
}

// snapshot returns a copy of what it was handed.
func (s *followSub) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.got))
	for b, n := range s.got {
		out[b] = n
	}
	return out
}

// historyChanged returns the bodies redelivered with another eventId.
func (s *followSub) historyChanged() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.changed...)
}

// clientSub is the Go client's Subscriber given every node's address, as
// an application runs it: it keeps its position itself (LastAcked with its
// epoch), or with resume starts from the position the server stored for it
// and keeps its own from its first acknowledgement on (within one Run);
// finds the master or an in-sync slave of the current epoch; and counts
// every message its handler is handed.
type clientSub struct {
	topic  string
	name   string
	sub    *smss.Subscriber
	cancel context.CancelFunc
	done   chan error

	mu      sync.Mutex
	got     map[string]int
	changes int
}

func startClientSub(t *testing.T, addrs []string, topic, who string, resume bool) *clientSub {
	t.Helper()
	cs := &clientSub{topic: topic, name: "the client's subscriber", got: map[string]int{}, done: make(chan error, 1)}
	if resume {
		cs.name = "the client's resuming subscriber"
	}
	sub, err := smss.NewSubscriber("", smss.SubscriberConfig{Topic: topic, Who: who, Addrs: addrs, BatchSize: 10, Resume: resume,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, IdleTimeout: 3 * time.Second,
		DialTimeout: time.Second, ProbeTimeout: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handler: func(_ context.Context, batch []smss.Delivery) smss.AckAction {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			for _, d := range batch {
				cs.got[string(d.Body)]++
			}
			return smss.Ack
		},
		OnHistoryChange: func(smss.HistoryChange) {
			cs.mu.Lock()
			cs.changes++
			cs.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cs.sub, cs.cancel = sub, cancel
	go func() { cs.done <- sub.Run(ctx) }()
	return cs
}

func (cs *clientSub) close() {
	cs.cancel()
	<-cs.done
}

func (cs *clientSub) snapshot() (map[string]int, int) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make(map[string]int, len(cs.got))
	for b, n := range cs.got {
		out[b] = n
	}
	return out, cs.changes
}

// heldBodies is the set of message bodies of topic in the history of the
// master whose data is dataDir.
func heldBodies(t *testing.T, dataDir, topic string) map[string]bool {
	t.Helper()
	held := map[string]bool{}
	for _, blk := range readStore(t, dataDir, []string{topic}).topics[topic] {
		held[bodyOf(t, blk.Record)] = true
	}
	return held
}

// awaitHanded waits up to 30 s until a consumer was handed every body of
// held (got reports how often it was handed each); it returns, sorted, the
// ones still missing then (none when all came).
func awaitHanded(held map[string]bool, got func() map[string]int) []string {
	var missing []string
	if smsstest.Poll(30*time.Second, func() bool {
		g := got()
		missing = missing[:0]
		for b := range held {
			if g[b] == 0 {
				missing = append(missing, b)
			}
		}
		return len(missing) == 0
	}) {
		return nil
	}
	sort.Strings(missing)
	return missing
}
