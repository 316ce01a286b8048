package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"
)

// Small caps make any allocation taken from an unchecked claim stand out.
var fuzzLimits = Limits{MaxPayload: 256, MaxWho: 32, MaxRecords: 4}

// fuzzAllocBound is the most one Read may allocate under fuzzLimits: the
// topic and trace (bounded by their u16/u8 widths), the capped payload or
// who, fixed fields and slack for error values.
const fuzzAllocBound = MaxTopicFieldLen + MaxTraceFieldLen + 256 + 32 + 64 + 16<<10

// encodeBody rebuilds a request's body from its decoded fields.
func encodeBody(req *Request) []byte {
	switch req.Header.Cmd {
	case CmdPub, CmdAuthStart, CmdAuthContinue:
		return req.Payload
	case CmdDelay:
		return append(le64(req.DelayMs), req.Payload...)
	case CmdSub:
		b := le64(req.EventID)
		if req.Header.HasAckTimeout() {
			b = append(b, le64(req.AckTimeout)...)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(req.Who)))
		return append(b, req.Who...)
	case CmdCreate:
		return le64(req.ExpireAt)
	case CmdReplica, CmdValidList:
		return le64(req.EventID)
	case CmdCursorSet:
		b := binary.LittleEndian.AppendUint32(le64(req.EventID), uint32(len(req.Who)))
		return append(b, req.Who...)
	case CmdCursorReset:
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(req.Who))), req.Who...)
	}
	return nil
}

// encodeWithHelper re-encodes req with its command's helper when the header
// area is the one that helper produces; ok is false otherwise.
func encodeWithHelper(req *Request) (out []byte, ok bool, err error) {
	h := req.Header
	zero := h.Area == [16]byte{}
	noTopic := len(req.Topic) == 0
	switch h.Cmd {
	case CmdPub:
		if h.Area == PayloadArea(uint32(len(req.Payload))) {
			out, err = AppendPub(nil, req.Topic, req.TraceID, req.Payload)
			return out, true, err
		}
	case CmdDelay:
		if h.Area == PayloadArea(uint32(len(req.Payload))) {
			out, err = AppendDelay(nil, req.Topic, req.TraceID, req.DelayMs, req.Payload)
			return out, true, err
		}
	case CmdSub:
		if h.Area == SubArea(h.BatchSize(), true) {
			out, err = AppendSub(nil, req.Topic, req.TraceID, req.EventID, h.BatchSize(), time.Duration(req.AckTimeout), req.Who)
			return out, true, err
		}
	case CmdCreate:
		if zero {
			out, err = AppendCreate(nil, req.Topic, req.TraceID, req.ExpireAt)
			return out, true, err
		}
	case CmdDelete:
		if zero {
			out, err = AppendDelete(nil, req.Topic, req.TraceID)
			return out, true, err
		}
	case CmdTopicInfo:
		if zero {
			out, err = AppendTopicInfo(nil, req.Topic, req.TraceID)
			return out, true, err
		}
	case CmdAlive:
		if zero && noTopic {
			out, err = AppendAlive(nil, req.TraceID)
			return out, true, err
		}
	case CmdList:
		if zero && noTopic {
			out, err = AppendList(nil, req.TraceID)
			return out, true, err
		}
	case CmdValidList:
		if zero && noTopic {
			out, err = AppendValidList(nil, req.TraceID, req.EventID)
			return out, true, err
		}
	case CmdStatus:
		if zero && noTopic {
			out, err = AppendStatus(nil, req.TraceID)
			return out, true, err
		}
	case CmdPromote:
		if zero && noTopic {
			out, err = AppendPromote(nil, req.TraceID)
			return out, true, err
		}
	case CmdFollow:
		if zero {
			out, err = AppendFollow(nil, string(req.Topic), req.TraceID)
			return out, true, err
		}
	case CmdReplica:
		if zero && noTopic && len(req.TraceID) == 0 {
			out, err = AppendReplica(nil, req.EventID)
			return out, true, err
		}
	case CmdCursorList:
		if zero {
			out, err = AppendCursorList(nil, req.Topic, req.TraceID)
			return out, true, err
		}
	case CmdCursorSet:
		if zero {
			out, err = AppendCursorSet(nil, req.Topic, req.Who, req.EventID, req.TraceID)
			return out, true, err
		}
	case CmdCursorReset:
		if zero {
			out, err = AppendCursorReset(nil, req.Topic, req.Who, req.TraceID)
			return out, true, err
		}
	}
	if h.Cmd == CmdSub && req.EventID == SubResumeEventID {
		area := SubArea(h.BatchSize(), true)
		binary.LittleEndian.PutUint64(area[2:10], uint64(h.ResumeDefault()))
		if h.Area == area {
			out, err = AppendSubResume(nil, req.Topic, req.TraceID, h.ResumeDefault(), h.BatchSize(), time.Duration(req.AckTimeout), req.Who)
			return out, true, err
		}
	}
	return nil, false, nil
}

func fuzzSeeds(f *testing.F) [][]byte {
	ack := int64(time.Second)
	seeds := [][]byte{
		goldenPub(f),
		must(AppendPub(nil, []byte("t"), nil, recs(1, 2, 3))),
		must(AppendDelay(nil, []byte("t"), []byte("tr"), 2000, rec(4))),
		must(AppendDelay(nil, []byte("t"), nil, 10, rec(4))),
		must(AppendSub(nil, []byte("order"), nil, 5, 10, time.Second, []byte("w1"))),
		rawReq(f, CmdSub, SubArea(0, false), "t", "", subBody(1, nil, "who")),
		rawReq(f, CmdSub, SubArea(0, true), "t", "", subBody(1, &ack, "a-very-long-who-name-over-the-cap")),
		must(AppendCreate(nil, []byte("t"), nil, 1)),
		must(AppendDelete(nil, []byte("t"), nil)),
		must(AppendAlive(nil, []byte("x"))),
		must(AppendTopicInfo(nil, nil, nil)),
		must(AppendList(nil, nil)),
		must(AppendValidList(nil, nil, 3)),
		must(AppendReplica(nil, -1)),
		must(AppendStatus(nil, []byte("s"))),
		must(AppendPromote(nil, nil)),
		must(AppendFollow(nil, "10.0.0.2:12301", nil)),
		must(AppendSubResume(nil, []byte("t"), nil, -1, 255, time.Second, []byte("w"))),
		must(AppendCursorList(nil, []byte("t"), nil)),
		must(AppendCursorSet(nil, []byte("t"), []byte("w"), 9, []byte("tr"))),
		must(AppendCursorReset(nil, []byte("t"), []byte("w"), nil)),
		rawReq(f, CmdPub, PayloadArea(8), "t", "", make([]byte, 8)),
		rawReq(f, CmdPub, PayloadArea(0xFFFFFFFF), "t", "", nil),
		rawReq(f, 5, [16]byte{}, "", "", nil),
		goldenPub(f)[:25],
	}
	// A pipelined stream of several requests.
	var stream []byte
	for _, s := range seeds[:14] {
		stream = append(stream, s...)
	}
	return append(seeds, stream)
}

func FuzzReadRequest(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := bytes.NewReader(data)
		rr := NewRequestReader(src, fuzzLimits)
		var req Request
		var before, after runtime.MemStats
		for {
			start := len(data) - src.Len()
			runtime.ReadMemStats(&before)
			err := rr.Read(&req)
			runtime.ReadMemStats(&after)
			if d := after.TotalAlloc - before.TotalAlloc; d > fuzzAllocBound {
				t.Fatalf("one Read allocated %d bytes (bound %d) for cmd %v", d, fuzzAllocBound, req.Header.Cmd)
			}
			consumed := data[start : len(data)-src.Len()]
			if err == io.EOF {
				if start != len(data) {
					t.Fatalf("io.EOF with %d bytes left", len(data)-start)
				}
				return
			}
			var re *RequestError
			if err != nil && !errors.As(err, &re) {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("I/O error from a byte slice: %v", err)
				}
				return
			}
			if re != nil {
				if !IsBizError(re) {
					t.Fatalf("refusal without a BizError: %v", re)
				}
				if re.Close {
					return
				}
			}
			if err == nil {
				checkAccepted(t, &req)
			}
			enc, encErr := AppendRequest(nil, req.Header.Cmd, req.Header.Area, req.Topic, req.TraceID, encodeBody(&req))
			if encErr != nil || !bytes.Equal(enc, consumed) {
				t.Fatalf("re-encoding (%v):\n got % x\nwant % x", encErr, enc, consumed)
			}
			if out, ok, encErr := encodeWithHelper(&req); ok && (encErr != nil || !bytes.Equal(out, consumed)) {
				t.Fatalf("helper for %v (%v):\n got % x\nwant % x", req.Header.Cmd, encErr, out, consumed)
			}
		}
	})
}

func checkAccepted(t *testing.T, req *Request) {
	switch req.Header.Cmd {
	case CmdPub, CmdDelay:
		if len(req.Payload) > fuzzLimits.MaxPayload || req.RecordCount < 1 || req.RecordCount > fuzzLimits.MaxRecords {
			t.Fatalf("accepted %v with %d bytes, %d records", req.Header.Cmd, len(req.Payload), req.RecordCount)
		}
		if n, err := CountRecords(req.Payload, 0); err != nil || n != req.RecordCount {
			t.Fatalf("record count %d, recount %d %v", req.RecordCount, n, err)
		}
		if req.Header.Cmd == CmdDelay && req.DelayMs < MinDelayMs {
			t.Fatalf("accepted delay of %d ms", req.DelayMs)
		}
	case CmdSub, CmdCursorSet, CmdCursorReset:
		if len(req.Who) > fuzzLimits.MaxWho {
			t.Fatalf("accepted who of %d bytes", len(req.Who))
		}
	case CmdReplica:
		if req.EventID < 0 {
			t.Fatalf("accepted replica from %d", req.EventID)
		}
	case CmdAuthStart, CmdAuthContinue:
		if len(req.Payload) > MaxAuthMessage || uint32(len(req.Payload)) != req.Header.PayloadSize() {
			t.Fatalf("accepted %v with %d body bytes, header %d", req.Header.Cmd, len(req.Payload), req.Header.PayloadSize())
		}
	case CmdDelete, CmdAlive, CmdTopicInfo, CmdList, CmdCreate, CmdValidList, CmdStatus, CmdPromote, CmdFollow, CmdCursorList:
	default:
		t.Fatalf("accepted command %v", req.Header.Cmd)
	}
}

func FuzzParseSubMessages(f *testing.F) {
	var area []byte
	area = AppendSubMessage(area, 0x1a226fa68b2, 2, 0, 75, goldenRecord(f))
	f.Add(area, 1)
	area = AppendSubMessage(area, 1, 3, 0, 129, rec(2))
	area = AppendSubMessage(area, 1, 4, 1, 0, must(AppendRecord(nil, Record{Headers: []KV{{"a", "b"}, {"", ""}}, Body: []byte("c")})))
	f.Add(area, 3)
	f.Add(area, 2)
	f.Add(area, 0)
	f.Add(area[:len(area)-1], 3)
	f.Add([]byte{}, 255)
	f.Fuzz(func(t *testing.T, area []byte, count int) {
		msgs, err := ParseSubMessages(area, count)
		// WalkSubMessages must agree: same verdict, same ids and bodies.
		walked := 0
		werr := WalkSubMessages(area, count, func(id int64, body []byte) {
			if err == nil && (walked >= len(msgs) || msgs[walked].EventID != id || !bytes.Equal(msgs[walked].Body, body)) {
				t.Fatalf("walk message %d: id %d body %q differs from the parse", walked, id, body)
			}
			walked++
		})
		if (err == nil) != (werr == nil) || (werr != nil && !errors.Is(werr, ErrBadFrame)) {
			t.Fatalf("parse error %v, walk error %v", err, werr)
		}
		if err == nil && walked != len(msgs) {
			t.Fatalf("walked %d of %d messages", walked, len(msgs))
		}
		if err != nil {
			if !errors.Is(err, ErrBadFrame) || msgs != nil {
				t.Fatalf("error %v with %d messages", err, len(msgs))
			}
			return
		}
		if len(msgs) != count {
			t.Fatalf("%d messages for count %d", len(msgs), count)
		}
		var again []byte
		for _, m := range msgs {
			again = AppendSubMessage(again, m.Ts, m.EventID, m.NextFileID, m.NextPos, m.Raw)
			rec, err := AppendRecord(nil, m.Record)
			if err != nil || !bytes.Equal(rec, m.Raw) {
				t.Fatalf("record re-encodes to % x, raw % x (%v)", rec, m.Raw, err)
			}
		}
		if !bytes.Equal(again, area) {
			t.Fatalf("frame re-encodes differently")
		}
	})
}

// FuzzCountRecords checks CountRecords against an independent walk with
// ParseRecord-style bounds and NextRecord.
func FuzzCountRecords(f *testing.F) {
	f.Add(recs(1, 2, 3), 0)
	f.Add(append(rec(1), 0), 0)
	f.Add(recs(1, 1, 1), 2)
	f.Fuzz(func(t *testing.T, payload []byte, max int) {
		n, err := CountRecords(payload, max)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecords) && !errors.Is(err, ErrTooManyRecords) {
				t.Fatalf("unexpected error kind %v", err)
			}
			return
		}
		if max > 0 && n > max {
			t.Fatalf("%d records above cap %d", n, max)
		}
		walked := 0
		for rest := payload; len(rest) > 0; walked++ {
			var r []byte
			r, rest = NextRecord(rest)
			if len(r) <= RecordPrefixSize {
				t.Fatalf("accepted empty record")
			}
		}
		if walked != n {
			t.Fatalf("NextRecord walk %d, CountRecords %d", walked, n)
		}
	})
}
