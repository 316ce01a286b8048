package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

// TestReadCommittedGate: with ReadCommitted a subscriber gets only messages
// at or below the commit point, is woken when the point moves (also while
// it waits), never sees the point go back, and has no inline delivery;
// without it every committed message is delivered at once.
func TestReadCommittedGate(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		on   bool
	}{{"on", true}, {"off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			b := openTest(t, t.TempDir(), func(o *Options) { o.ReadCommitted = tc.on; o.MaxLogSize = 300 })
			defer b.Close()
			if _, err := b.CreateTopic(ctx, []byte("t"), 0); err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for i := 0; i < 20; i++ {
				id, err := b.Publish(ctx, []byte("t"), rec(fmt.Sprintf("m%02d", i)), 1)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			s, err := b.Subscribe([]byte("t"), []byte("w"), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.SetCommitHook(func(bool) bool { return false }); got == tc.on {
				t.Fatalf("SetCommitHook = %v with ReadCommitted %v: inline delivery must be off exactly when the gate is on", got, tc.on)
			}
			// read returns what one Next hands out, and then what further
			// polls add (a frame ends at a file's end).
			read := func(wait time.Duration) []int64 {
				var got []int64
				for {
					area, n, err := s.Next(ctx, nil, 100, wait)
					if err != nil {
						t.Fatal(err)
					}
					if n == 0 {
						return got
					}
					got = append(got, subIDs(t, area, n)...)
					wait = 0
				}
			}
			if !tc.on {
				if got := read(time.Second); !equalIDs(got, ids) {
					t.Fatalf("gate off: got %v want %v", got, ids)
				}
				if b.CommitPoint() != b.LastEventID() {
					t.Fatalf("gate off: CommitPoint %d != LastEventID %d", b.CommitPoint(), b.LastEventID())
				}
				return
			}
			if got := read(0); len(got) != 0 {
				t.Fatalf("commit point 0: delivered %v", got)
			}
			b.SetCommitPoint(ids[4])
			if got := read(time.Second); !equalIDs(got, ids[:5]) {
				t.Fatalf("commit point %d: got %v want %v", ids[4], got, ids[:5])
			}
			b.SetCommitPoint(ids[2]) // going back is ignored
			if b.CommitPoint() != ids[4] {
				t.Fatalf("commit point went back to %d", b.CommitPoint())
			}
			// A waiting subscriber is woken by the move, not by a commit.
			got := make(chan []int64, 1)
			go func() { got <- read(10 * time.Second) }()
			smsstest.WaitFor(t, 5*time.Second, "a subscriber waiting on the commit point", b.commit.waiting)
			start := time.Now()
			b.SetCommitPoint(ids[19])
			select {
			case g := <-got:
				if !equalIDs(g, ids[5:]) {
					t.Fatalf("after the move: got %v want %v", g, ids[5:])
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Fatalf("woken after %v", d)
				}
			case <-time.After(8 * time.Second):
				t.Fatal("a subscriber waiting on the commit point was not woken by its move")
			}
		})
	}
}

// A delayed message that fires is a write like a publish: with
// ReadCommitted its subscribers get it only once the commit point passes
// the eventId it fired at.
func TestReadCommittedGateDelayFiring(t *testing.T) {
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(o *Options) { o.ReadCommitted = true })
	defer b.Close()
	if _, err := b.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishDelay(ctx, []byte("t"), rec("later"), 1, 1000); err != nil {
		t.Fatal(err)
	}
	due, err := b.meta.DueDelays(time.Now().UnixMilli()+5000, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due delays %v %v", due, err)
	}
	b.SetCommitPoint(b.LastEventID()) // the create and the delay itself
	fired, err := b.ApplyDelay(ctx, due[0].Topic, due[0].Value)
	if err != nil || fired == 0 {
		t.Fatalf("fire: %d %v", fired, err)
	}
	s, err := b.Subscribe([]byte("t"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, n, err := s.Next(ctx, nil, 10, 200*time.Millisecond); err != nil || n != 0 {
		t.Fatalf("before the commit point passed the fired delay: %d messages (%v), want none", n, err)
	}
	b.SetCommitPoint(fired)
	area, n, err := s.Next(ctx, nil, 10, 5*time.Second)
	if err != nil || n != 1 || !equalIDs(subIDs(t, area, n), []int64{fired}) {
		t.Fatalf("after the commit point passed it: %d messages (%v), want the fired delay %d", n, err, fired)
	}
}
