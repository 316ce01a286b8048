package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// must unwraps an encoder result in test tables; encoders only fail on
// overlong fields, which a table entry never uses by accident.
func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// rec builds one record with a body of n bytes ('a'..), no headers.
func rec(n int) []byte {
	b, _ := AppendRecord(nil, Record{Body: bytes.Repeat([]byte{'a'}, n)})
	return b
}

func recs(ns ...int) []byte {
	var out []byte
	for _, n := range ns {
		out = append(out, rec(n)...)
	}
	return out
}

// rawReq builds a request with an arbitrary area and body, bypassing the
// per-command helpers so that inconsistent requests can be expressed.
func rawReq(t testing.TB, cmd Command, area [16]byte, topic, trace string, body []byte) []byte {
	return must(AppendRequest(nil, cmd, area, []byte(topic), []byte(trace), body))
}

func le64(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }

func subBody(eventID int64, ack *int64, who string) []byte {
	b := le64(eventID)
	if ack != nil {
		b = append(b, le64(*ack)...)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(who)))
	return append(b, who...)
}

func TestReadRequest(t *testing.T) {
	small := Limits{MaxPayload: 64, MaxWho: 4, MaxRecords: 2, MaxDiscard: -1}
	// Over-limit bodies up to 200 bytes are read and discarded.
	discard := Limits{MaxPayload: 64, MaxWho: 4, MaxRecords: 2, MaxDiscard: 200}
	ack := int64(5 * time.Second)
	big := PayloadArea(0xFFFFFFFF)
	type want struct {
		errText string // "" = success
		close   bool
		check   func(t *testing.T, r *Request)
	}
	tests := []struct {
		name string
		lim  Limits
		in   []byte
		want want
	}{
		{"pub one record", DefaultLimits(), goldenPub(t), want{check: func(t *testing.T, r *Request) {
			if r.RecordCount != 1 || len(r.Payload) != 30 || string(r.Topic) != "order" {
				t.Fatalf("%+v", r)
			}
		}}},
		{"pub batch", DefaultLimits(), must(AppendPub(nil, []byte("t"), nil, recs(1, 5, 9))), want{check: func(t *testing.T, r *Request) {
			if r.RecordCount != 3 || len(r.Payload) != 9+13+17 {
				t.Fatalf("%+v", r)
			}
		}}},
		{"pub at payload cap", small, must(AppendPub(nil, []byte("t"), nil, rec(56))), want{check: func(t *testing.T, r *Request) {
			if r.RecordCount != 1 {
				t.Fatalf("%+v", r)
			}
		}}},
		{"pub size 0", DefaultLimits(), rawReq(t, CmdPub, PayloadArea(0), "t", "x", nil), want{errText: ErrPubSizeTooSmall.Msg}},
		{"pub size 8", DefaultLimits(), rawReq(t, CmdPub, PayloadArea(8), "t", "", recs(0)), want{errText: ErrPubSizeTooSmall.Msg}},
		{"pub over cap", small, rawReq(t, CmdPub, PayloadArea(65), "t", "", nil),
			want{errText: "payload of 65 bytes exceeds limit.maxPayload 64", close: true}},
		{"pub 4 GiB claim", DefaultLimits(), rawReq(t, CmdPub, big, "t", "", nil),
			want{errText: "payload of 4294967295 bytes exceeds limit.maxPayload 8388608", close: true}},
		{"pub empty record", DefaultLimits(), must(AppendPub(nil, []byte("t"), nil, append(recs(3), recs(0)...))), want{errText: ErrInvalidPubPayload.Msg}},
		{"pub record overruns", DefaultLimits(), rawReq(t, CmdPub, PayloadArea(12), "t", "", rec(5)[:12]), want{errText: ErrInvalidPubPayload.Msg}},
		{"pub trailing bytes", DefaultLimits(), must(AppendPub(nil, []byte("t"), nil, append(rec(3), 1, 0, 0, 0))), want{errText: ErrInvalidPubPayload.Msg}},
		{"pub too many records", small, must(AppendPub(nil, []byte("t"), nil, recs(1, 1, 1))),
			want{errText: "more than 2 records in one request exceeds limit.maxRecords 2"}},
		{"delay ok", DefaultLimits(), must(AppendDelay(nil, []byte("t"), []byte("tr"), 2000, recs(7, 1))), want{check: func(t *testing.T, r *Request) {
			if r.DelayMs != 2000 || r.RecordCount != 2 || len(r.Payload) != 15+9 || string(r.TraceID) != "tr" {
				t.Fatalf("%+v", r)
			}
		}}},
		{"delay size 8", DefaultLimits(), rawReq(t, CmdDelay, PayloadArea(8), "t", "", append(le64(2000), recs(0)...)), want{errText: ErrInvalidDelay.Msg}},
		{"delay size 0", DefaultLimits(), rawReq(t, CmdDelay, PayloadArea(0), "t", "", le64(2000)), want{errText: ErrInvalidDelay.Msg}},
		{"delay too short", DefaultLimits(), must(AppendDelay(nil, []byte("t"), nil, 999, rec(3))), want{errText: ErrDelayTooShort.Msg}},
		{"delay negative", DefaultLimits(), must(AppendDelay(nil, []byte("t"), nil, -5000, rec(3))), want{errText: ErrDelayTooShort.Msg}},
		{"delay bad records", DefaultLimits(), must(AppendDelay(nil, []byte("t"), nil, 1000, append(rec(3), 0, 0))), want{errText: ErrInvalidDelay.Msg}},
		{"delay too many records", small, must(AppendDelay(nil, []byte("t"), nil, 1000, recs(1, 1, 1))),
			want{errText: "more than 2 records in one request exceeds limit.maxRecords 2"}},
		{"delay over cap", small, rawReq(t, CmdDelay, PayloadArea(100), "t", "", le64(5000)),
			want{errText: "payload of 100 bytes exceeds limit.maxPayload 64", close: true}},
		{"pub over cap discarded", discard, rawReq(t, CmdPub, PayloadArea(65), "t", "tr", make([]byte, 65)),
			want{errText: "payload of 65 bytes exceeds limit.maxPayload 64"}},
		{"pub at the discard bound", discard, rawReq(t, CmdPub, PayloadArea(200), "t", "", make([]byte, 200)),
			want{errText: "payload of 200 bytes exceeds limit.maxPayload 64"}},
		{"pub over the discard bound closes", discard, rawReq(t, CmdPub, PayloadArea(201), "t", "", make([]byte, 201)),
			want{errText: "payload of 201 bytes exceeds limit.maxPayload 64", close: true}},
		{"delay over cap discarded", discard, rawReq(t, CmdDelay, PayloadArea(100), "t", "", append(le64(5000), make([]byte, 100)...)),
			want{errText: "payload of 100 bytes exceeds limit.maxPayload 64"}},
		{"delay over the discard bound closes", discard, rawReq(t, CmdDelay, PayloadArea(193), "t", "", append(le64(5000), make([]byte, 193)...)),
			want{errText: "payload of 193 bytes exceeds limit.maxPayload 64", close: true}},
		{"sub with ack timeout", DefaultLimits(), must(AppendSub(nil, []byte("order"), nil, 42, 10, 5*time.Second, []byte("w1"))), want{check: func(t *testing.T, r *Request) {
			if r.EventID != 42 || r.AckTimeout != ack || string(r.Who) != "w1" || r.Header.BatchSize() != 10 || !r.Header.HasAckTimeout() {
				t.Fatalf("%+v", r)
			}
		}}},
		{"sub flag 0 has no ack timeout", DefaultLimits(), rawReq(t, CmdSub, SubArea(3, false), "t", "", subBody(7, nil, "who")), want{check: func(t *testing.T, r *Request) {
			if r.EventID != 7 || r.AckTimeout != 0 || string(r.Who) != "who" {
				t.Fatalf("%+v", r)
			}
		}}},
		{"sub flag 2 means absent", DefaultLimits(), rawReq(t, CmdSub, [16]byte{1, 2}, "t", "", subBody(7, nil, "")), want{check: func(t *testing.T, r *Request) {
			if r.AckTimeout != 0 || len(r.Who) != 0 || r.Header.HasAckTimeout() {
				t.Fatalf("%+v", r)
			}
		}}},
		{"sub who at cap", small, rawReq(t, CmdSub, SubArea(1, true), "t", "", subBody(0, &ack, "abcd")), want{check: func(t *testing.T, r *Request) {
			if string(r.Who) != "abcd" {
				t.Fatalf("%+v", r)
			}
		}}},
		{"sub who over cap", small, rawReq(t, CmdSub, SubArea(1, true), "t", "", subBody(0, &ack, "abcde")),
			want{errText: "who of 5 bytes exceeds limit.maxWho 4", close: true}},
		{"create", DefaultLimits(), must(AppendCreate(nil, []byte("t"), nil, 1795950274737)), want{check: func(t *testing.T, r *Request) {
			if r.ExpireAt != 1795950274737 || string(r.Topic) != "t" {
				t.Fatalf("%+v", r)
			}
		}}},
		{"delete", DefaultLimits(), must(AppendDelete(nil, []byte("gone"), []byte("tr"))), want{check: func(t *testing.T, r *Request) {
			if r.Header.Cmd != CmdDelete || string(r.Topic) != "gone" || string(r.TraceID) != "tr" {
				t.Fatalf("%+v", r)
			}
		}}},
		{"alive with ignored topic", DefaultLimits(), rawReq(t, CmdAlive, [16]byte{}, "ignored", "tr", nil), want{check: func(t *testing.T, r *Request) {
			if r.Header.Cmd != CmdAlive || string(r.Topic) != "ignored" {
				t.Fatalf("%+v", r)
			}
		}}},
		{"info empty name", DefaultLimits(), must(AppendTopicInfo(nil, nil, nil)), want{check: func(t *testing.T, r *Request) {
			if r.Header.Cmd != CmdTopicInfo || len(r.Topic) != 0 {
				t.Fatalf("%+v", r)
			}
		}}},
		{"list", DefaultLimits(), must(AppendList(nil, nil)), want{check: func(t *testing.T, r *Request) {
			if r.Header.Cmd != CmdList {
				t.Fatalf("%+v", r)
			}
		}}},
		{"valid list", DefaultLimits(), must(AppendValidList(nil, nil, 9)), want{check: func(t *testing.T, r *Request) {
			if r.Header.Cmd != CmdValidList || r.EventID != 9 {
				t.Fatalf("%+v", r)
			}
		}}},
		{"replica", DefaultLimits(), must(AppendReplica(nil, 0)), want{check: func(t *testing.T, r *Request) {
			if r.Header.Cmd != CmdReplica || r.EventID != 0 {
				t.Fatalf("%+v", r)
			}
		}}},
		{"replica negative", DefaultLimits(), must(AppendReplica(nil, -1)), want{errText: ErrInvalidReplicaID.Msg}},
		{"unknown cmd 4", DefaultLimits(), rawReq(t, 4, [16]byte{}, "t", "", []byte{1, 2, 3}), want{errText: ErrNotSupported.Msg, close: true}},
		{"unknown cmd 18", DefaultLimits(), rawReq(t, 18, [16]byte{}, "", "", nil), want{errText: ErrNotSupported.Msg, close: true}},
		{"unknown cmd 98", DefaultLimits(), rawReq(t, 98, [16]byte{}, "", "", nil), want{errText: ErrNotSupported.Msg, close: true}},
		{"delay apply refused", DefaultLimits(), rawReq(t, CmdDelayApply, [16]byte{}, "t", "", le64(1)), want{errText: ErrNotSupported.Msg, close: true}},
		{"cmd 255", DefaultLimits(), rawReq(t, 255, [16]byte{}, "", "", nil), want{errText: ErrNotSupported.Msg, close: true}},
	}
	next := must(AppendAlive(nil, []byte("next")))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := bytes.NewReader(append(append([]byte{}, tt.in...), next...))
			rr := NewRequestReader(stream, tt.lim)
			var req Request
			err := rr.Read(&req)
			if tt.want.errText == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				tt.want.check(t, &req)
			} else {
				var re *RequestError
				if !errors.As(err, &re) {
					t.Fatalf("error %v (%T), want *RequestError", err, err)
				}
				if re.Error() != tt.want.errText || re.Close != tt.want.close {
					t.Fatalf("got %q close=%v, want %q close=%v", re.Error(), re.Close, tt.want.errText, tt.want.close)
				}
				if !IsBizError(err) {
					t.Fatalf("refusal text is not a BizError: %T", re.Err)
				}
				if re.Close {
					return
				}
			}
			// The request was consumed exactly: the following one parses and
			// then the stream is at its end.
			if consumed := len(tt.in) + len(next) - stream.Len(); consumed != len(tt.in) {
				t.Fatalf("consumed %d bytes, request is %d", consumed, len(tt.in))
			}
			if err := rr.Read(&req); err != nil || req.Header.Cmd != CmdAlive || string(req.TraceID) != "next" {
				t.Fatalf("following request: %v %+v", err, req)
			}
			if err := rr.Read(&req); err != io.EOF {
				t.Fatalf("after last request: %v, want io.EOF", err)
			}
		})
	}
}

func TestReadRequestIOErrors(t *testing.T) {
	full := goldenPub(t)
	for _, n := range []int{1, 10, 19, 20, 24, 30, len(full) - 1} {
		_, err := ReadRequest(bytes.NewReader(full[:n]), DefaultLimits())
		var re *RequestError
		if !errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &re) {
			t.Errorf("truncated at %d: %v, want wrapped io.ErrUnexpectedEOF", n, err)
		}
	}
	if req, err := ReadRequest(bytes.NewReader(nil), DefaultLimits()); err != io.EOF || req != nil {
		t.Errorf("empty stream: %v %v, want nil, io.EOF", req, err)
	}
	boom := errors.New("boom")
	if _, err := ReadRequest(io.MultiReader(bytes.NewReader(full[:25]), errReader{boom}), DefaultLimits()); !errors.Is(err, boom) {
		t.Errorf("read error: %v, want wrapped boom", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// A length claim is checked before anything is allocated for it.
func TestReadRequestDoesNotAllocateFromClaims(t *testing.T) {
	ack := int64(0)
	huge := []struct {
		name string
		in   []byte
	}{
		{"pub", rawReq(t, CmdPub, PayloadArea(0xFFFFFFFF), "t", "", nil)},
		{"delay", rawReq(t, CmdDelay, PayloadArea(0xFFFFFFF0), "t", "", le64(5000))},
		{"who", rawReq(t, CmdSub, SubArea(1, true), "t", "", append(append(le64(0), le64(ack)...), 0xff, 0xff, 0xff, 0xff))},
	}
	for _, tt := range huge {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := ReadRequest(bytes.NewReader(tt.in), DefaultLimits())
		runtime.ReadMemStats(&after)
		var re *RequestError
		if !errors.As(err, &re) || !re.Close {
			t.Fatalf("%s: %v, want closing RequestError", tt.name, err)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
			t.Fatalf("%s: allocated %d bytes for a refused claim", tt.name, d)
		}
	}
}

// A body larger than the reusable buffer is the request's own: the next
// read does not overwrite it.
func TestRequestOwnsItsBytes(t *testing.T) {
	a := must(AppendPub(nil, []byte("first"), []byte("t1"), rec(reuseMax)))
	b := must(AppendPub(nil, []byte("other"), []byte("t2"), bytes.Repeat([]byte{9}, 28)))
	binary.LittleEndian.PutUint32(b[len(b)-28:], 20)
	rr := NewRequestReader(bytes.NewReader(append(a, b...)), DefaultLimits())
	var r1, r2 Request
	if err := rr.Read(&r1); err != nil {
		t.Fatal(err)
	}
	keep := append([]byte{}, r1.Payload...)
	if err := rr.Read(&r2); err != nil {
		t.Fatal(err)
	}
	if string(r1.Topic) != "first" || string(r1.TraceID) != "t1" || !bytes.Equal(r1.Payload, keep) {
		t.Fatalf("first request changed: %q %q", r1.Topic, r1.TraceID)
	}
	// Appending to Topic must not scribble over TraceID or Payload.
	_ = append(r1.Topic, "XXXXXXXX"...)
	if string(r1.TraceID) != "t1" || !bytes.Equal(r1.Payload, keep) {
		t.Fatal("topic slice has spare capacity into the trace/payload")
	}
}

func TestEncodersRefuseOverlongFields(t *testing.T) {
	long := []byte(strings.Repeat("t", MaxTopicFieldLen+1))
	if out, err := AppendDelete([]byte("keep"), long, nil); !errors.Is(err, ErrFieldTooLong) || string(out) != "keep" {
		t.Errorf("topic > 65535: %v %q", err, out)
	}
	if _, err := AppendAlive(nil, long[:MaxTraceFieldLen+1]); !errors.Is(err, ErrFieldTooLong) {
		t.Errorf("trace > 255: %v", err)
	}
	if _, err := AppendAlive(nil, long[:MaxTraceFieldLen]); err != nil {
		t.Errorf("trace of 255: %v", err)
	}
	if _, err := AppendDelete(nil, long[:MaxTopicFieldLen], nil); err != nil {
		t.Errorf("topic of 65535: %v", err)
	}
}

func TestCommandString(t *testing.T) {
	for c, want := range map[Command]string{CmdSub: "sub", CmdPub: "pub", CmdDelayApply: "delayApply", CmdValidList: "validList", 7: "cmd(7)"} {
		if got := c.String(); got != want {
			t.Errorf("%d: %q want %q", c, got, want)
		}
	}
	for c := 0; c < 256; c++ {
		known := c == 0 || c == 1 || c == 2 || c == 3 || c == 16 || c == 17 || c == 64 || c == 65 || c == 99 || c == 100 ||
			c == 32 || c == 33 || // the authentication handshake (auth.go)
			c == 34 || c == 35 || c == 36 || // status, promote, follow (failover.go)
			c == 37 || c == 38 || c == 39 || // cursor list, set, reset (cursor.go)
			c == 40 || // switchover (cluster.go)
			c == 41 || c == 42 || c == 43 || c == 44 // queue create, delete, info, consume (queue.go)
		if Command(c).Acceptable() != known {
			t.Errorf("Acceptable(%d) = %v", c, !known)
		}
	}
}

func BenchmarkReadRequestPub200(b *testing.B) {
	one := must(AppendPub(nil, []byte("order"), []byte("trace-0001"), rec(192)))
	if len(one)-HeaderSize-15 != 200 {
		b.Fatalf("payload is %d bytes", len(one)-HeaderSize-15)
	}
	src := bytes.NewReader(one)
	rr := NewRequestReader(src, DefaultLimits())
	var req Request
	b.SetBytes(int64(len(one)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(one)
		if err := rr.Read(&req); err != nil {
			b.Fatal(err)
		}
	}
}

func TestZeroLimitsMeanDefaults(t *testing.T) {
	// Zero MaxDiscard means the default bound: the body is read.
	over := rawReq(t, CmdPub, PayloadArea(DefaultMaxPayload+1), "t", "", make([]byte, DefaultMaxPayload+1))
	_, err := ReadRequest(bytes.NewReader(over), Limits{MaxPayload: -1})
	if err == nil || err.Error() != "payload of 8388609 bytes exceeds limit.maxPayload 8388608" {
		t.Fatalf("zero limits: %v", err)
	}
	at := must(AppendPub(nil, []byte("t"), nil, rec(DefaultMaxPayload-RecordPrefixSize)))
	if req, err := ReadRequest(bytes.NewReader(at), Limits{}); err != nil || req.RecordCount != 1 {
		t.Fatalf("payload at the default cap: %v", err)
	}
}

// Small pub bodies reuse one buffer: a steady stream of publishes reads
// without allocating, and each request still decodes intact.
func TestRequestReusesSmallBodies(t *testing.T) {
	var stream []byte
	for i := 0; i < 200; i++ {
		stream = must(AppendPub(stream, []byte("topic"), nil, rec(100+i%50)))
	}
	r := bytes.NewReader(stream)
	rr := NewRequestReader(r, DefaultLimits())
	var req Request
	read := func() {
		if err := rr.Read(&req); err != nil {
			t.Fatal(err)
		}
		if string(req.Topic) != "topic" || req.RecordCount != 1 {
			t.Fatalf("decoded %q with %d records", req.Topic, req.RecordCount)
		}
	}
	read() // sizes the buffer
	if allocs := testing.AllocsPerRun(100, read); allocs != 0 {
		t.Fatalf("%.1f allocations per pub read, want 0", allocs)
	}
}
