package topicblock

import (
	"bytes"
	"errors"
	"testing"

	"github.com/smssmq/smss/codec"
)

func FuzzDecodeBlock(f *testing.F) {
	for _, b := range appendixABlocks {
		enc := AppendBlock(nil, &b)
		f.Add(enc)
		f.Add(enc[:len(enc)-1])
		f.Add(enc[:len(enc)/2])
	}
	f.Add(appendixA)
	for _, b := range validBlocks() {
		if len(b.Record) < 1000 {
			f.Add(AppendBlock(nil, &b))
		}
	}
	f.Add(make([]byte, 40))

	f.Fuzz(func(t *testing.T, buf []byte) {
		b, n, err := DecodeBlock(buf)
		if err != nil {
			if n != 0 {
				t.Fatalf("n = %d with error %v", n, err)
			}
			var ce *CorruptError
			if !errors.Is(err, codec.ErrIncomplete) && !errors.As(err, &ce) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		if n <= 0 || n > len(buf) {
			t.Fatalf("n = %d for %d bytes", n, len(buf))
		}
		if got := EncodedLen(&b); got != n {
			t.Fatalf("EncodedLen = %d, decoded %d bytes", got, n)
		}
		if enc := AppendBlock(nil, &b); !bytes.Equal(enc, buf[:n]) {
			t.Fatalf("round trip differs:\n got %q\nwant %q", enc, buf[:n])
		}
		// A torn copy of a valid block must read as torn, never as corrupt.
		step := 1
		if n > 2048 {
			step = n / 512
		}
		for i := 0; i < n; i += step {
			if _, _, err := DecodeBlock(buf[:i]); !errors.Is(err, codec.ErrIncomplete) {
				t.Fatalf("prefix %d/%d: %v, want codec.ErrIncomplete", i, n, err)
			}
		}
	})
}
