package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func recordWith(t testing.TB, headers []KV, body string) []byte {
	t.Helper()
	r, err := AppendRecord(nil, Record{Headers: headers, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMessageID(t *testing.T) {
	id32 := "0123456789abcdef0123456789abcdef"
	// A record claiming 3 headers whose second runs past the record.
	broken := recordWith(t, []KV{{Key: MsgIDHeader, Value: "early"}}, "")
	broken = binary.LittleEndian.AppendUint32(broken, 1000)
	binary.LittleEndian.PutUint32(broken[0:], uint32(len(broken)-RecordPrefixSize))
	binary.LittleEndian.PutUint32(broken[4:], 3)
	brokenFirst := recordWith(t, nil, "body")
	binary.LittleEndian.PutUint32(brokenFirst[4:], 1) // 1 header: "body" is no header

	cases := []struct {
		name    string
		payload []byte
		want    string // "" with wantNil: no id
		wantNil bool
		errLen  int // > 0: refused, naming this length
	}{
		{name: "no headers", payload: recordWith(t, nil, "x"), wantNil: true},
		{name: "other headers", payload: recordWith(t, []KV{{Key: "traceId", Value: "1"}}, "x"), wantNil: true},
		{name: "id first", payload: recordWith(t, []KV{{Key: MsgIDHeader, Value: id32}, {Key: "a", Value: "b"}}, "x"), want: id32},
		{name: "id after others", payload: recordWith(t, []KV{{Key: "a", Value: "b"}, {Key: MsgIDHeader, Value: "z"}}, "x"), want: "z"},
		{name: "first occurrence counts", payload: recordWith(t, []KV{{Key: MsgIDHeader, Value: "1"}, {Key: MsgIDHeader, Value: "2"}}, ""), want: "1"},
		{name: "binary id", payload: recordWith(t, []KV{{Key: MsgIDHeader, Value: "\x00\xff\n\t"}}, ""), want: "\x00\xff\n\t"},
		{name: "128 bytes", payload: recordWith(t, []KV{{Key: MsgIDHeader, Value: strings.Repeat("i", 128)}}, ""), want: strings.Repeat("i", 128)},
		{name: "129 bytes", payload: recordWith(t, []KV{{Key: MsgIDHeader, Value: strings.Repeat("i", 129)}}, ""), errLen: 129},
		{name: "empty", payload: recordWith(t, []KV{{Key: MsgIDHeader, Value: ""}}, "x"), errLen: -1},
		{name: "key differs in case", payload: recordWith(t, []KV{{Key: "Smss-Msg-Id", Value: "x"}}, ""), wantNil: true},
		{name: "key prefix", payload: recordWith(t, []KV{{Key: "smss-msg-i", Value: "x"}}, ""), wantNil: true},
		{name: "only the first record counts", payload: append(recordWith(t, nil, "first"), recordWith(t, []KV{{Key: MsgIDHeader, Value: "2nd"}}, "")...), wantNil: true},
		{name: "headers broken after the id", payload: broken, want: "early"},
		{name: "headers broken before any id", payload: brokenFirst, wantNil: true},
		{name: "short payload", payload: []byte{1, 0, 0}, wantNil: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MessageID(tc.payload)
			if tc.errLen != 0 {
				n := tc.errLen
				if n < 0 {
					n = 0
				}
				want := "smss-msg-id must be 1 to 128 bytes, got " + strconv.Itoa(n)
				if err == nil || err.Error() != want || !errors.Is(err, ErrInvalidMsgID) || !IsBizError(err) {
					t.Fatalf("error %v, want the business error %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantNil != (got == nil) || string(got) != tc.want {
				t.Fatalf("id %q (nil %v), want %q (nil %v)", got, got == nil, tc.want, tc.wantNil)
			}
		})
	}
}

// A record without headers costs nothing to look at.
func TestMessageIDDoesNotAllocate(t *testing.T) {
	with := recordWith(t, []KV{{Key: "traceId", Value: "1"}, {Key: MsgIDHeader, Value: "0123456789abcdef"}}, "body")
	without := recordWith(t, nil, "body")
	if n := testing.AllocsPerRun(100, func() { MessageID(with); MessageID(without) }); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

// FuzzMessageID checks the id parser against ParseRecord on arbitrary
// payloads: it never panics, returns a slice of the first record, agrees
// with the full decoder whenever that decodes the first record, and
// refuses only lengths outside 1..128.
func FuzzMessageID(f *testing.F) {
	f.Add(recordWith(f, []KV{{Key: MsgIDHeader, Value: "abc"}}, "body"))
	f.Add(recordWith(f, []KV{{Key: "k", Value: "v"}, {Key: MsgIDHeader, Value: strings.Repeat("x", 129)}}, ""))
	f.Add(recordWith(f, []KV{{Key: MsgIDHeader, Value: ""}}, "b"))
	f.Add(append(recordWith(f, nil, "a"), recordWith(f, []KV{{Key: MsgIDHeader, Value: "2"}}, "b")...))
	f.Add([]byte{20, 0, 0, 0, 255, 255, 255, 255, 11, 0, 0, 0})
	f.Fuzz(func(t *testing.T, payload []byte) {
		id, err := MessageID(payload)
		if err != nil {
			if !errors.Is(err, ErrInvalidMsgID) || !IsBizError(err) {
				t.Fatalf("error %v is not an ErrInvalidMsgID business error", err)
			}
			if id != nil {
				t.Fatalf("id %q returned with an error", id)
			}
		}
		if id != nil {
			if len(id) < 1 || len(id) > MaxMsgIDLen {
				t.Fatalf("id of %d bytes accepted", len(id))
			}
			if !bytes.Contains(payload, id) {
				t.Fatalf("id %q is not from the payload", id)
			}
		}
		rec, _, perr := ParseRecord(payload)
		if perr != nil {
			return
		}
		var want *KV
		for i := range rec.Headers {
			if rec.Headers[i].Key == MsgIDHeader {
				want = &rec.Headers[i]
				break
			}
		}
		switch {
		case want == nil:
			if id != nil || err != nil {
				t.Fatalf("no id header, got %q, %v", id, err)
			}
		case len(want.Value) == 0 || len(want.Value) > MaxMsgIDLen:
			if err == nil {
				t.Fatalf("id of %d bytes not refused", len(want.Value))
			}
		default:
			if err != nil || string(id) != want.Value {
				t.Fatalf("id %q, %v, want %q", id, err, want.Value)
			}
		}
	})
}
