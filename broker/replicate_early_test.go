package broker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// heldSync holds the binlog's fsyncs, while armed, until released: a slow
// disk the test controls (a faults hook).
type heldSync struct {
	mu      sync.Mutex
	armed   bool
	entered chan struct{} // gets a value when an armed fsync starts
	release chan struct{} // closed to let it finish
}

func (h *heldSync) beforeSync(path string) {
	h.mu.Lock()
	armed := h.armed && strings.Contains(path, "/binlog/")
	h.mu.Unlock()
	if armed {
		h.entered <- struct{}{}
		<-h.release
	}
}

// TestReplicateBeforeSync: at flushLevel 2 with ReplicateBeforeSync a
// replica stream gets a group's binlog block while the master's fsync of
// it is still running, but the publish is answered, the topic's readers
// see it, LastEventID moves and the durable hook is called only once the
// fsync returned. Without the option the stream gets the block only after
// the fsync (the order of every flushLevel before it).
func TestReplicateBeforeSync(t *testing.T) {
	for _, early := range []bool{true, false} {
		t.Run(map[bool]string{true: "early", false: "after sync"}[early], func(t *testing.T) {
			ctx := context.Background()
			h := &heldSync{entered: make(chan struct{}, 1), release: make(chan struct{})}
			f := &faults{beforeSync: h.beforeSync}
			b := openTest(t, t.TempDir(), func(o *Options) {
				o.FlushLevel, o.ReplicateBeforeSync, o.OpenFile = 2, early, f.open
			})
			defer b.Close()
			// Released before Close on every path: a failed check must not
			// leave the writer in the held fsync.
			release := sync.OnceFunc(func() {
				h.mu.Lock()
				h.armed = false
				h.mu.Unlock()
				close(h.release)
			})
			defer release()
			var hookMu sync.Mutex
			var hooked []int64
			b.SetDurableHook(func(id int64) { hookMu.Lock(); hooked = append(hooked, id); hookMu.Unlock() })
			lastHooked := func() int64 {
				hookMu.Lock()
				defer hookMu.Unlock()
				if len(hooked) == 0 {
					return 0
				}
				return hooked[len(hooked)-1]
			}
			if _, err := b.CreateTopic(ctx, []byte("t"), 0); err != nil {
				t.Fatal(err)
			}
			before := b.LastEventID()
			if lastHooked() != before {
				t.Fatalf("durable hook at %d after the create, LastEventID %d", lastHooked(), before)
			}
			st, err := b.ReplicaStream(0)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			sub, err := b.Subscribe([]byte("t"), []byte("w"), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if n, err := st.Next(ctx, 100, 0, func([]byte) error { return nil }); err != nil || n != 1 {
				t.Fatalf("the create's block: %d, %v", n, err)
			}
			h.mu.Lock()
			h.armed = true
			h.mu.Unlock()
			published := make(chan error, 1)
			go func() {
				_, err := b.Publish(ctx, []byte("t"), rec("m"), 1)
				published <- err
			}()
			<-h.entered // the group's fsync is running
			got := 0
			// The stream's own wait bounds the look: with the option the
			// block is there at once; without it, never while the fsync
			// is held.
			wait := 100 * time.Millisecond
			if early {
				wait = 10 * time.Second
			}
			if _, err := st.Next(ctx, 100, wait, func([]byte) error { got++; return nil }); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-published:
				t.Fatalf("the publish was answered (%v) before its fsync returned", err)
			default:
			}
			if want := map[bool]int{true: 1, false: 0}[early]; got != want {
				t.Fatalf("%d blocks streamed during the fsync, want %d", got, want)
			}
			if b.LastEventID() != before || lastHooked() != before {
				t.Fatalf("during the fsync: LastEventID %d, durable hook at %d, want both %d", b.LastEventID(), lastHooked(), before)
			}
			if _, n, err := sub.Next(ctx, nil, 10, 50*time.Millisecond); err != nil || n != 0 {
				t.Fatalf("a topic reader got %d messages (%v) during the group's fsync", n, err)
			}
			release()
			if err := <-published; err != nil {
				t.Fatal(err)
			}
			if b.LastEventID() != before+1 || lastHooked() != before+1 {
				t.Fatalf("after the fsync: LastEventID %d, durable hook at %d, want both %d", b.LastEventID(), lastHooked(), before+1)
			}
			if _, n, err := sub.Next(ctx, nil, 10, 10*time.Second); err != nil || n != 1 {
				t.Fatalf("after the fsync a topic reader got %d messages, %v", n, err)
			}
			if !early {
				if n, err := st.Next(ctx, 100, 10*time.Second, func([]byte) error { return nil }); err != nil || n != 1 {
					t.Fatalf("after the fsync the stream got %d blocks, %v", n, err)
				}
			}
		})
	}
}
