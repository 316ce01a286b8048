package dlock

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/client/internal/testserver"
	"github.com/smssmq/smss/internal/smsstest"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// memStore is an in-process GroupStore whose leases the test can revoke
// and whose saves it can make fail.
type memStore struct {
	mu       sync.Mutex
	holder   *memLease
	progress int64
	has      bool
	failSave int // saves to fail with a store error before the next success
	acquired int
}

type memLease struct {
	s    *memStore
	once sync.Once
	lost chan struct{}
}

func (l *memLease) Lost() <-chan struct{} { return l.lost }

func (l *memLease) Release(context.Context) error {
	l.s.mu.Lock()
	if l.s.holder == l {
		l.s.holder = nil
	}
	l.s.mu.Unlock()
	l.once.Do(func() { close(l.lost) })
	return nil
}

func (s *memStore) TryAcquire(context.Context) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder != nil {
		return nil, ErrNotAcquired
	}
	s.holder = &memLease{s: s, lost: make(chan struct{})}
	s.acquired++
	return s.holder, nil
}

// revoke takes the lock away from its holder, as an expiry would.
func (s *memStore) revoke() {
	s.mu.Lock()
	h := s.holder
	s.holder = nil
	s.mu.Unlock()
	if h != nil {
		h.once.Do(func() { close(h.lost) })
	}
}

func (s *memStore) Progress(context.Context) (int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.progress, s.has, nil
}

func (s *memStore) SaveProgress(_ context.Context, l Lease, id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder != l {
		return ErrLeaseLost
	}
	if s.failSave > 0 {
		s.failSave--
		return errors.New("store unavailable")
	}
	if !s.has || id > s.progress {
		s.progress, s.has = id, true
	}
	return nil
}

func (s *memStore) get() (progress int64, acquired int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.progress, s.acquired
}

func TestGroupSubscriberSavesBeforeAckAndSurvivesLoss(t *testing.T) {
	_, ctx, c, publish := groupServer(t)
	store := &memStore{failSave: 2}
	var mu sync.Mutex
	var seen, acked []int64
	block := make(chan struct{})
	g, err := NewGroupSubscriber(c, GroupConfig{Store: store, RetryInterval: 10 * time.Millisecond,
		Sub: client.SubscriberConfig{Topic: "t", Who: "g", MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
			Handler: func(hctx context.Context, b []client.Delivery) client.AckAction {
				mu.Lock()
				seen = append(seen, b[0].EventID)
				mu.Unlock()
				if b[0].EventID == 5 {
					// Held while the test revokes the lease: the batch
					// must then be neither saved nor acknowledged.
					<-block
				}
				return client.Ack
			},
			AfterAck: func(id int64) {
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()

	publish(0, 3) // 2..4; two failing saves are retried before 2 is acked
	smsstest.WaitFor(t, 20*time.Second, "2..4 saved", func() bool { p, _ := store.get(); return p == 4 })
	publish(3, 6) // 5..7
	smsstest.WaitFor(t, 20*time.Second, "5 in the handler", func() bool { mu.Lock(); defer mu.Unlock(); return slices.Contains(seen, 5) })
	store.revoke()
	close(block)
	// 7 is saved before it is acknowledged: stopping as soon as the save
	// shows could cancel the subscription before the ack and AfterAck.
	smsstest.WaitFor(t, 20*time.Second, "re-acquired, 7 saved and acknowledged", func() bool {
		p, n := store.get()
		mu.Lock()
		defer mu.Unlock()
		return p == 7 && n == 2 && len(acked) > 0 && acked[len(acked)-1] == 7
	})
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []int64{2, 3, 4, 5, 5, 6, 7}) {
		t.Errorf("handled %v: 5, unsaved when the lease was lost, must come again and nothing else", seen)
	}
	if !slices.Equal(acked, []int64{2, 3, 4, 5, 6, 7}) {
		t.Errorf("acknowledged %v", acked)
	}
}

// ackFailConn fails the first ack (a 2-byte write) after fail is armed,
// closing the connection: the batch was handled and saved, but the server
// never hears of it and the subscriber does not advance.
type ackFailConn struct {
	net.Conn
	fail *atomic.Bool
}

func (c ackFailConn) Write(p []byte) (int, error) {
	if len(p) == 2 && c.fail.CompareAndSwap(true, false) {
		c.Conn.Close()
		return 0, errors.New("ack write failed (test)")
	}
	return c.Conn.Write(p)
}

// A batch saved whose ack could not be sent is handed again by the
// subscriber, which resumes after the last eventId it acknowledged; the
// group saved it, so its handler must not see it again: each message is
// handled once and the progress goes on from it.
func TestGroupSubscriberSkipsSavedBatchAfterFailedAck(t *testing.T) {
	_, ctx, c, publish := groupServer(t)
	var fail atomic.Bool
	dialer := &net.Dialer{}
	store := &memStore{}
	var mu sync.Mutex
	var seen []string // bodies: the cursor topic's own writes take eventIds too
	armed := false
	g, err := NewGroupSubscriber(c, GroupConfig{Store: store, RetryInterval: 10 * time.Millisecond,
		Sub: client.SubscriberConfig{Topic: "t", Who: "g", MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := dialer.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return ackFailConn{Conn: nc, fail: &fail}, nil
			},
			Handler: func(hctx context.Context, b []client.Delivery) client.AckAction {
				mu.Lock()
				defer mu.Unlock()
				for _, d := range b {
					seen = append(seen, string(d.Body))
					if string(d.Body) == "1" && !armed {
						armed = true
						fail.Store(true) // its ack fails
					}
				}
				return client.Ack
			}}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	publish(0, 3)
	smsstest.WaitFor(t, 20*time.Second, "0..2 handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= 3 })
	publish(3, 5)
	smsstest.WaitFor(t, 20*time.Second, "0..4 handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= 5 })
	smsstest.WaitFor(t, 20*time.Second, "the last saved", func() bool {
		mu.Lock()
		defer mu.Unlock()
		p, _ := store.get()
		return p > 0 && seen[len(seen)-1] == "4"
	})
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if fail.Load() {
		t.Fatal("no ack failed")
	}
	if _, n := store.get(); n != 1 {
		t.Errorf("the lock was acquired %d times; the failed ack must not cost it", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []string{"0", "1", "2", "3", "4"}) {
		t.Errorf("handled %v, want 0..4 once each (1 was saved before its ack failed)", seen)
	}
}

func TestGroupConfigValidation(t *testing.T) {
	h := func(context.Context, []client.Delivery) client.AckAction { return client.Ack }
	for _, cfg := range []GroupConfig{
		{Sub: client.SubscriberConfig{Topic: "t", Handler: h}},
		{Store: &memStore{}, Sub: client.SubscriberConfig{Handler: h}},
		{Store: &memStore{}, Sub: client.SubscriberConfig{Topic: "t"}},
		{Store: &memStore{}, Sub: client.SubscriberConfig{Topic: "t", Handler: h, From: -1}},
		{ServerProgress: true, Sub: client.SubscriberConfig{Topic: "t", Handler: h}},
	} {
		if _, err := NewGroupSubscriber(nil, cfg); err == nil {
			t.Errorf("accepted %+v", cfg)
		}
	}
}

// With ServerProgress the lock store holds only the lease: a new holder
// resumes from the server's stored position, nothing is skipped, and the
// store's progress is never written.
func TestGroupSubscriberServerProgress(t *testing.T) {
	srv, ctx, c, publish := groupServer(t)
	store := &memStore{}
	var mu sync.Mutex
	var seen []string // bodies: the cursor topic's own writes take eventIds too
	var acked []int64
	g, err := NewGroupSubscriber(c, GroupConfig{Lock: store, ServerProgress: true, RetryInterval: 10 * time.Millisecond,
		Sub: client.SubscriberConfig{Topic: "t", Who: "g", MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
			Handler: func(hctx context.Context, b []client.Delivery) client.AckAction {
				mu.Lock()
				for _, d := range b {
					seen = append(seen, string(d.Body))
				}
				mu.Unlock()
				return client.Ack
			},
			AfterAck: func(id int64) {
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	handled := func(n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= n && len(acked) >= n }
	}
	publish(0, 3)
	smsstest.WaitFor(t, 20*time.Second, "3 acknowledged", handled(3))
	store.revoke()
	smsstest.WaitFor(t, 20*time.Second, "re-acquired", func() bool { _, n := store.get(); return n == 2 })
	publish(3, 6)
	defer func() {
		if t.Failed() {
			t.Log(srv.Log())
		}
	}()
	smsstest.WaitFor(t, 20*time.Second, "6 acknowledged, 3 by the new holder", handled(6))
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []string{"0", "1", "2", "3", "4", "5"}) {
		t.Errorf("handled %v, want 0..5 once each", seen)
	}
	if p, _ := store.get(); p != 0 || store.has {
		t.Errorf("the lock store got progress %d", p)
	}
}

// groupServer is a server with topic t, a client of it and publish, which
// publishes the messages "from".."to-1"; everything is closed at the end.
func groupServer(t *testing.T) (*testserver.Server, context.Context, *client.Client, func(from, to int)) {
	t.Helper()
	srv := testserver.Start(t, "timeout:\n  server:\n    alive: 200\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c, err := client.Dial(ctx, srv.Addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if err := c.Publish(ctx, "t", client.NewMessage([]byte(strconv.Itoa(i)))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return srv, ctx, c, publish
}
