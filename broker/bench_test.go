package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/smssmq/smss/protocol"
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
	benchPublishWith(b, level, perReq, conns, false)
}

func benchPublishIDs(b *testing.B, perReq int, ids bool) {
	benchPublishWith(b, 1, perReq, 64, ids)
}

// benchPublishWith is benchPublish; with ids every request's first record
// carries a new 32-character message id.
func benchPublishWith(b *testing.B, level, perReq, conns int, ids bool) {
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
	idAt := -1
	if ids {
		first := idRec("00000000000000000000000000000000", string(bytes.Repeat([]byte("x"), 192)))
		payload = append(first, bytes.Repeat(one, perReq-1)...)
		idAt = protocol.RecordPrefixSize + 4 + len(protocol.MsgIDHeader) + 4
	}
	requests := int64(b.N/perReq + 1)
	var next atomic.Int64
	b.SetBytes(int64(len(one)))
	b.ResetTimer()
	var wg sync.WaitGroup
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := append([]byte(nil), payload...) // each connection's own request
			for n := next.Add(1); n <= requests; n = next.Add(1) {
				if idAt >= 0 { // a new id per request
					var raw [8]byte
					binary.BigEndian.PutUint64(raw[:], uint64(n))
					hex.Encode(payload[idAt:idAt+16], raw[:])
				}
				if _, err := br.Publish(ctx, []byte("bench"), payload, perReq); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkRecoveryReplay measures start-up after a crash long after the
// last checkpoint: every record of a 100,000-message store (200-byte
// records, 4 topics, singles and 100-record batches) is replayed and
// compared with its topic file. One op is one start-up; records/s is
// reported.
func BenchmarkRecoveryReplay(b *testing.B) {
	src := b.TempDir()
	br, err := Open(Options{Dir: src, FlushLevel: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	topics := []string{"t0", "t1", "t2", "t3"}
	for _, name := range topics {
		if _, err := br.CreateTopic(ctx, []byte(name), 0); err != nil {
			b.Fatal(err)
		}
	}
	one := rec(string(bytes.Repeat([]byte("x"), 192)))
	batch := bytes.Repeat(one, 100)
	const records = 100_000
	for n := 0; n < records; {
		name := []byte(topics[n%len(topics)])
		if (n/100)%2 == 0 {
			_, err = br.Publish(ctx, name, batch, 100)
			n += 100
		} else {
			_, err = br.Publish(ctx, name, one, 1)
			n++
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := br.Close(); err != nil {
		b.Fatal(err)
	}
	old, err := oldCheckpointCopy(src)
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(old)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "store")
		if err := os.CopyFS(dir, os.DirFS(old)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		br, err := Open(Options{Dir: dir, FlushLevel: 1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := br.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(records*b.N)/b.Elapsed().Seconds(), "records/s")
}
