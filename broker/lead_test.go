package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

// countBinlogWrites makes every binlog write count in *n, the first one
// hanging until release is called, and, with fail, the second one fail.
func countBinlogWrites(f *faults, fail bool, n *int) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	f.set(func(p string) bool { // runs under f.mu
		if !strings.Contains(p, "/binlog/") {
			return false
		}
		*n++
		switch {
		case *n == 1:
			close(in)
			<-out
		case *n == 2 && fail:
			return true
		}
		return false
	}, nil)
	return in, func() { close(out) }
}

// Publishes that queue while a leader writes are written as one group by
// the first of them, which the leader hands the token to; each is answered
// with its own eventId in queue order, or, when that group's write fails,
// with the error: never OK for an unwritten message.
func TestLeaderHandsOverQueuedGroup(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("groupFails=%v", fail), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			f := &faults{}
			b := openTest(t, dir, func(o *Options) { o.OpenFile = f.open; o.Logger = quietLog })
			if _, err := b.CreateTopic(ctx, []byte("a"), 0); err != nil {
				t.Fatal(err)
			}
			writes := 0
			entered, release := countBinlogWrites(f, fail, &writes)
			held := make(chan error, 1)
			var heldID int64
			go func() {
				var err error
				heldID, err = b.Publish(ctx, []byte("a"), rec("held"), 1)
				held <- err
			}()
			<-entered
			const n = 7
			ids, errs := make([]int64, n), make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				// Queued one after another, so their queue order is i.
				wg.Add(1)
				go func() {
					defer wg.Done()
					ids[i], errs[i] = b.Publish(ctx, []byte("a"), rec(fmt.Sprint("m", i)), 1)
				}()
				waitQueued(t, b, i+1)
			}
			release()
			if err := <-held; err != nil {
				t.Fatalf("held publish: %v", err)
			}
			wg.Wait()
			f.mu.Lock()
			got := writes
			f.mu.Unlock()
			if got != 2 {
				t.Errorf("%d binlog writes, want 2: the held one and one group of %d", got, n)
			}
			for i := range n {
				switch {
				case fail && (errs[i] == nil || ids[i] != 0):
					t.Errorf("publish %d of the failed group: eventId %d, err %v; want an error", i, ids[i], errs[i])
				case !fail && (errs[i] != nil || ids[i] != heldID+1+int64(i)):
					t.Errorf("publish %d: eventId %d, err %v; want eventId %d", i, ids[i], errs[i], heldID+1+int64(i))
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			_, recs := readTopic(t, dir, "a")
			want := "held"
			if !fail {
				want += ",m0,m1,m2,m3,m4,m5,m6"
			}
			if got := strings.Join(bodiesOf(recs), ","); got != want {
				t.Errorf("topic holds %s, want %s", got, want)
			}
		})
	}
}

// worker.buffSize bounds the queue: a submitter that finds it full waits
// for room until its context ends, and Close answers a waiting one with
// ErrClosed while everything already queued is still written.
func TestLeaderQueueBound(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := &faults{}
	b := openTest(t, dir, func(o *Options) { o.OpenFile = f.open; o.BuffSize = 1; o.Logger = quietLog })
	if _, err := b.CreateTopic(ctx, []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	writes := 0
	entered, release := countBinlogWrites(f, false, &writes)
	results := make(chan error, 3)
	pub := func(ctx context.Context, body string) {
		_, err := b.Publish(ctx, []byte("a"), rec(body), 1)
		results <- err
	}
	go pub(ctx, "held") // leads, and is off the queue while it writes
	<-entered
	go pub(ctx, "queued")
	waitQueued(t, b, 1)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	refused := make(chan error, 1)
	go func() {
		_, err := b.Publish(short, []byte("a"), rec("refused"), 1)
		refused <- err
	}()
	select {
	case err := <-refused:
		if !errors.Is(err, context.DeadlineExceeded) {
			release()
			t.Fatalf("publish into a full queue: %v, want the context's deadline", err)
		}
	case <-time.After(30 * time.Second):
		release()
		t.Fatal("publish into a full queue did not give up when its context ended")
	}
	go pub(ctx, "closed") // waits for room until Close
	closed := make(chan error, 1)
	smsstest.WaitFor(t, countWait, "a submitter waiting for room", func() bool {
		b.qmu.Lock()
		defer b.qmu.Unlock()
		return b.roomWanted
	})
	go func() { closed <- b.Close() }()
	if err := <-results; !errors.Is(err, ErrClosed) {
		t.Fatalf("publish waiting for room at Close: %v, want ErrClosed", err)
	}
	release()
	for range 2 {
		if err := <-results; err != nil {
			t.Fatalf("publish queued before Close: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	_, recs := readTopic(t, dir, "a")
	if got := strings.Join(bodiesOf(recs), ","); got != "held,queued" {
		t.Errorf("topic holds %s, want held,queued", got)
	}
}

// A lone publisher never yields to gather a group (a yield wakes an idle
// thread: the cost leader/follower removes); after commands queued behind
// a leader, the next leaders gather.
func TestLeaderGathersOnlyUnderContention(t *testing.T) {
	ctx := context.Background()
	f := &faults{}
	b := openTest(t, t.TempDir(), func(o *Options) { o.OpenFile = f.open; o.Logger = quietLog })
	defer b.Close()
	if _, err := b.CreateTopic(ctx, []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := b.Publish(ctx, []byte("a"), rec(fmt.Sprint(i)), 1); err != nil {
			t.Fatal(err)
		}
	}
	if g := b.w.gathers.Load(); g != 0 {
		t.Fatalf("a lone publisher gathered %d times", g)
	}
	writes := 0
	entered, release := countBinlogWrites(f, false, &writes)
	done := make(chan error, 4)
	go func() {
		_, err := b.Publish(ctx, []byte("a"), rec("held"), 1)
		done <- err
	}()
	<-entered
	for i := range 3 {
		go func() {
			_, err := b.Publish(ctx, []byte("a"), rec("q"), 1)
			done <- err
		}()
		waitQueued(t, b, i+1)
	}
	release()
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if g := b.w.gathers.Load(); g != 1 {
		t.Fatalf("%d gathers, want 1: the leader handed the token", g)
	}
	if _, err := b.Publish(ctx, []byte("a"), rec("after"), 1); err != nil {
		t.Fatal(err)
	}
	if g := b.w.gathers.Load(); g != 2 {
		t.Fatalf("%d gathers, want 2: the publish after contention gathers", g)
	}
}

// A panic inside a group ends the process, as it did when a dedicated
// writer goroutine ran every group, even though the group now runs on a
// submitter's goroutine whose caller recovers panics (as the server does per
// connection): recovering would leave the token held and every later write
// hanging. Run in a child process, which must die.
func TestWriterPanicEndsProcess(t *testing.T) {
	if os.Getenv("SMSS_BROKER_PANIC_CHILD") == "1" {
		f := &faults{}
		b := openTest(t, t.TempDir(), func(o *Options) { o.OpenFile = f.open; o.Logger = quietLog })
		ctx := context.Background()
		if _, err := b.CreateTopic(ctx, []byte("a"), 0); err != nil {
			t.Fatal(err)
		}
		f.set(func(p string) bool {
			if strings.Contains(p, "/binlog/") {
				panic("injected writer bug")
			}
			return false
		}, nil)
		recovered := make(chan any, 1)
		go func() {
			defer func() { recovered <- recover() }()
			_, _ = b.Publish(ctx, []byte("a"), rec("x"), 1)
		}()
		fmt.Println("RECOVERED:", <-recovered)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriterPanicEndsProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SMSS_BROKER_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "RECOVERED") {
		t.Fatalf("the child survived a writer panic (err %v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "broker: writer panicked: injected writer bug") {
		t.Fatalf("the child died without the writer's panic (err %v):\n%s", err, out)
	}
}
