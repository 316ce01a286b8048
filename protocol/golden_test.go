package protocol

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// unhex decodes the spec's Appendix A notation: hex byte pairs, with quoted
// ASCII strings, separated by spaces and '|'.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	var out []byte
	for len(s) > 0 {
		switch s[0] {
		case ' ', '|', '\n', '\t':
			s = s[1:]
		case '"':
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				t.Fatalf("unterminated string in %q", s)
			}
			out = append(out, s[1:1+end]...)
			s = s[2+end:]
		default:
			b, err := hex.DecodeString(s[:2])
			if err != nil {
				t.Fatalf("bad hex %q: %v", s[:2], err)
			}
			out = append(out, b...)
			s = s[2:]
		}
	}
	return out
}

// Appendix A: the 30-byte record with header traceId=x1 and body "hello".
const goldenRecordHex = `16 00 00 00 | 01 00 00 00 | 07 00 00 00 "traceId" | 02 00 00 00 "x1" | "hello"`

func goldenRecord(t testing.TB) []byte {
	rec := unhex(t, goldenRecordHex)
	if len(rec) != 30 {
		t.Fatalf("golden record is %d bytes, want 30", len(rec))
	}
	return rec
}

func goldenPub(t testing.TB) []byte {
	return append(unhex(t, `01 | 05 00 | 1e 00 00 00 | `+strings.Repeat("00 ", 12)+`| 06 | "order" | "tid-p1"`), goldenRecord(t)...)
}

func TestGoldenRecord(t *testing.T) {
	want := goldenRecord(t)
	got, err := AppendRecord(nil, Record{Headers: []KV{{"traceId", "x1"}}, Body: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendRecord = % x\nwant           % x", got, want)
	}
	rec, n, err := ParseRecord(want)
	if err != nil {
		t.Fatal(err)
	}
	if n != 30 || len(rec.Headers) != 1 || rec.Headers[0] != (KV{"traceId", "x1"}) || string(rec.Body) != "hello" {
		t.Fatalf("ParseRecord = %+v, %d", rec, n)
	}
}

func TestGoldenPubRequest(t *testing.T) {
	want := goldenPub(t)
	got, err := AppendPub(nil, []byte("order"), []byte("tid-p1"), goldenRecord(t))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendPub = % x\nwant        % x", got, want)
	}
	req, err := ReadRequest(bytes.NewReader(want), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if req.Header.Cmd != CmdPub || string(req.Topic) != "order" || string(req.TraceID) != "tid-p1" ||
		req.Header.PayloadSize() != 30 || !bytes.Equal(req.Payload, goldenRecord(t)) || req.RecordCount != 1 {
		t.Fatalf("ReadRequest = %+v", req)
	}
}

func TestGoldenReplies(t *testing.T) {
	zeros8 := strings.Repeat("00 ", 8)
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"ok", AppendReplyOK(nil), "c8 00 " + zeros8},
		{"alive", AppendReplyAlive(nil), "c9 00 " + zeros8},
		{"sub end", AppendReplySubEnd(nil), "ff 00 " + zeros8},
		{"error", AppendReplyError(nil, "topic exist"), `90 01 0b 00 00 00 00 00 00 00 "topic exist"`},
		{"sub frame header", AppendSubFrameHeader(nil, 5, 245), "c8 00 05 00 f5 00 00 00 00 00"},
		{"first sub message", AppendSubMessage(nil, 0x1a226fa68b2, 2, 0, 75, goldenRecord(t)),
			"b268fa26a2010000 0200000000000000 0000000000000000 4b00000000000000" + hex.EncodeToString(goldenRecord(t))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.want)
			if !bytes.Equal(tt.got, want) {
				t.Fatalf("got  % x\nwant % x", tt.got, want)
			}
		})
	}
}

func TestGoldenInfoHeader(t *testing.T) {
	body := bytes.Repeat([]byte{'x'}, 169)
	got, err := AppendReplyJSON(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	want := append(unhex(t, "c8 00 a9 00 00 00 00 00 00 00"), body...)
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x", got[:10])
	}
	var h RespHeader
	copy(h[:], got)
	if h.Code() != StatusOK || h.JSONLen() != 169 {
		t.Fatalf("header code %d len %d", h.Code(), h.JSONLen())
	}
}

func TestGoldenRequestsFromSpec(t *testing.T) {
	// §4.2: the 28-byte valid-list and replica requests of a starting slave.
	vl, _ := AppendValidList(nil, nil, 3)
	if want := unhex(t, "63"+strings.Repeat("00", 19)+"0300000000000000"); !bytes.Equal(vl, want) {
		t.Fatalf("valid list % x", vl)
	}
	rp, _ := AppendReplica(nil, 3)
	if want := unhex(t, "40"+strings.Repeat("00", 19)+"0300000000000000"); !bytes.Equal(rp, want) {
		t.Fatalf("replica % x", rp)
	}
	// §1.5.1: the Go client's sub is 20 + topic + 8 + 8 + 4 + who bytes with
	// the ack flag set.
	sub, _ := AppendSub(nil, []byte("order"), nil, 7, 10, 3*time.Second, []byte("w1"))
	if len(sub) != 20+5+8+8+4+2 || sub[3] != 10 || sub[4] != 1 {
		t.Fatalf("sub % x", sub)
	}
}
