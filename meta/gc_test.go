package meta

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// vlogBytes sums the sizes of badger's value-log files in dir.
func vlogBytes(t *testing.T, dir string) (total int64, files int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".vlog") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed by GC meanwhile
		}
		total += info.Size()
		files++
	}
	return total, files
}

// smallVlog makes 4 KiB values go to 1 MiB value-log files, so GC can be
// exercised without writing hundreds of MiB.
func smallVlog(dir string) Options {
	return Options{Dir: dir, Logger: quietLogger(), tune: tuning{vlogFileSize: 1 << 20, valueThreshold: 1 << 10}}
}

// liveDelays lists the delay keys visible in the store.
func liveDelays(t *testing.T, s *Store) []string {
	t.Helper()
	due, err := s.DueDelays(1<<62, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range due {
		out = append(out, string(e.Key))
	}
	return out
}

// Applied delays leave their payloads in the value log; RunGC gives the
// space back, and never brings a deleted delay back. Unguarded badger GC
// resurrected 16 of these 150 deletions (see gc.go).
func TestRunGCReclaimsWithoutResurrecting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	opts := smallVlog(dir)
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 64<<10)
	var keys [][]byte
	for i := range 160 { // 10 MiB over ten 1 MiB value-log files
		k := DelayKey(int64(1000+i), int64(i+1), []byte("gc"))
		keys = append(keys, k)
		commit(t, s, func(b *Batch) { b.PutDelay(k, DelayValue(int64(1000+i), int64(i+1), payload)) })
	}
	// Closing flushes the memtable into an L0 table. With three of them
	// (more than NumLevelZeroTables) badger compacts L0 in the background,
	// as it would under a steady write load; until then the tombstones and
	// the values they delete coexist in the tree: the dangerous state.
	reopen := func() {
		t.Helper()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if s, err = Open(opts); err != nil {
			t.Fatal(err)
		}
	}
	reopen()
	commit(t, s, func(b *Batch) {
		for _, k := range keys[:75] {
			b.DeleteDelay(k)
		}
	})
	reopen()
	commit(t, s, func(b *Batch) {
		for _, k := range keys[75:150] {
			b.DeleteDelay(k)
		}
	})
	reopen()
	defer func() { _ = s.Close() }()
	var want []string
	for _, k := range keys[150:] {
		want = append(want, string(k))
	}
	before, nBefore := vlogBytes(t, dir)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.RunGC(ctx, 5*time.Millisecond); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got := liveDelays(t, s); !slices.Equal(got, want) {
			t.Fatalf("%d delays visible during GC, want %d", len(got), len(want))
		}
		after, nAfter := vlogBytes(t, dir)
		if after <= before/2 {
			t.Logf("value log %d bytes in %d files -> %d bytes in %d files", before, nBefore, after, nAfter)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("value log still %d bytes in %d files (was %d in %d) after 30s of GC", after, nAfter, before, nBefore)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
	// Let GC and compaction go on for a while: resurrection shows up only
	// once compaction has dropped the tombstones.
	for range 50 {
		time.Sleep(10 * time.Millisecond)
		if got := liveDelays(t, s); !slices.Equal(got, want) {
			t.Fatalf("%d delays visible after GC, want %d", len(got), len(want))
		}
	}
	cancel()
	<-done
	reopen()
	if got := liveDelays(t, s); !slices.Equal(got, want) {
		t.Fatalf("%d delays visible after reopen, want %d", len(got), len(want))
	}
	for _, e := range must(s.DueDelays(1<<62, 100)) {
		if len(e.Value) != DelayHeaderSize+len(payload) {
			t.Fatalf("delay %x lost its payload: %d bytes", e.Key, len(e.Value))
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A writer adding and applying delays while GC and compaction run: the
// visible delays are always exactly those added and not yet deleted.
func TestRunGCConcurrentWriterStress(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~100 MiB")
	}
	dir := filepath.Join(t.TempDir(), "meta")
	opts := smallVlog(dir)
	opts.tune.memTableSize = 1 << 20 // frequent flushes and compactions
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.RunGC(ctx, time.Millisecond) }()

	rng := rand.New(rand.NewPCG(1, 2))
	live := map[string]bool{}
	var order []string
	payload := make([]byte, 4<<10)
	id := int64(0)
	rounds := 0
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline) || rounds < 50; rounds++ {
		b := s.NewBatch()
		for range 20 + rng.IntN(40) {
			id++
			trigger := int64(rng.IntN(1000))
			k := DelayKey(trigger, id, []byte("stress"))
			b.PutDelay(k, DelayValue(trigger, id, payload))
			live[string(k)] = true
			order = append(order, string(k))
		}
		// Apply (delete) most of the older ones.
		for len(live) > 200 {
			k := order[0]
			order = order[1:]
			if live[k] {
				b.DeleteDelay([]byte(k))
				delete(live, k)
			}
		}
		if err := s.Commit(b); err != nil {
			t.Fatalf("round %d: %v", rounds, err)
		}
		if rounds%25 == 0 {
			checkLive(t, s, live, fmt.Sprintf("round %d", rounds))
		}
	}
	// Settle: GC and compactions keep running on the final state.
	for range 20 {
		time.Sleep(20 * time.Millisecond)
		checkLive(t, s, live, "after writes")
	}
	cancel()
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(opts); err != nil {
		t.Fatal(err)
	}
	checkLive(t, s, live, "after reopen")
	total, files := vlogBytes(t, dir)
	t.Logf("%d rounds, %d delays written; value log now %d bytes in %d files", rounds, id, total, files)
}

func checkLive(t *testing.T, s *Store, live map[string]bool, when string) {
	t.Helper()
	got := liveDelays(t, s)
	if len(got) != len(live) {
		extra := 0
		for _, k := range got {
			if !live[k] {
				extra++
			}
		}
		t.Fatalf("%s: %d delays visible, want %d (%d resurrected)", when, len(got), len(live), extra)
	}
	for _, k := range got {
		if !live[k] {
			t.Fatalf("%s: deleted delay %x is visible", when, k)
		}
	}
}
