package broker

import (
	"context"
	"sync"
	"testing"
)

// hookCall is one call of a commit hook: whether it was told it may serve
// inline, and what the topic's committed end was then.
type hookCall struct {
	inline bool
	seen   int64 // messages the subscription could poll at the call
}

// The commit hook contract (subinline.go): after every commit of a topic,
// each registered hook is called once, on the committing goroutine, with
// the commit already visible to Next; only Options.InlineDeliveries of them
// (those that claim) are told to serve inline; hooks of other topics are
// not called; Close unregisters; a negative option turns hooks off.
func TestCommitHooks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inline int
		hooks  int
		// want: per hook, inline flags of its calls for one publish
		wantInline []bool
	}{
		{"budget 2 of 3", 2, 3, []bool{true, true, false}},
		{"default budget", 0, 5, []bool{true, true, true, true, false}},
		{"off", -1, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := openTest(t, t.TempDir(), func(o *Options) { o.InlineDeliveries = tc.inline; o.Logger = quietLog })
			defer b.Close()
			for _, name := range []string{"a", "other"} {
				if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			calls := make([][]hookCall, tc.hooks)
			subs := make([]*Subscription, tc.hooks)
			for i := range subs {
				s, err := b.Subscribe([]byte("a"), []byte{'w', byte('0' + i)}, 0)
				if err != nil {
					t.Fatal(err)
				}
				subs[i] = s
				ok := s.SetCommitHook(func(inline bool) bool {
					// The commit is visible to the subscription already.
					_, n, err := s.Next(ctx, nil, 255, 0)
					if err != nil {
						t.Errorf("hook %d: Next: %v", i, err)
					}
					mu.Lock()
					calls[i] = append(calls[i], hookCall{inline: inline, seen: int64(n)})
					mu.Unlock()
					return inline
				})
				if ok != (tc.wantInline != nil) {
					t.Fatalf("SetCommitHook = %v with InlineDeliveries %d", ok, tc.inline)
				}
			}
			if _, err := b.Publish(ctx, []byte("a"), rec("x"), 1); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Publish(ctx, []byte("other"), rec("y"), 1); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			for i, cs := range calls {
				switch {
				case tc.wantInline == nil && len(cs) != 0:
					t.Fatalf("hook %d called %d times with inline delivery off", i, len(cs))
				case tc.wantInline == nil:
				case len(cs) != 1:
					t.Fatalf("hook %d called %d times for one commit of its topic, want 1", i, len(cs))
				case cs[0].inline != tc.wantInline[i] || cs[0].seen != 1:
					t.Fatalf("hook %d: %+v, want inline %v and the message visible", i, cs[0], tc.wantInline[i])
				}
			}
			mu.Unlock()
			for _, s := range subs {
				s.Close()
			}
			if h := b.topics["a"].hooks.Load(); h != nil {
				t.Fatalf("%d hooks left after Close", len(*h))
			}
			if _, err := b.Publish(ctx, []byte("a"), rec("z"), 1); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for i, cs := range calls {
				if tc.wantInline != nil && len(cs) != 1 {
					t.Fatalf("hook %d called after Close (%d calls)", i, len(cs))
				}
			}
		})
	}
}

// On a slave the applier that commits replicated blocks calls the hooks,
// as a publisher does on a master.
func TestCommitHooksOnSlave(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, t.TempDir(), func(o *Options) { o.Logger = quietLog })
	defer m.Close()
	if _, err := m.CreateTopic(ctx, []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, t.TempDir(), func(o *Options) { o.Slave = true; o.Logger = quietLog })
	defer s.Close()
	replicateAll(t, m, s, 0)
	sub, err := s.Subscribe([]byte("a"), []byte("w"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var mu sync.Mutex
	var seen []int
	if !sub.SetCommitHook(func(inline bool) bool {
		_, n, err := sub.Next(ctx, nil, 255, 0)
		if err != nil {
			t.Errorf("Next: %v", err)
		}
		mu.Lock()
		seen = append(seen, n)
		mu.Unlock()
		return inline
	}) {
		t.Fatal("SetCommitHook refused on a slave")
	}
	after := s.LastEventID()
	for i := range 3 {
		if _, err := m.Publish(ctx, []byte("a"), rec(string(rune('x'+i))), 1); err != nil {
			t.Fatal(err)
		}
	}
	replicateAll(t, m, s, after)
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range seen {
		total += n
	}
	if len(seen) == 0 || total != 3 {
		t.Fatalf("hook calls %v: want the 3 replicated messages seen by the hooks", seen)
	}
}
