package meta

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procStatusKiB reads memory counters (kB) from /proc/self/status.
func procStatusKiB(tb testing.TB) map[string]int64 {
	tb.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(name, "VmRSS") && !strings.HasPrefix(name, "Rss") {
			continue
		}
		if v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// BenchmarkFootprint measures the resident memory a store costs once it
// holds 10,000 topics and 100,000 pending 200-byte delays. It runs once
// whatever b.N is; use
//
//	go test -run '^$' -bench Footprint -benchtime 1x ./meta
//
// (not under -race, which multiplies memory use).
func BenchmarkFootprint(b *testing.B) {
	const (
		topics = 10_000
		delays = 100_000
	)
	runtime.GC()
	before := procStatusKiB(b)
	s, err := Open(Options{Dir: filepath.Join(b.TempDir(), "meta"), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	afterOpen := procStatusKiB(b)

	batch := s.NewBatch()
	flush := func() {
		if err := s.Commit(batch); err != nil {
			b.Fatal(err)
		}
		batch.Reset()
	}
	for i := range topics {
		// Every other topic has a lifetime (an lf@ key).
		batch.PutTopic(&Topic{Name: fmt.Sprintf("topic-%05d", i), CreateTime: 1, ExpireAt: int64(i%2) * int64(2e12+i), CreateEventID: int64(i + 1)})
		if batch.Len() >= 1000 {
			flush()
		}
	}
	flush()
	record := make([]byte, 200)
	for i := range delays {
		trig, id := int64(1.9e12)+int64(i*37%delays), int64(topics+i+1)
		batch.PutDelay(DelayKey(trig, id, []byte(fmt.Sprintf("topic-%05d", i%topics))), DelayValue(trig, id, record))
		if batch.Len() == 2000 {
			if !s.Fits(batch) {
				b.Fatal("2000 small delays do not fit one batch")
			}
			flush()
		}
	}
	flush()
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	if n, err := s.PendingDelays(); err != nil || n != delays {
		b.Fatalf("PendingDelays = %d, %v", n, err)
	}
	if ts, err := s.Topics(); err != nil || len(ts) != topics {
		b.Fatalf("Topics = %d, %v", len(ts), err)
	}
	peak := procStatusKiB(b)
	// What the store keeps, not the garbage the load left behind: collect
	// and return free memory to the OS before reading RSS again.
	debug.FreeOSMemory()
	after := procStatusKiB(b)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)

	// Badger keeps table-builder buffers (16 MiB for an L0 table) in a
	// pool that frees one every 2 s once idle. Wait, with a deadline, for
	// RSS to settle to what an idle store keeps.
	settled, stable := after, 0
	for deadline := time.Now().Add(90 * time.Second); stable < 3 && time.Now().Before(deadline); {
		time.Sleep(2500 * time.Millisecond) // > one pool release tick
		debug.FreeOSMemory()
		now := procStatusKiB(b)
		if settled["VmRSS"]-now["VmRSS"] < 512 {
			stable++
		} else {
			stable = 0
		}
		settled = now
	}
	// SMSS_HEAPPROF=file writes a heap profile of the idle store.
	if p := os.Getenv("SMSS_HEAPPROF"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
	mib := func(kib int64) float64 { return float64(kib) / 1024 }
	b.ReportMetric(mib(after["VmRSS"]-before["VmRSS"]), "RSS-MiB")
	b.ReportMetric(mib(after["RssAnon"]-before["RssAnon"]), "anon-MiB")
	b.ReportMetric(mib(after["RssFile"]-before["RssFile"]), "file-MiB")
	b.ReportMetric(mib(afterOpen["VmRSS"]-before["VmRSS"]), "open-MiB")
	b.ReportMetric(mib(peak["VmRSS"]-before["VmRSS"]), "loadRSS-MiB")
	b.ReportMetric(mib(settled["VmRSS"]-before["VmRSS"]), "idleRSS-MiB")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	if grew := after["VmRSS"] - before["VmRSS"]; grew > 100<<10 {
		b.Fatalf("RSS grew by %.1f MiB, budget 100 MiB", mib(grew))
	}
}
