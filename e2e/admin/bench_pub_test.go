package admin

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/smssmq/smss/e2e/internal/kit"
)

// BenchmarkPublishInProcess publishes single 200-byte records from 64
// connections to a server running in the test process, so that
// go test -cpuprofile sees the server's side:
//
//	go test -run X -bench PublishInProcess -cpuprofile cpu.out ./e2e/admin
func BenchmarkPublishInProcess(b *testing.B) {
	addr := inProcessServer(b)
	if err := kit.Dial(b, addr).Create("bench", 0); err != nil {
		b.Fatal(err)
	}
	const conns = 64
	rec := kit.Record(nil, string(bytes.Repeat([]byte("x"), 192)))
	var next atomic.Int64
	b.SetBytes(int64(len(rec)))
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		c := kit.Dial(b, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := c.Pub("bench", rec); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
