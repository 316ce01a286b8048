package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	tests := []Record{
		{Body: []byte("x")},
		{Headers: []KV{{"", ""}}, Body: nil},
		{Headers: []KV{{"k1", "v1"}, {"key-two", ""}, {"", "v3"}}, Body: []byte("payload\x00bytes")},
		{Headers: []KV{{strings.Repeat("k", 300), strings.Repeat("v", 70000)}}, Body: bytes.Repeat([]byte{0xff}, 1000)},
	}
	for i, want := range tests {
		enc, err := AppendRecord([]byte("prefix"), want)
		if err != nil {
			t.Fatal(err)
		}
		got, n, err := ParseRecord(append(enc[len("prefix"):], "trailing"...))
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if n != len(enc)-len("prefix") {
			t.Fatalf("%d: consumed %d of %d", i, n, len(enc)-len("prefix"))
		}
		if fmt.Sprint(got.Headers) != fmt.Sprint(want.Headers) || !bytes.Equal(got.Body, want.Body) {
			t.Fatalf("%d: got %+v", i, got)
		}
		if c, err := CountRecords(enc[len("prefix"):], 0); err != nil || c != 1 {
			t.Fatalf("%d: CountRecords = %d, %v", i, c, err)
		}
	}
}

func TestParseRecordMalformed(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{"short", []byte{1, 0, 0, 0, 0, 0, 0}},
		{"content overruns", []byte{5, 0, 0, 0, 0, 0, 0, 0, 'a'}},
		{"header count too large for size", []byte{4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}},
		{"huge header count", []byte{8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"key overruns", []byte{8, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0}},
		{"value overruns", []byte{9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 'v'}},
		{"value length truncated", []byte{10, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0}},
	}
	for _, tt := range tests {
		if _, _, err := ParseRecord(tt.in); !errors.Is(err, ErrMalformedRecord) {
			t.Errorf("%s: %v, want ErrMalformedRecord", tt.name, err)
		}
	}
}

func TestCountRecords(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		max     int
		want    int
		wantErr error
	}{
		{"one", rec(1), 0, 1, nil},
		{"three", recs(1, 2, 3), 0, 3, nil},
		{"at cap", recs(1, 2, 3), 3, 3, nil},
		{"over cap", recs(1, 2, 3), 2, 0, ErrTooManyRecords},
		{"empty", nil, 0, 0, ErrInvalidRecords},
		{"eight bytes", recs(0), 0, 0, ErrInvalidRecords},
		{"zero content first", append(recs(0), rec(1)...), 0, 0, ErrInvalidRecords},
		{"zero content later", append(rec(1), recs(0)...), 0, 0, ErrInvalidRecords},
		{"one trailing byte", append(rec(1), 0), 0, 0, ErrInvalidRecords},
		{"eight trailing bytes", append(rec(1), make([]byte, 8)...), 0, 0, ErrInvalidRecords},
		{"overrun", rec(5)[:12], 0, 0, ErrInvalidRecords},
		{"content size 0xffffffff", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1}, 0, 0, ErrInvalidRecords},
	}
	for _, tt := range tests {
		got, err := CountRecords(tt.in, tt.max)
		if !errors.Is(err, tt.wantErr) || got != tt.want {
			t.Errorf("%s: %d, %v; want %d, %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestNextRecord(t *testing.T) {
	payload := recs(1, 4, 2)
	var sizes []int
	for rest := payload; len(rest) > 0; {
		var r []byte
		r, rest = NextRecord(rest)
		sizes = append(sizes, len(r))
	}
	if fmt.Sprint(sizes) != "[9 12 10]" {
		t.Fatalf("record sizes %v", sizes)
	}
}

func TestValidateTopicName(t *testing.T) {
	ok := []string{"order", "a", strings.Repeat("x", MaxTopicNameLen), "a.b", "...", "é-ü_ok", "A~!@#$%^&*()"}
	bad := []string{"", strings.Repeat("x", MaxTopicNameLen+1), ".", "..", "a/b", `a\b`, "a b", "a\tb", "a\nb", "a\rb", "a\x00", "a\x7f", "../../evil"}
	for _, n := range ok {
		if err := ValidateTopicName([]byte(n)); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range bad {
		err := ValidateTopicName([]byte(n))
		if err == nil || !IsBizError(err) || !strings.HasPrefix(err.Error(), "invalid topic name") {
			t.Errorf("%q: %v, want an invalid-topic-name BizError", n, err)
		}
	}
}

func TestBizError(t *testing.T) {
	wrapped := fmt.Errorf("create: %w", ErrTopicExist)
	if !IsBizError(wrapped) || !errors.Is(wrapped, ErrTopicExist) || errors.Is(wrapped, ErrTopicNotExist) {
		t.Fatal("BizError sentinels do not survive wrapping")
	}
	if IsBizError(errors.New("topic exist")) {
		t.Fatal("a plain error with the same text is not a BizError")
	}
	// Clients compare these texts: they are the original server's (§2.3).
	texts := map[*BizError]string{
		ErrNotSupported:      "don't support action",
		ErrPubSizeTooSmall:   "invalid request, payload size must be more than 8",
		ErrInvalidPubPayload: "invalid pub payload",
		ErrSlavePub:          "just master can pub message",
		ErrSlaveManage:       "just master can manage topic",
		ErrExpireTooSoon:     "expire MUST more than 10s",
		ErrTopicExist:        "topic exist",
		ErrTopicNotExist:     "topic not exist",
		ErrInvalidDelay:      "invalid delay request",
		ErrDelayTooShort:     "delay time must be more than 1 second",
		ErrTopicNameRequired: "topic name is required",
		ErrInvalidReplicaID:  "invalid replica eventId",
	}
	for e, want := range texts {
		if e.Error() != want {
			t.Errorf("%q, want %q", e.Error(), want)
		}
	}
}
