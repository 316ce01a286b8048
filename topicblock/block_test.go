package topicblock

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smssmq/smss/codec"
)

func h(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// record builds a §1.4 message record with no headers.
func record(body string) []byte {
	r := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	r = binary.LittleEndian.AppendUint32(r, 0)
	return append(r, body...)
}

// Records of Appendix A: the 30-byte traceId=x1/hello record, a batch of
// 9, 20 and 11 bytes (payloadSize 10, 21, 12 in the spec's lines) and the
// 15-byte "delayed" record (payloadSize 16).
var (
	recHello   = cat(h("16000000 01000000 07000000"), []byte("traceId"), h("02000000"), []byte("x1"), []byte("hello"))
	recDelayed = cat(h("0700000000000000"), []byte("delayed"))
)

var appendixABlocks = []Block{
	{Ts: 1795950274738, EventID: 2, SaveTime: 1795950274738, Index: 0, SrcFileID: 0, SrcPos: 53, Record: recHello},
	{Ts: 1795950274738, EventID: 3, SaveTime: 1795950274738, Index: 0, SrcFileID: 0, SrcPos: 129, Record: record("a")},
	{Ts: 1795950274738, EventID: 4, SaveTime: 1795950274738, Index: 1, SrcFileID: 0, SrcPos: 129, Record: record("hello world!")},
	{Ts: 1795950274738, EventID: 5, SaveTime: 1795950274738, Index: 2, SrcFileID: 0, SrcPos: 129, Record: record("xyz")},
	{Ts: 1795950276740, EventID: 7, SaveTime: 1795950276740, Index: 0, SrcFileID: 0, SrcPos: 293, Record: recDelayed},
}

// appendixA is topic/3/3/order/0.log of Appendix A, built from the spec's
// command lines.
var appendixA = cat(
	h("28000000"), []byte("1795950274738\t2\t1795950274738\t31\t0\t0\t53\n"), recHello, []byte("\n"),
	h("29000000"), []byte("1795950274738\t3\t1795950274738\t10\t0\t0\t129\n"), record("a"), []byte("\n"),
	h("29000000"), []byte("1795950274738\t4\t1795950274738\t21\t1\t0\t129\n"), record("hello world!"), []byte("\n"),
	h("29000000"), []byte("1795950274738\t5\t1795950274738\t12\t2\t0\t129\n"), record("xyz"), []byte("\n"),
	h("29000000"), []byte("1795950276740\t7\t1795950276740\t16\t0\t0\t293\n"), recDelayed, []byte("\n"),
)

func TestAppendixAEncode(t *testing.T) {
	var file []byte
	for _, b := range appendixABlocks {
		before := len(file)
		file = AppendBlock(file, &b)
		if got := EncodedLen(&b); got != len(file)-before {
			t.Errorf("EncodedLen(eventId %d) = %d, appended %d", b.EventID, got, len(file)-before)
		}
		if b.EventID == 2 && len(file) != 75 {
			// The first subscription frame of Appendix A gives next pos 75.
			t.Errorf("first block is %d bytes, want 75", len(file))
		}
	}
	if !bytes.Equal(file, appendixA) {
		t.Fatalf("encoding differs from Appendix A:\n got %q\nwant %q", file, appendixA)
	}
}

func TestAppendixADecode(t *testing.T) {
	buf := appendixA
	for _, want := range appendixABlocks {
		got, n, err := DecodeBlock(buf)
		if err != nil {
			t.Fatalf("eventId %d: %v", want.EventID, err)
		}
		assertBlockEqual(t, got, want)
		buf = buf[n:]
	}
	if len(buf) != 0 {
		t.Fatalf("%d bytes left", len(buf))
	}
}

func assertBlockEqual(t *testing.T, got, want Block) {
	t.Helper()
	if got.Ts != want.Ts || got.EventID != want.EventID || got.SaveTime != want.SaveTime || got.Index != want.Index ||
		got.SrcFileID != want.SrcFileID || got.SrcPos != want.SrcPos || !bytes.Equal(got.Record, want.Record) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

func validBlocks() map[string]Block {
	big := bytes.Repeat([]byte{0xcd}, 70000)
	binary.LittleEndian.PutUint32(big, uint32(len(big)-8))
	m := map[string]Block{
		"zeros":         {EventID: 1, Record: record("z")},
		"max":           {Ts: 1<<63 - 1, EventID: 1<<63 - 1, SaveTime: 1<<63 - 1, Index: 1<<31 - 1, SrcFileID: 1<<63 - 1, SrcPos: 1<<63 - 1, Record: record("m")},
		"large record":  {Ts: 5, EventID: 6, SaveTime: 5, Index: 3, SrcFileID: 12, SrcPos: 1 << 30, Record: big},
		"newline body":  {Ts: 5, EventID: 6, SaveTime: 5, Record: record("\n\t\n")},
		"header record": {Ts: 5, EventID: 8, SaveTime: 5, Index: 9999, SrcFileID: 2, SrcPos: 77, Record: recHello},
	}
	for _, b := range appendixABlocks {
		m[fmt.Sprintf("appendix A eventId %d", b.EventID)] = b
	}
	return m
}

func TestDecodeRoundTrip(t *testing.T) {
	for name, want := range validBlocks() {
		t.Run(name, func(t *testing.T) {
			enc := AppendBlock([]byte("prefix"), &want)[len("prefix"):]
			if len(enc) != EncodedLen(&want) {
				t.Fatalf("EncodedLen %d, encoded %d", EncodedLen(&want), len(enc))
			}
			got, n, err := DecodeBlock(append(enc[:len(enc):len(enc)], 0x28, 0))
			if err != nil {
				t.Fatal(err)
			}
			if n != len(enc) {
				t.Fatalf("n = %d, want %d", n, len(enc))
			}
			assertBlockEqual(t, got, want)
		})
	}
}

func TestDecodePrefixIncomplete(t *testing.T) {
	for name, b := range validBlocks() {
		enc := AppendBlock(nil, &b)
		for i := 0; i < len(enc); i++ {
			if _, n, err := DecodeBlock(enc[:i]); !errors.Is(err, codec.ErrIncomplete) || n != 0 {
				t.Fatalf("%s: prefix of %d/%d bytes: n=%d err=%v, want codec.ErrIncomplete", name, i, len(enc), n, err)
			}
		}
	}
}

func block(line string, payload []byte) []byte {
	return cat(binary.LittleEndian.AppendUint32(nil, uint32(len(line))), []byte(line), payload)
}

func TestDecodeCorrupt(t *testing.T) {
	p31 := cat(recHello, []byte("\n"))
	cases := []struct {
		name string
		buf  []byte
		want string
	}{
		{"zero length", make([]byte, 100), "length 0"},
		{"length too long", cat(h("01040000"), make([]byte, 1100)), "length 1025"},
		{"six fields", block("1795950274738\t2\t1\t31\t0\t53\n", p31), "6 fields"},
		{"eight fields", block("1\t2\t1\t31\t0\t0\t53\t0\n", p31), "more than 7"},
		{"no final newline", block("1\t2\t1\t31\t0\t0\t53\t", p31), "newline"},
		{"carriage return", block("1\t2\t1\t31\t0\t0\t53\r\n", p31), "srcPos"},
		{"non-digit", block("1\t2\t1\t31\tx\t0\t53\n", p31), "indexOfBatch"},
		{"negative srcFileId", block("1\t2\t1\t31\t0\t-1\t53\n", p31), "srcFileId"},
		{"leading zero", block("1\t2\t1\t031\t0\t0\t53\n", p31), "leading zero"},
		{"empty field", block("1\t2\t\t31\t0\t0\t53\n", p31), "empty saveTime"},
		{"overflow", block("1\t2\t1\t31\t0\t9223372036854775808\t53\n", p31), "overflows"},
		{"eventId zero", block("1\t0\t1\t31\t0\t0\t53\n", p31), "not positive"},
		{"payloadSize small", block("1\t2\t1\t9\t0\t0\t53\n", make([]byte, 9)), "payloadSize 9"},
		{"payloadSize huge", block("1\t2\t1\t4294967305\t0\t0\t53\n", nil), "payloadSize 4294967305"},
		{"index huge", block("1\t2\t1\t31\t2147483648\t0\t53\n", p31), "indexOfBatch"},
		{"payloadSize mismatch", block("1\t2\t1\t32\t0\t0\t53\n", cat(p31, []byte("\n"))), "does not match"},
		{"empty record", block("1\t2\t1\t10\t0\t0\t53\n", cat(make([]byte, 9), []byte("\n"))), "contentSize 0"},
		{"two records", block("1\t2\t1\t19\t0\t0\t53\n", cat(record("a"), record("b"), []byte("\n"))), "does not match"},
		{"missing newline", block("1\t2\t1\t31\t0\t0\t53\n", cat(recHello, []byte("x"))), "newline"},

		{"torn: non-digit", cat(h("40000000"), []byte("1\t2\t1x")), "saveTime"},
		{"torn: eventId zero", cat(h("40000000"), []byte("1\t0\t")), "not positive"},
		{"torn: payloadSize small", cat(h("40000000"), []byte("1\t2\t1\t3\t")), "payloadSize 3"},
		{"torn: record mismatch", block("1\t2\t1\t31\t0\t0\t53\n", cat(h("17000000"), recHello[4:]))[:4+17+4], "does not match"},
		{"torn: empty record", block("1\t2\t1\t31\t0\t0\t53\n", make([]byte, 31))[:4+17+6], "contentSize 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, n, err := DecodeBlock(tc.buf)
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want *CorruptError", err)
			}
			if n != 0 {
				t.Errorf("n = %d on error", n)
			}
			if !strings.Contains(ce.Reason, tc.want) {
				t.Errorf("reason %q does not mention %q", ce.Reason, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "corrupt topic block: ") {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
}

func TestBucketsVectors(t *testing.T) {
	cases := []struct {
		name   string
		fc     int
		p1, p2 int
	}{
		{"order", 10, 3, 3}, {"order", 100, 73, 33},
		{"t2", 10, 3, 7}, {"t2", 100, 53, 97},
		{"life1", 10, 4, 4}, {"life1", 100, 84, 44},
		{"", 10, 1, 1}, {"", 100, 11, 91},
		{"order", 1, 0, 0},
	}
	for _, tc := range cases {
		p1, p2 := Buckets([]byte(tc.name), tc.fc)
		if p1 != tc.p1 || p2 != tc.p2 {
			t.Errorf("Buckets(%q, %d) = %d/%d, want %d/%d", tc.name, tc.fc, p1, p2, tc.p1, tc.p2)
		}
	}
}

func TestDirAndRelRoot(t *testing.T) {
	root := filepath.Join("data", "topic")
	if got, want := Dir(root, []byte("order"), 10), filepath.Join("data", "topic", "3", "3", "order"); got != want {
		t.Errorf("Dir = %q, want %q", got, want)
	}
	if got := RelRoot([]byte("order"), 10); got != "/3/3/order" {
		t.Errorf("RelRoot = %q, want /3/3/order", got)
	}
	if got := RelRoot([]byte("life1"), 100); got != "/84/44/life1" {
		t.Errorf("RelRoot = %q, want /84/44/life1", got)
	}
	// Names the original accepted: its path join cleans "" and "." away
	// (their directory is the bucket) and keeps every other byte.
	for _, name := range []string{"", ".", `a\b`, "with space", "..."} {
		p1, p2 := Buckets([]byte(name), 10)
		want := fmt.Sprintf("/%d/%d/%s", p1, p2, name)
		if name == "" || name == "." {
			want = fmt.Sprintf("/%d/%d", p1, p2)
		}
		if got := RelRoot([]byte(name), 10); got != want {
			t.Errorf("RelRoot(%q) = %q, want the original's %q", name, got, want)
		}
	}
}

func TestBucketsPanicsOnBadFolderCount(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for folderCount 0")
		}
	}()
	Buckets([]byte("order"), 0)
}

func TestAllocFree(t *testing.T) {
	b := benchBlock()
	buf := make([]byte, 0, 512)
	if a := testing.AllocsPerRun(100, func() { buf = AppendBlock(buf[:0], &b) }); a != 0 {
		t.Errorf("AppendBlock allocates %v times", a)
	}
	enc := AppendBlock(nil, &b)
	if a := testing.AllocsPerRun(100, func() { _, _, _ = DecodeBlock(enc) }); a != 0 {
		t.Errorf("DecodeBlock allocates %v times", a)
	}
	name := []byte("order")
	if a := testing.AllocsPerRun(100, func() { Buckets(name, 10) }); a != 0 {
		t.Errorf("Buckets allocates %v times", a)
	}
}

func benchBlock() Block {
	return Block{Ts: 1795950274738, EventID: 123456789, SaveTime: 1795950274738, Index: 3, SrcFileID: 17, SrcPos: 123456789,
		Record: cat(h("c0000000 00000000"), bytes.Repeat([]byte("b"), 192))}
}

func BenchmarkAppendBlock(b *testing.B) {
	blk := benchBlock()
	buf := make([]byte, 0, 512)
	b.SetBytes(int64(EncodedLen(&blk)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendBlock(buf[:0], &blk)
	}
}

// BenchmarkDecodeBlock compares the frozen pre-fast-path decoder
// (reference), the careful path alone and DecodeBlock in one run, since only
// their ratio means anything on a shared machine.
func BenchmarkDecodeBlock(b *testing.B) {
	blk := benchBlock()
	enc := AppendBlock(nil, &blk)
	for _, d := range []struct {
		name   string
		decode func([]byte) (Block, int, error)
	}{{"reference", refDecodeBlock}, {"careful", decodeCareful}, {"fast", DecodeBlock}} {
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := d.decode(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDelivery is the second look the subscription path takes at each
// block after DecodeBlock.
func BenchmarkDelivery(b *testing.B) {
	blk := benchBlock()
	enc := AppendBlock(nil, &blk)
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, _, ok := Delivery(enc); !ok {
			b.Fatal("not ok")
		}
	}
}

func BenchmarkBuckets(b *testing.B) {
	name := []byte("some-topic-name")
	b.ReportAllocs()
	for b.Loop() {
		Buckets(name, 10)
	}
}

func TestDelivery(t *testing.T) {
	for name, b := range validBlocks() {
		raw := AppendBlock(nil, &b)
		ts, rec, ok := Delivery(raw)
		if !ok || ts != b.Ts || !bytes.Equal(rec, b.Record) {
			t.Errorf("%s: ts %d ok %v record %x, want %d %x", name, ts, ok, rec, b.Ts, b.Record)
		}
	}
	if _, _, ok := Delivery([]byte{1, 0}); ok {
		t.Error("short input accepted")
	}
}
