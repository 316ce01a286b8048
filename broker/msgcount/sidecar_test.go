package msgcount

import (
	"bytes"
	"errors"
	"testing"
)

func TestSidecarRoundTrip(t *testing.T) {
	for _, c := range []Sidecar{
		{},
		{Size: 1, Blocks: 1, FirstEventID: 1},
		{Size: 1 << 30, Blocks: 4_000_000, FirstEventID: 123_456_789},
		{Size: 1<<62 + 5, Blocks: 1 << 40, FirstEventID: 1<<62 - 1},
	} {
		b := EncodeSidecar(c)
		if len(b) != sidecarSize {
			t.Fatalf("%+v encodes to %d bytes", c, len(b))
		}
		got, err := DecodeSidecar(b)
		if err != nil || got != c {
			t.Fatalf("%+v decodes to %+v, %v", c, got, err)
		}
	}
}

func TestSidecarRejects(t *testing.T) {
	good := EncodeSidecar(Sidecar{Size: 500, Blocks: 7, FirstEventID: 42})
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x10
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:35]},
		{"long", append(bytes.Clone(good), 0)},
		{"magic", flip(0)},
		{"size bit", flip(9)},
		{"blocks bit", flip(17)},
		{"first bit", flip(25)},
		{"checksum bit", flip(33)},
		{"more blocks than bytes", EncodeSidecar(Sidecar{Size: 3, Blocks: 4, FirstEventID: 1})},
		{"blocks in an empty file", EncodeSidecar(Sidecar{Size: 0, Blocks: 1, FirstEventID: 1})},
		{"no block in bytes", EncodeSidecar(Sidecar{Size: 10, Blocks: 0})},
		{"blocks without a first eventId", EncodeSidecar(Sidecar{Size: 10, Blocks: 1})},
		{"negative size", EncodeSidecar(Sidecar{Size: -1})},
		{"negative first eventId", EncodeSidecar(Sidecar{Size: 10, Blocks: 1, FirstEventID: -3})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := DecodeSidecar(tc.b); !errors.Is(err, ErrBadSidecar) {
				t.Fatalf("decoded %+v, %v; want ErrBadSidecar", c, err)
			}
		})
	}
}

func TestSidecarName(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   int64
		ok   bool
	}{
		{"0.cnt", 0, true},
		{"17.cnt", 17, true},
		{"017.cnt", 0, false},
		{"-1.cnt", 0, false},
		{"17.cnt.tmp", 0, false},
		{"17.log", 0, false},
		{".cnt", 0, false},
		{"x.cnt", 0, false},
	} {
		id, ok := sidecarID(tc.name)
		if ok != tc.ok || (ok && id != tc.id) {
			t.Errorf("sidecarID(%q) = %d, %v; want %d, %v", tc.name, id, ok, tc.id, tc.ok)
		}
		if ok && SidecarName(id) != tc.name {
			t.Errorf("SidecarName(%d) = %q", id, SidecarName(id))
		}
	}
}

// FuzzDecodeSidecar: no input panics, and whatever decodes encodes back
// to the same bytes (one encoding per value).
func FuzzDecodeSidecar(f *testing.F) {
	f.Add(EncodeSidecar(Sidecar{}))
	f.Add(EncodeSidecar(Sidecar{Size: 500, Blocks: 7, FirstEventID: 42}))
	f.Add(EncodeSidecar(Sidecar{Size: 1 << 30, Blocks: 1 << 20, FirstEventID: 1}))
	f.Add([]byte(sidecarMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeSidecar(b)
		if err != nil {
			if !errors.Is(err, ErrBadSidecar) {
				t.Fatalf("error %v does not wrap ErrBadSidecar", err)
			}
			return
		}
		if c.Size < 0 || c.Blocks < 0 || c.Blocks > c.Size {
			t.Fatalf("accepted impossible figures %+v", c)
		}
		if !bytes.Equal(EncodeSidecar(c), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, c)
		}
	})
}
