package broker

import (
	"encoding/binary"
	"encoding/hex"
	"runtime"
	"testing"
)

// BenchmarkDedupeMemory fills a window with 1,000,000 ids of 32 hex
// characters (the Go client's) over 16 topics and reports the heap it
// holds per id (bytes/id), the figure behind dedupe.maxIds' documented
// cost. One op is one full window.
func BenchmarkDedupeMemory(b *testing.B) {
	const n = 1_000_000
	for i := 0; i < b.N; i++ {
		topics := make([]*topic, 16)
		for j := range topics {
			topics[j] = &topic{}
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		d := &dedupeState{window: 120_000, max: n}
		var raw [16]byte
		for k := 0; k < n; k++ {
			binary.BigEndian.PutUint64(raw[8:], uint64(k))
			d.add(topics[k%len(topics)], makeIDKey([]byte(hex.EncodeToString(raw[:]))), int64(k+1), 1000)
		}
		d.evict(1000)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if d.live != n {
			b.Fatalf("window holds %d ids", d.live)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/id")
		runtime.KeepAlive(d)
		runtime.KeepAlive(topics)
	}
}

// BenchmarkPublishIDs is BenchmarkPublish's 64-connection runs with and
// without a message id on every request (the writer alone, no network).
func BenchmarkPublishIDs(b *testing.B) {
	for _, perReq := range []int{1, 100} {
		for _, ids := range []bool{false, true} {
			name := "records" + map[int]string{1: "1", 100: "100"}[perReq] + map[bool]string{false: "/noid", true: "/id"}[ids]
			b.Run(name, func(b *testing.B) { benchPublishIDs(b, perReq, ids) })
		}
	}
}
