package topicblock

import (
	"bytes"
	"math"
	"testing"
)

// RunEncoder must produce exactly AppendBlock's bytes, over runs whose
// shared fields change between resets.
func TestRunEncoderMatchesAppendBlock(t *testing.T) {
	rec := func(n int) []byte {
		r := make([]byte, 8+n)
		r[0] = byte(n)
		for i := 8; i < len(r); i++ {
			r[i] = 'a' + byte(i%26)
		}
		return r
	}
	runs := []struct {
		name                          string
		ts, saveTime, srcFile, srcPos int64
		firstID                       int64
		sizes                         []int
	}{
		{"zeros", 0, 0, 0, 0, 1, []int{1}},
		{"typical", 1795950274737, 1795950274738, 3, 4096, 1001, []int{200, 200, 17}},
		{"large numbers", math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64, math.MaxInt64, math.MaxInt64 - 5, []int{1, 2, 3, 4, 5}},
		{"shorter after longer", 5, 6, 7, 8, 9, []int{1000, 1}},
	}
	var e RunEncoder
	for _, r := range runs {
		e.Reset(r.ts, r.saveTime, r.srcFile, r.srcPos)
		var got, want []byte
		for i, n := range r.sizes {
			b := Block{Ts: r.ts, EventID: r.firstID + int64(i), SaveTime: r.saveTime, Index: i,
				SrcFileID: r.srcFile, SrcPos: r.srcPos, Record: rec(n)}
			want = AppendBlock(want, &b)
			got = e.Append(got, b.EventID, i, b.Record)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s:\n got %q\nwant %q", r.name, got, want)
		}
	}
}

func BenchmarkRunEncoder(b *testing.B) {
	record := make([]byte, 208)
	record[0] = 200
	blk := Block{Ts: 1795950274737, EventID: 123456789, SaveTime: 1795950274737, SrcFileID: 12, SrcPos: 123456789, Record: record}
	buf := make([]byte, 0, 64<<10)
	b.Run("AppendBlock", func(b *testing.B) {
		b.SetBytes(int64(len(record)))
		for i := 0; i < b.N; i++ {
			if i%100 == 0 {
				buf = buf[:0]
			}
			blk.Index = i % 100
			buf = AppendBlock(buf, &blk)
		}
	})
	b.Run("RunEncoder", func(b *testing.B) {
		b.SetBytes(int64(len(record)))
		var e RunEncoder
		for i := 0; i < b.N; i++ {
			if i%100 == 0 {
				buf = buf[:0]
				e.Reset(blk.Ts, blk.SaveTime, blk.SrcFileID, blk.SrcPos)
			}
			buf = e.Append(buf, blk.EventID, i%100, record)
		}
	})
}
