package binlog

import (
	"bytes"
	"testing"
	"unsafe"
)

// checkSame fails unless DecodeBlock, decodeCareful and decodeFast all agree
// with refDecodeBlock on buf: the same Block (Topic and Payload aliasing the
// same bytes of buf, with the same capacity), the same n, and the same error
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
	// DecodeSpan is DecodeBlock plus LastEventID, failing where either does.
	sb, slast, sn, serr := DecodeSpan(buf)
	if werr == nil {
		wlast, lerr := wb.LastEventID()
		if lerr != nil {
			werr = lerr
			wb, wn = Block{}, 0
		} else if serr == nil && slast != wlast {
			t.Fatalf("DecodeSpan(%q): last %d, want %d", buf, slast, wlast)
		}
	}
	compareDecode(t, "DecodeSpan", buf, sb, sn, serr, wb, wn, werr)
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

func sameSlice(got, want []byte) bool {
	return len(got) == len(want) && cap(got) == cap(want) && unsafe.SliceData(got) == unsafe.SliceData(want) &&
		(got == nil) == (want == nil)
}

func sameBlock(got, want Block) bool {
	return got.WriteTime == want.WriteTime && got.Cmd == want.Cmd && got.EventID == want.EventID &&
		got.Timestamp == want.Timestamp && sameSlice(got.Topic, want.Topic) && sameSlice(got.Payload, want.Payload)
}

// interesting are the substitutions that reach each rule of the line and
// payload checks.
var interesting = []byte{'0', '1', '9', '\t', '\n', '-', '+', ' ', 'x', 0x00, 0x7f, 0xff, '/', ':'}

// equivalenceInputs returns encoded valid blocks to mutate, every kind of
// command among them.
func equivalenceInputs() [][]byte {
	var out [][]byte
	bb := benchBlock()
	out = append(out, AppendBlock(nil, &bb))
	for i, tc := range appendixABlocks {
		end := len(appendixA)
		if i+1 < len(appendixABlocks) {
			end = appendixABlocks[i+1].off
		}
		out = append(out, appendixA[tc.off:end])
	}
	for _, b := range validBlocks() {
		if len(b.Payload) < 1000 {
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

// TestDecodeFastTakesValidBlocks guards the point of decodeFast: if it
// declined valid blocks, equivalence would hold trivially and replication
// would silently run the careful decoder.
func TestDecodeFastTakesValidBlocks(t *testing.T) {
	inputs := equivalenceInputs()
	for _, b := range validBlocks() {
		inputs = append(inputs, AppendBlock(nil, &b)) // the large ones too
	}
	hundred := benchPub100()
	inputs = append(inputs, AppendBlock(nil, &hundred))
	for _, enc := range inputs {
		want, wn, err := refDecodeBlock(enc)
		if err != nil {
			t.Fatalf("%q: %v", enc, err)
		}
		got, n, ok := decodeFast(append(enc[:len(enc):len(enc)], 0x28, 0))
		if !ok || n != wn {
			t.Fatalf("decodeFast(%.80q) = %d, %v; want %d, true", enc, n, ok, wn)
		}
		assertBlockEqual(t, got, want)
	}
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
	f.Add(block("1\t16\t7\t1\torder\t32\n", append(bytes.Clone(delayValue), '\n')))
	f.Add(block("1\t1\t2\t1\torder\t9223372036854775808\n", nil))
	f.Fuzz(func(t *testing.T, buf []byte) {
		checkSame(t, buf)
	})
}
