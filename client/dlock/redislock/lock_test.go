package redislock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/client/dlock"
	"github.com/smssmq/smss/client/internal/testserver"
	"github.com/smssmq/smss/internal/smsstest"
)

func TestMain(m *testing.M) { testserver.Main(m) }

func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := newRedis(addr)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestLockExclusiveRenewedReleased(t *testing.T) {
	rs := testserver.StartRedis(t)
	rdb := redisClient(t, rs.Addr)
	ctx := ctxT(t, 30*time.Second)
	// Generous for loaded CI machines: the lease is lost 2/3 TTL after the
	// last renewal that got through, so a renewal (every TTL/3) may take up
	// to TTL/3, and each acquire attempt has TTL/3 too.
	const ttl = 2 * time.Second
	a := New(rdb, "k", Options{TTL: ttl})
	b := New(rdb, "k", Options{TTL: ttl})

	la, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second acquire: %v", err)
	}
	pttl := rdb.PTTL(ctx, "k").Val()
	if pttl <= 0 || pttl > ttl {
		t.Errorf("key TTL %v, want <= %v", pttl, ttl)
	}
	// Renewal keeps the lock well past its TTL.
	end := time.Now().Add(2 * ttl)
	for time.Now().Before(end) {
		if closed(la.Lost()) {
			t.Fatal("lease lost while Redis is healthy")
		}
		if _, err := b.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("acquired a renewed lock: %v", err)
		}
		time.Sleep(ttl / 10)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !closed(la.Lost()) {
		t.Error("Lost not closed after Release")
	}
	if n := rdb.Exists(ctx, "k").Val(); n != 0 {
		t.Error("key still present after Release")
	}
	lb, err := b.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	// Releasing a lease that no longer owns the key must not delete the
	// new owner's key.
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, "k").Val(); v != lb.(*lease).token {
		t.Errorf("key holds %q after a stale release", v)
	}
	lb.Release(ctx)
}

func TestLeaseLostWhenTakenOver(t *testing.T) {
	rs := testserver.StartRedis(t)
	rdb := redisClient(t, rs.Addr)
	ctx := ctxT(t, 30*time.Second)
	// The next renewal, at most TTL/3 after the overwrite, is refused; the
	// rest of the TTL is slack for a loaded machine.
	const ttl = 1500 * time.Millisecond
	l := New(rdb, "k", Options{TTL: ttl})
	le, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(ctx)
	rdb.Set(ctx, "k", "someone else", 0)
	select {
	case <-le.Lost():
	case <-time.After(ttl):
		t.Fatal("lease not lost within a TTL after the key was overwritten")
	}
	if v := rdb.Get(ctx, "k").Val(); v != "someone else" {
		t.Errorf("the lost lease touched the new owner's key: %q", v)
	}
}

// With Redis gone the holder must learn it has to stop before the key could
// have expired, and never panic.
func TestLeaseLostBeforeExpiryWhenRedisDies(t *testing.T) {
	for _, mode := range []string{"killed", "paused"} {
		t.Run(mode, func(t *testing.T) {
			rs := testserver.StartRedis(t)
			spy := newGrantSpy(redisClient(t, rs.Addr))
			ctx := ctxT(t, 30*time.Second)
			// Lost comes 2/3 TTL after the last renewal was sent; the last
			// third (500 ms) is the slack a loaded machine gets for the
			// timer and for this goroutine to see it.
			const ttl = 1500 * time.Millisecond
			l := New(spy, "k", Options{TTL: ttl})
			le, err := l.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Wait for one renewal so the outage starts mid-lease.
			acquired := spy.lastGrant()
			smsstest.WaitFor(t, 5*time.Second, "a renewal", func() bool { return spy.lastGrant().After(acquired) })
			if mode == "killed" {
				rs.Kill()
			} else {
				rs.Pause()
				defer rs.Resume()
			}
			select {
			case <-le.Lost():
			case <-time.After(2 * ttl):
				t.Fatal("lease not lost with Redis down")
			}
			// Redis applied the last renewal after it was sent: the key
			// expires no sooner than a TTL after that.
			if since := time.Since(spy.lastGrant()); since >= ttl {
				t.Errorf("lost signalled %v after the last renewal was sent, TTL is %v", since, ttl)
			}
			if _, err := l.TryAcquire(ctx); err == nil || errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("acquire with Redis down: %v, want a store error", err)
			}
			rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			if err := le.Release(rctx); err == nil {
				t.Error("release with Redis down reported success")
			}
			cancel()
			if mode == "killed" {
				rs.Start()
			} else {
				rs.Resume()
			}
			smsstest.WaitFor(t, 10*time.Second, "lock available again", func() bool {
				le2, err := l.TryAcquire(ctx)
				if err != nil {
					return false
				}
				le2.Release(ctx)
				return true
			})
		})
	}
}

func TestProgressFencedAndMonotonic(t *testing.T) {
	rs := testserver.StartRedis(t)
	rdb := redisClient(t, rs.Addr)
	ctx := ctxT(t, 30*time.Second)
	// The TTL plays no part here; a long one keeps a loaded machine's
	// pauses from costing the lease mid-test.
	g := NewGroup(rdb, "order", "billing", Options{TTL: 30 * time.Second})
	if g.Key() != "smss:group:{5:order:billing}:lock" || g.ProgressKey() != "smss:group:{5:order:billing}:progress" {
		t.Errorf("keys %q %q", g.Key(), g.ProgressKey())
	}
	if _, ok, err := g.Progress(ctx); ok || err != nil {
		t.Fatalf("progress of a new group: %v %v", ok, err)
	}
	le, err := g.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ save, want int64 }{{5, 5}, {3, 5}, {10, 10}, {9, 10}, {100, 100}, {1 << 60, 1 << 60}, {1<<60 - 1, 1 << 60}} {
		if err := g.SaveProgress(ctx, le, tc.save); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := g.Progress(ctx); !ok || err != nil || p != tc.want {
			t.Errorf("after saving %d: %d %v %v, want %d", tc.save, p, ok, err, tc.want)
		}
	}
	other := NewGroup(rdb, "order", "billing", Options{TTL: 30 * time.Second})
	if err := other.SaveProgress(ctx, le, 1<<61); err == nil {
		t.Error("saved with a lease of another Group value")
	}
	le.Release(ctx)
	if err := g.SaveProgress(ctx, le, 1<<61); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("save after release: %v", err)
	}
	// Names that would collide if joined naively stay apart.
	a, b := NewGroup(rdb, "a:b", "c", Options{}), NewGroup(rdb, "a", "b:c", Options{})
	if a.Key() == b.Key() {
		t.Errorf("groups (a:b, c) and (a, b:c) share key %q", a.Key())
	}
}

func TestConcurrentAcquireOneWinner(t *testing.T) {
	rs := testserver.StartRedis(t)
	rdb := redisClient(t, rs.Addr)
	ctx := ctxT(t, 30*time.Second)
	var mu sync.Mutex
	var winners []dlock.Lease
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A long TTL gives each attempt TTL/3 = 10 s: twenty first
			// dials at once on a loaded machine can take a while.
			le, err := New(rdb, "race", Options{TTL: 30 * time.Second}).TryAcquire(ctx)
			if err == nil {
				mu.Lock()
				winners = append(winners, le)
				mu.Unlock()
			} else if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d winners", len(winners))
	}
	winners[0].Release(ctx)
}

// The group's progress with its epoch: a lower eventId of the same epoch
// is ignored, of another epoch (a changed history) it replaces the stored
// one; a progress saved without an epoch since leaves the epoch unknown.
func TestPositionWithEpoch(t *testing.T) {
	rs := testserver.StartRedis(t)
	rdb := redisClient(t, rs.Addr)
	ctx := ctxT(t, 30*time.Second)
	g := NewGroup(rdb, "order", "billing", Options{TTL: 30 * time.Second})
	le, err := g.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(ctx)
	for _, tc := range []struct {
		name      string
		save      client.Position
		plain     bool // SaveProgress, as a client without epochs
		want      client.Position
		wantKnown bool
	}{
		{"first", client.Position{EventID: 80, Epoch: 0, Start: 0}, false, client.Position{EventID: 80}, true},
		{"higher", client.Position{EventID: 90, Epoch: 0, Start: 0}, false, client.Position{EventID: 90}, true},
		{"lower, same epoch: ignored", client.Position{EventID: 85, Epoch: 0, Start: 0}, false, client.Position{EventID: 90}, true},
		{"lower, another epoch: the history changed", client.Position{EventID: 60, Epoch: 1, Start: 52}, false, client.Position{EventID: 60, Epoch: 1, Start: 52}, true},
		{"higher again", client.Position{EventID: 70, Epoch: 1, Start: 52}, false, client.Position{EventID: 70, Epoch: 1, Start: 52}, true},
		{"saved without an epoch", client.Position{EventID: 75}, true, client.Position{EventID: 75}, false},
	} {
		if tc.plain {
			err = g.SaveProgress(ctx, le, tc.save.EventID)
		} else {
			err = g.SavePosition(ctx, le, tc.save)
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, known, ok, err := g.Position(ctx)
		if err != nil || !ok || known != tc.wantKnown || got.EventID != tc.want.EventID || (known && got != tc.want) {
			t.Fatalf("%s: Position() = %+v known %v ok %v %v, want %+v known %v", tc.name, got, known, ok, err, tc.want, tc.wantKnown)
		}
	}
	if p, ok, err := g.Progress(ctx); err != nil || !ok || p != 75 {
		t.Fatalf("the progress key as an older client reads it: %d %v %v", p, ok, err)
	}
}
