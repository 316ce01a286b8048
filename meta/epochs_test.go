package meta

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/smssmq/smss/protocol"
)

func TestEpochStartsRoundTrip(t *testing.T) {
	for _, h := range [][]protocol.EpochStart{nil, {{Epoch: 1, Start: 1}}, {{Epoch: 1, Start: 1}, {Epoch: 3, Start: 40}, {Epoch: 4, Start: 40}}} {
		got, err := DecodeEpochStarts(EncodeEpochStarts(h))
		if err != nil {
			t.Fatal(err)
		}
		if len(h) == 0 && len(got) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, h) {
			t.Fatalf("round trip of %v gave %v", h, got)
		}
	}
	for _, bad := range [][]byte{
		make([]byte, 15),
		EncodeEpochStarts([]protocol.EpochStart{{Epoch: 2, Start: 1}, {Epoch: 1, Start: 5}}),
		EncodeEpochStarts([]protocol.EpochStart{{Epoch: 1, Start: 0}}),
	} {
		if _, err := DecodeEpochStarts(bad); !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodeEpochStarts(% x) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestEpochStartsStored(t *testing.T) {
	s, _ := openTemp(t)
	if h, err := s.EpochStarts(); err != nil || h != nil {
		t.Fatalf("a new store's history: %v, %v", h, err)
	}
	want := []protocol.EpochStart{{Epoch: 1, Start: 1}, {Epoch: 2, Start: 77}}
	b := s.NewBatch()
	b.SetEpochStarts(want)
	if err := s.Commit(b); err != nil {
		t.Fatal(err)
	}
	got, err := s.EpochStarts()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("stored history %v, %v; want %v", got, err, want)
	}
}

func FuzzDecodeEpochStarts(f *testing.F) {
	f.Add(EncodeEpochStarts([]protocol.EpochStart{{Epoch: 1, Start: 1}, {Epoch: 2, Start: 9}}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, v []byte) {
		h, err := DecodeEpochStarts(v)
		if err != nil {
			return
		}
		if err := protocol.CheckEpochStarts(h); err != nil {
			t.Fatalf("decoded a history that does not check: %v", err)
		}
		if !bytes.Equal(EncodeEpochStarts(h), v) {
			t.Fatalf("re-encoding % x gave % x", v, EncodeEpochStarts(h))
		}
	})
}
