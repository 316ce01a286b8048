package topicblock

import (
	"bytes"
	"testing"
	"unsafe"
)

// checkSame fails unless DecodeBlock, decodeCareful and decodeFast all agree
// with refDecodeBlock on buf: the same Block (Record aliasing the same bytes
// of buf, with the same capacity), the same n, and the same error
// (errIncomplete itself, or a *CorruptError with the same text).
func checkSame(t *testing.T, buf []byte) {
	t.Helper()
	wb, wn, werr := refDecodeBlock(buf)
	gb, gn, gerr := DecodeBlock(buf)
	compareDecode(t, "DecodeBlock", buf, gb, gn, gerr, wb, wn, werr)
	cb, cn, cerr := decodeCareful(buf)
	compareDecode(t, "decodeCareful", buf, cb, cn, cerr, wb, wn, werr)
	if fb, fn, ok := decodeFast(buf); ok {
		compareDecode(t, "decodeFast", buf, fb, fn, nil, wb, wn, werr)
	}
}

func compareDecode(t *testing.T, what string, buf []byte, gb Block, gn int, gerr error, wb Block, wn int, werr error) {
	t.Helper()
	if gn != wn || !sameError(gerr, werr) || !sameBlock(gb, wb) {
		t.Fatalf("%s(%q):\n got %+v, %d, %v\nwant %+v, %d, %v", what, buf, gb, gn, gerr, wb, wn, werr)
	}
}

func sameError(got, want error) bool {
	if got == nil || want == nil || got == errIncomplete || want == errIncomplete {
		return got == want
	}
	g, gok := got.(*CorruptError)
	w, wok := want.(*CorruptError)
	return gok && wok && g.Reason == w.Reason && got.Error() == want.Error()
}

func sameBlock(got, want Block) bool {
	return got.Ts == want.Ts && got.EventID == want.EventID && got.SaveTime == want.SaveTime &&
		got.Index == want.Index && got.SrcFileID == want.SrcFileID && got.SrcPos == want.SrcPos &&
		len(got.Record) == len(want.Record) && cap(got.Record) == cap(want.Record) &&
		unsafe.SliceData(got.Record) == unsafe.SliceData(want.Record)
}

// interesting are the substitutions that reach each rule of the line and
// record checks.
var interesting = []byte{'0', '1', '9', '\t', '\n', '-', '+', ' ', 'x', 0x00, 0x7f, 0xff, '/', ':'}

// equivalenceInputs returns encoded valid blocks to mutate.
func equivalenceInputs() [][]byte {
	var out [][]byte
	bb := benchBlock()
	out = append(out, AppendBlock(nil, &bb))
	for _, b := range appendixABlocks {
		out = append(out, AppendBlock(nil, &b))
	}
	for _, b := range validBlocks() {
		if len(b.Record) < 1000 {
			out = append(out, AppendBlock(nil, &b))
		}
	}
	return out
}

// TestDecodeEquivalenceNeighbourhood runs every prefix, every one-byte
// substitution from interesting, every deleted byte and every duplicated
// byte of the valid blocks through checkSame, so the cases the fuzzer
// would have to find by chance are always covered.
func TestDecodeEquivalenceNeighbourhood(t *testing.T) {
	for _, enc := range equivalenceInputs() {
		for i := 0; i <= len(enc); i++ {
			checkSame(t, enc[:i])
			checkSame(t, append(enc[:i:i], 0x28, 0, 0, 0))
		}
		for i := range enc {
			m := bytes.Clone(enc)
			for _, c := range interesting {
				m[i] = c
				checkSame(t, m)
			}
			checkSame(t, append(bytes.Clone(enc[:i]), enc[i+1:]...))
			checkSame(t, append(bytes.Clone(enc[:i+1]), enc[i:]...))
		}
	}
	checkSame(t, appendixA)
}

func FuzzDecodeEquivalence(f *testing.F) {
	for _, enc := range equivalenceInputs() {
		f.Add(enc)
		f.Add(enc[:len(enc)-1])
		f.Add(enc[:len(enc)/2])
		f.Add(enc[:4+int(enc[0])])
		for _, i := range []int{0, 4, 6, len(enc) / 3, len(enc) - 1} {
			m := bytes.Clone(enc)
			m[i] ^= 0x10
			f.Add(m)
		}
	}
	f.Add(appendixA)
	f.Add([]byte("\x0f\x00\x00\x000\t1\t0\t10\t0\t0\t0\n\x01\x00\x00\x00\x00\x00\x00\x00z\n"))
	f.Add([]byte("\x2c\x00\x00\x000\t1\t0\t10\t0\t0\t9223372036854775808\n\x01\x00\x00\x00\x00\x00\x00\x00z\n"))
	f.Fuzz(func(t *testing.T, buf []byte) {
		checkSame(t, buf)
	})
}

// TestDecodeFastTakesValidBlocks guards the point of decodeFast: if it
// declined valid blocks, equivalence would hold trivially and the read path
// would silently run the careful decoder.
func TestDecodeFastTakesValidBlocks(t *testing.T) {
	for _, enc := range equivalenceInputs() {
		want, wn, err := refDecodeBlock(enc)
		if err != nil {
			t.Fatalf("%q: %v", enc, err)
		}
		got, n, ok := decodeFast(append(enc[:len(enc):len(enc)], 0x28, 0))
		if !ok || n != wn {
			t.Fatalf("decodeFast(%q) = %d, %v; want %d, true", enc, n, ok, wn)
		}
		assertBlockEqual(t, got, want)
	}
}
