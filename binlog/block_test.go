package binlog

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
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

// Appendix A records. The 30-byte one is spelled out byte by byte as in the
// spec; the batch's three records are 9, 20 and 11 bytes (the topic file
// lines of Appendix A give payloadSize 10, 21, 12), 40 bytes in all.
var (
	recHello   = cat(h("16000000 01000000 07000000"), []byte("traceId"), h("02000000"), []byte("x1"), []byte("hello"))
	recBatch   = cat(record("a"), record("hello world!"), record("xyz"))
	recDelayed = cat(h("0700000000000000"), []byte("delayed"))
	delayValue = cat(h("8370fa26a2010000 0600000000000000"), recDelayed)
)

// appendixA is binlog file 0 of Appendix A, assembled from the spec's text
// rather than by AppendBlock.
var appendixA = cat(
	h("28000000"), []byte("1795950274737\t2\t1\t1795950274737\torder\t9\n"), h("0000000000000000"), h("0a"),
	h("29000000"), []byte("1795950274738\t1\t2\t1795950274738\torder\t31\n"), recHello, h("0a"),
	h("29000000"), []byte("1795950274738\t1\t3\t1795950274738\torder\t41\n"), recBatch, h("0a"),
	h("2a000000"), []byte("1795950274739\t16\t6\t1795950274739\torder\t32\n"), delayValue, h("0a"),
	h("2b000000"), []byte("1795950276740\t101\t7\t1795950276740\torder\t32\n"), delayValue, h("0a"),
)

var appendixABlocks = []struct {
	off       int
	block     Block
	count     int
	lastEvent int64
}{
	{0, Block{WriteTime: 1795950274737, Cmd: CmdCreate, EventID: 1, Timestamp: 1795950274737, Topic: []byte("order"), Payload: make([]byte, 8)}, 1, 1},
	{53, Block{WriteTime: 1795950274738, Cmd: CmdPub, EventID: 2, Timestamp: 1795950274738, Topic: []byte("order"), Payload: recHello}, 1, 2},
	{129, Block{WriteTime: 1795950274738, Cmd: CmdPub, EventID: 3, Timestamp: 1795950274738, Topic: []byte("order"), Payload: recBatch}, 3, 5},
	{215, Block{WriteTime: 1795950274739, Cmd: CmdDelay, EventID: 6, Timestamp: 1795950274739, Topic: []byte("order"), Payload: delayValue}, 1, 6},
	{293, Block{WriteTime: 1795950276740, Cmd: CmdDelayApply, EventID: 7, Timestamp: 1795950276740, Topic: []byte("order"), Payload: delayValue}, 1, 7},
}

func TestAppendixARecords(t *testing.T) {
	if len(recHello) != 30 || len(recBatch) != 40 || len(recDelayed) != 15 {
		t.Fatalf("record sizes %d/%d/%d, want 30/40/15", len(recHello), len(recBatch), len(recDelayed))
	}
	// The delay was 2000 ms after the delay request's timestamp.
	if got := int64(binary.LittleEndian.Uint64(delayValue)); got != 1795950274739+2000 {
		t.Fatalf("trigger time %d", got)
	}
}

func TestAppendixAEncode(t *testing.T) {
	var file []byte
	for _, tc := range appendixABlocks {
		if len(file) != tc.off {
			t.Fatalf("block eventId %d starts at %d, want %d", tc.block.EventID, len(file), tc.off)
		}
		before := len(file)
		file = AppendBlock(file, &tc.block)
		if got := EncodedLen(&tc.block); got != len(file)-before {
			t.Errorf("EncodedLen(eventId %d) = %d, appended %d", tc.block.EventID, got, len(file)-before)
		}
	}
	if len(file) != 372 {
		t.Errorf("file length %d, want 372", len(file))
	}
	if !bytes.Equal(file, appendixA) {
		t.Fatalf("encoding differs from Appendix A:\n got %q\nwant %q", file, appendixA)
	}
	if !bytes.Equal(appendixA[:53], cat(h("28000000"), []byte("1795950274737\t2\t1\t1795950274737\torder\t9\n"), make([]byte, 8), []byte{'\n'})) {
		t.Fatal("§5.4 create example mismatch")
	}
}

func TestAppendixADecode(t *testing.T) {
	off := 0
	for _, tc := range appendixABlocks {
		if off != tc.off {
			t.Fatalf("offset %d, want %d", off, tc.off)
		}
		b, n, err := DecodeBlock(appendixA[off:])
		if err != nil {
			t.Fatalf("decode at %d: %v", off, err)
		}
		assertBlockEqual(t, b, tc.block)
		cnt, err := b.MessageCount()
		if err != nil || cnt != tc.count {
			t.Errorf("eventId %d: MessageCount = %d, %v; want %d", b.EventID, cnt, err, tc.count)
		}
		last, err := b.LastEventID()
		if err != nil || last != tc.lastEvent {
			t.Errorf("eventId %d: LastEventID = %d, %v; want %d", b.EventID, last, err, tc.lastEvent)
		}
		off += n
	}
	if off != len(appendixA) {
		t.Fatalf("consumed %d of %d bytes", off, len(appendixA))
	}
}

func assertBlockEqual(t *testing.T, got, want Block) {
	t.Helper()
	if got.WriteTime != want.WriteTime || got.Cmd != want.Cmd || got.EventID != want.EventID ||
		got.Timestamp != want.Timestamp || !bytes.Equal(got.Topic, want.Topic) || !bytes.Equal(got.Payload, want.Payload) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

func validBlocks() map[string]Block {
	big := bytes.Repeat([]byte{0xab}, 70000)
	binary.LittleEndian.PutUint32(big, uint32(len(big)-8))
	delay := func(id int64, recs []byte) []byte {
		p := binary.LittleEndian.AppendUint64(nil, 1795950276739)
		p = binary.LittleEndian.AppendUint64(p, uint64(id))
		return append(p, recs...)
	}
	m := map[string]Block{
		"delete":              {WriteTime: 1, Cmd: CmdDelete, EventID: 9, Timestamp: 2, Topic: []byte("order")},
		"delete empty topic":  {Cmd: CmdDelete, EventID: 1, Topic: nil},
		"create expiring":     {WriteTime: 5, Cmd: CmdCreate, EventID: 10, Timestamp: 5, Topic: []byte("life1"), Payload: binary.LittleEndian.AppendUint64(nil, 1795950300000)},
		"create odd name":     {WriteTime: 5, Cmd: CmdCreate, EventID: 11, Timestamp: 5, Topic: []byte("../../x y\r\x00\xff"), Payload: make([]byte, 8)},
		"pub max ids":         {WriteTime: 1<<63 - 1, Cmd: CmdPub, EventID: 1<<63 - 1, Timestamp: 1<<63 - 1, Topic: []byte("t"), Payload: record("x")},
		"pub large":           {WriteTime: 7, Cmd: CmdPub, EventID: 12, Timestamp: 7, Topic: []byte("t2"), Payload: big},
		"pub many":            {WriteTime: 7, Cmd: CmdPub, EventID: 13, Timestamp: 7, Topic: []byte("t2"), Payload: bytes.Repeat(record("m"), 50)},
		"delay":               {WriteTime: 8, Cmd: CmdDelay, EventID: 100, Timestamp: 8, Topic: []byte("t2"), Payload: delay(100, recBatch)},
		"delay apply batch":   {WriteTime: 9, Cmd: CmdDelayApply, EventID: 200, Timestamp: 9, Topic: []byte("t2"), Payload: delay(100, recBatch)},
		"pub long topic name": {WriteTime: 7, Cmd: CmdPub, EventID: 14, Timestamp: 7, Topic: bytes.Repeat([]byte("n"), 128), Payload: recHello},
	}
	for _, tc := range appendixABlocks {
		m[fmt.Sprintf("appendix A eventId %d", tc.block.EventID)] = tc.block
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
			// Trailing bytes (the next block) must not be consumed.
			got, n, err := DecodeBlock(append(enc[:len(enc):len(enc)], 0x28, 0, 0))
			if err != nil {
				t.Fatal(err)
			}
			if n != len(enc) {
				t.Fatalf("n = %d, want %d", n, len(enc))
			}
			assertBlockEqual(t, got, want)
			if _, err := got.LastEventID(); err != nil {
				t.Fatal(err)
			}
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

// block builds raw bytes from a command line and a payload (given with its
// '\n'), so that tests can express blocks AppendBlock would never produce.
func block(line string, payload []byte) []byte {
	return cat(binary.LittleEndian.AppendUint32(nil, uint32(len(line))), []byte(line), payload)
}

// torn is block(line, payload) cut after keep payload bytes.
func torn(line string, payload []byte, keep int) []byte {
	return block(line, payload)[:4+len(line)+keep]
}

func TestDecodeCorrupt(t *testing.T) {
	nl := []byte{'\n'}
	pub := cat(recHello, nl)
	delay6 := cat(delayValue, nl)
	cases := []struct {
		name string
		buf  []byte
		want string // substring of the reason
	}{
		{"zero length", make([]byte, 64), "length 0"},
		{"length too short", block("1\t1\n", nil), "length"},
		{"length too long", cat(h("01040000"), make([]byte, 2000)), "length 1025"},
		{"missing tab", block("1795950274738\t1\t2\t1795950274738order\t31\n", pub), "5 fields"},
		{"extra field", block("1\t1\t2\t1\torder\t31\t0\n", pub), "more than 6"},
		{"no final newline", block("1\t3\t2\t1\torder\t0\t", nil), "newline"},
		{"newline inside", block("1\t3\n2\t1\torder\t0\n", nil), "newline at offset"},
		{"non-digit writeTime", block("17x\t3\t2\t1\torder\t0\n", nil), "writeTime"},
		{"signed eventId", block("1\t3\t+2\t1\torder\t0\n", nil), "eventId"},
		{"negative timestamp", block("1\t3\t2\t-1\torder\t0\n", nil), "timestamp"},
		{"leading zero", block("1\t3\t02\t1\torder\t0\n", nil), "leading zero"},
		{"padded payloadLen", block("1\t3\t2\t1\torder\t 0\n", nil), "payloadLen"},
		{"empty cmd", block("1\t\t2\t1\torder\t0\n", nil), "empty cmd"},
		{"overflow", block("9223372036854775808\t3\t2\t1\torder\t0\n", nil), "overflows"},
		{"too many digits", block("12345678901234567890\t3\t2\t1\torder\t0\n", nil), "too long"},
		{"eventId zero", block("1\t3\t0\t1\torder\t0\n", nil), "not positive"},
		{"unknown cmd", block("1\t4\t2\t1\torder\t0\n", nil), "unknown cmd 4"},
		{"cmd 257 wraps to 1", block("1\t257\t2\t1\torder\t31\n", pub), "unknown cmd 257"},
		{"create payloadLen", block("1\t2\t1\t1\torder\t10\n", make([]byte, 10)), "create payloadLen 10"},
		{"create no payload", block("1\t2\t1\t1\torder\t0\n", nil), "create payloadLen 0"},
		{"delete with payload", block("1\t3\t1\t1\torder\t9\n", make([]byte, 9)), "delete payloadLen 9"},
		{"payloadLen 1", block("1\t1\t1\t1\torder\t1\n", nl), "pub payloadLen 1"},
		{"pub payload too short", block("1\t1\t1\t1\torder\t9\n", make([]byte, 9)), "pub payloadLen 9"},
		{"delay payload too short", block("1\t16\t1\t1\torder\t25\n", make([]byte, 25)), "payloadLen 25"},
		{"payloadLen huge", block("1\t1\t1\t1\torder\t4294967313\n", nil), "exceeds"},
		{"payload without newline", block("1\t1\t2\t1\torder\t31\n", cat(recHello, []byte{'x'})), "newline"},
		{"create without newline", block("1\t2\t1\t1\torder\t9\n", make([]byte, 9)), "newline"},
		{"pub bad records", block("1\t1\t2\t1\torder\t31\n", cat(h("15000000"), recHello[4:], nl)), "invalid message records"},
		{"pub empty record", block("1\t1\t2\t1\torder\t10\n", cat(make([]byte, 9), nl)), "invalid message records"},
		{"delay id mismatch", block("1\t16\t7\t1\torder\t32\n", delay6), "differs"},
		{"delay bad records", block("1\t16\t6\t1\torder\t32\n", cat(delayValue[:16], h("0800000000000000"), []byte("delayed"), nl)), "invalid message records"},
		{"delay-apply bad records", block("1\t101\t7\t1\torder\t32\n", cat(delayValue[:16], h("0000000000000000"), []byte("delayed"), nl)), "invalid message records"},

		// Proof of corruption within a torn block.
		{"torn: non-digit", block("1795950274738\t1\t2\t17x5", nil)[:25], "timestamp"},
		{"torn: unknown cmd", block("1795950274738\t7\t2\t1795950274738\torder\t31\n", nil)[:22], "unknown cmd"},
		{"torn: eventId zero", block("1\t1\t0\t1\torder\t31\n", nil)[:12], "not positive"},
		{"torn: leading zero", cat(h("40000000"), []byte("1\t1\t00")), "leading zero"},
		{"torn: too many fields", cat(h("40000000"), []byte("1\t1\t1\t1\to\t1\t2")), "more than 6"},
		{"torn: newline early", cat(h("40000000"), []byte("1\t1\n")), "newline"},
		{"torn: delay id mismatch", torn("1\t16\t7\t1\torder\t32\n", delay6, 16), "differs"},
		{"torn: empty record", torn("1\t1\t2\t1\torder\t31\n", make([]byte, 31), 4), "empty record"},
		{"torn: record overruns", torn("1\t1\t2\t1\torder\t31\n", cat(h("17000000"), recHello[4:], nl), 6), "overruns"},
		{"torn: trailing bytes", torn("1\t1\t2\t1\torder\t35\n", cat(recHello, make([]byte, 5)), 30), "trailing"},
		{"torn: second record", torn("1\t1\t2\t1\torder\t41\n", cat(recHello, make([]byte, 11)), 34), "empty record"},
		{"torn: delay-apply empty record", torn("1\t101\t7\t1\torder\t32\n", cat(delayValue[:16], make([]byte, 16)), 20), "empty record"},
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
			if !strings.HasPrefix(err.Error(), "corrupt binlog block: ") {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
}

func TestMessageCountErrors(t *testing.T) {
	cases := map[string]Block{
		"unknown cmd":         {Cmd: 4, EventID: 1},
		"pub invalid":         {Cmd: CmdPub, EventID: 1, Payload: recHello[:29]},
		"pub empty":           {Cmd: CmdPub, EventID: 1},
		"delay-apply short":   {Cmd: CmdDelayApply, EventID: 1, Payload: make([]byte, 15)},
		"delay-apply invalid": {Cmd: CmdDelayApply, EventID: 1, Payload: delayValue[:30]},
	}
	for name, b := range cases {
		if _, err := b.MessageCount(); !errors.As(err, new(*CorruptError)) {
			t.Errorf("%s: MessageCount err = %v, want *CorruptError", name, err)
		}
		if _, err := b.LastEventID(); err == nil {
			t.Errorf("%s: LastEventID succeeded", name)
		}
	}
}

func benchBlock() Block {
	return Block{WriteTime: 1795950274738, Cmd: CmdPub, EventID: 123456789, Timestamp: 1795950274738,
		Topic: []byte("order"), Payload: cat(h("c0000000 00000000"), bytes.Repeat([]byte("b"), 192))}
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

// benchPub100 is a pub of 100 records of 200 bytes, the batch shape of a
// busy producer.
func benchPub100() Block {
	blk := benchBlock()
	blk.Payload = bytes.Repeat(blk.Payload, 100)
	return blk
}

// BenchmarkDecodeBlock compares the frozen pre-fast-path decoder
// (reference), the careful path alone and DecodeBlock in one run, since only
// their ratio means anything on a shared machine.
func BenchmarkDecodeBlock(b *testing.B) {
	one, hundred := benchBlock(), benchPub100()
	for _, blk := range []struct {
		name string
		enc  []byte
	}{{"pub1", AppendBlock(nil, &one)}, {"pub100", AppendBlock(nil, &hundred)}} {
		for _, d := range []struct {
			name   string
			decode func([]byte) (Block, int, error)
		}{{"reference", refDecodeBlock}, {"careful", decodeCareful}, {"fast", DecodeBlock}} {
			b.Run(blk.name+"/"+d.name, func(b *testing.B) {
				b.SetBytes(int64(len(blk.enc)))
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := d.decode(blk.enc); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func TestAppendBlockAllocFree(t *testing.T) {
	blk := benchBlock()
	buf := make([]byte, 0, 512)
	if a := testing.AllocsPerRun(100, func() { buf = AppendBlock(buf[:0], &blk) }); a != 0 {
		t.Errorf("AppendBlock allocates %v times", a)
	}
	enc := AppendBlock(nil, &blk)
	if a := testing.AllocsPerRun(100, func() { _, _, _ = DecodeBlock(enc) }); a != 0 {
		t.Errorf("DecodeBlock allocates %v times", a)
	}
}
