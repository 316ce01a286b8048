package broker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkPublish measures the writer alone (no network): C goroutines
// publish 200-byte records, singly or 100 per request, at flush levels 1
// and 2. One op is one message.
func BenchmarkPublish(b *testing.B) {
	for _, level := range []int{1, 2} {
		for _, perReq := range []int{1, 100} {
			for _, conns := range []int{1, 64} {
				b.Run(fmt.Sprintf("flush%d/records%d/conns%d", level, perReq, conns), func(b *testing.B) {
					benchPublish(b, level, perReq, conns)
				})
			}
		}
	}
}

func benchPublish(b *testing.B, level, perReq, conns int) {
	dir := b.TempDir()
	br, err := Open(Options{Dir: dir, FlushLevel: level, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	ctx := context.Background()
	if _, err := br.CreateTopic(ctx, []byte("bench"), 0); err != nil {
		b.Fatal(err)
	}
	one := rec(string(bytes.Repeat([]byte("x"), 192))) // 200-byte record
	payload := bytes.Repeat(one, perReq)
	requests := int64(b.N/perReq + 1)
	var next atomic.Int64
	b.SetBytes(int64(len(one)))
	b.ResetTimer()
	var wg sync.WaitGroup
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= requests {
				if _, err := br.Publish(ctx, []byte("bench"), payload, perReq); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
