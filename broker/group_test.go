package broker

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countBinlogSyncs opens a flushLevel 2 broker whose binlog fsyncs are
// counted and take at least syncTime (a slow device).
func countBinlogSyncs(t *testing.T, groupWait, syncTime time.Duration) (*Broker, *atomic.Int64) {
	t.Helper()
	var syncs atomic.Int64
	f := &faults{}
	f.set(nil, func(path string) bool {
		if strings.Contains(path, "binlog") {
			syncs.Add(1)
			time.Sleep(syncTime)
		}
		return false
	})
	b := openTest(t, t.TempDir(), func(o *Options) {
		o.OpenFile, o.FlushLevel, o.GroupWait = f.open, 2, groupWait
	})
	t.Cleanup(func() { b.Close() })
	if _, err := b.CreateTopic(context.Background(), []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	return b, &syncs
}

// Publishers that each wait for their reply, and come back a network
// round trip later, join one group per round when the writer waits for
// the ones it answered. Without the wait, those arriving during an fsync
// start the next group alone and the publishers settle into two halves
// that alternate, one fsync each.
func TestGroupWaitJoinsAnsweredPublishers(t *testing.T) {
	const publishers, rounds = 4, 12
	// The device flush is slow next to the round trip, as on real disks;
	// the wait may last up to half of it.
	const syncTime, roundTrip = 30 * time.Millisecond, 300 * time.Microsecond
	b, n := countBinlogSyncs(t, time.Second, syncTime)
	before := n.Load()
	var wg sync.WaitGroup
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Staggered starts: without the wait, these would never line up.
			time.Sleep(time.Duration(p) * syncTime / 3)
			for i := 0; i < rounds; i++ {
				if _, err := b.Publish(context.Background(), []byte("t"), rec("m"), 1); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(roundTrip) // the reply's and the next request's trip
			}
		}()
	}
	wg.Wait()
	syncs, waits := n.Load()-before, b.w.waits.Load()
	t.Logf("%d binlog fsyncs for %d rounds of %d publishers, %d waits", syncs, rounds, publishers, waits)
	if waits == 0 {
		t.Fatal("the writer never waited for the publishers it answered")
	}
	// The staggered start costs a few extra groups, then one per round;
	// alternating halves would need about two per round.
	if most := int64(rounds + 5); syncs > most {
		t.Fatalf("%d binlog fsyncs for %d rounds of %d publishers; want at most %d", syncs, rounds, publishers, most)
	}
}

// A lone publisher is what the writer expects after each fsync, so it is
// never held back.
func TestGroupWaitLonePublisherNeverWaits(t *testing.T) {
	b, _ := countBinlogSyncs(t, time.Second, 0)
	for i := 0; i < 20; i++ {
		if _, err := b.Publish(context.Background(), []byte("t"), rec("m"), 1); err != nil {
			t.Fatal(err)
		}
	}
	if w := b.w.waits.Load(); w != 0 {
		t.Fatalf("a lone publisher made the writer wait %d times", w)
	}
}

// A batch caller (the server's epoll loop) runs the groups of its own
// batches, so the writer must not wait for the publishers of its last
// batch: they can only come back through the caller, after the wait. A
// smaller batch after a larger one is the case that waited.
func TestGroupWaitNotForBatchCallers(t *testing.T) {
	const syncTime = 20 * time.Millisecond
	b, n := countBinlogSyncs(t, time.Second, syncTime)
	before := n.Load()
	for i := range 10 {
		ps := make([]Pub, 4-3*(i%2)) // 4, 1, 4, 1, ...
		for j := range ps {
			ps[j] = Pub{Topic: []byte("t"), Records: rec("m"), Count: 1}
		}
		b.PublishBatch(context.Background(), ps)
		for _, p := range ps {
			if p.Err != nil {
				t.Fatal(p.Err)
			}
		}
	}
	if w := b.w.waits.Load(); w != 0 {
		t.Fatalf("the writer waited %d times for publishers only the batch caller could bring", w)
	}
	if syncs := n.Load() - before; syncs != 10 {
		t.Fatalf("%d binlog fsyncs for 10 batches, want 10", syncs)
	}
}
