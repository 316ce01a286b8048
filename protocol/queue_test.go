package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

func TestQueueConfigNormalize(t *testing.T) {
	tests := []struct {
		name  string
		in    QueueConfig
		want  string // "" = accepted
		check func(*testing.T, QueueConfig)
	}{
		{name: "defaults", in: QueueConfig{Group: "g"}, check: func(t *testing.T, c QueueConfig) {
			if c.AckWaitMs != 30000 || c.MaxInFlight != 1000 || c.MaxInFlightGroup != 1000 || c.MaxDeliver != 0 || c.From != "newest" {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{name: "dead letter sets max deliver", in: QueueConfig{Group: "g", DeadLetter: "dlq"}, check: func(t *testing.T, c QueueConfig) {
			if c.MaxDeliver != DefaultQueueDeadLetterMax {
				t.Fatalf("maxDeliver %d", c.MaxDeliver)
			}
		}},
		{name: "no group", in: QueueConfig{}, want: "group name"},
		{name: "bad group", in: QueueConfig{Group: "a b"}, want: "only letters"},
		{name: "ack wait small", in: QueueConfig{Group: "g", AckWaitMs: 5}, want: "ackWaitMs"},
		{name: "negative max deliver", in: QueueConfig{Group: "g", MaxDeliver: -1}, want: "maxDeliver"},
		{name: "backoff negative", in: QueueConfig{Group: "g", BackoffMs: []int64{-1}}, want: "backoffMs"},
		{name: "in flight huge", in: QueueConfig{Group: "g", MaxInFlight: MaxQueueMaxInFlight + 1}, want: "maxInFlight"},
		{name: "bad dead letter", in: QueueConfig{Group: "g", DeadLetter: "a/b"}, want: "deadLetter"},
		{name: "bad from", in: QueueConfig{Group: "g", From: "yesterday"}, want: "from"},
		{name: "from id", in: QueueConfig{Group: "g", From: "42"}, check: func(t *testing.T, c QueueConfig) {
			if a, _ := c.StartAfter(100); a != 42 {
				t.Fatalf("start after %d", a)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.in
			err := c.Normalize()
			if tc.want != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
			again := c
			if err := again.Normalize(); err != nil || !again.Same(&c) {
				t.Fatalf("normalize not idempotent: %v %+v", err, again)
			}
		})
	}
}

func TestQueueBackoff(t *testing.T) {
	c := QueueConfig{BackoffMs: []int64{10, 20}}
	for attempt, want := range map[int]int64{0: 0, 1: 10, 2: 20, 7: 20} {
		if got := c.Backoff(attempt).Milliseconds(); got != want {
			t.Errorf("attempt %d: %d ms, want %d", attempt, got, want)
		}
	}
}

func TestQueueRequestRoundTrip(t *testing.T) {
	for _, cmd := range []Command{CmdQueueCreate, CmdQueueDelete, CmdQueueInfo, CmdQueueConsume} {
		raw, err := AppendQueueRequest(nil, cmd, "orders", QueueConsume{Group: "g", Consumer: "w1"})
		if err != nil {
			t.Fatal(err)
		}
		// Two requests back to back: the first is read exactly.
		raw = append(raw, raw...)
		rr := NewRequestReader(bufio.NewReader(bytes.NewReader(raw)), DefaultLimits())
		for i := 0; i < 2; i++ {
			var req Request
			if err := rr.Read(&req); err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			var got QueueConsume
			if string(req.Topic) != "orders" || DecodeQueueBody(req.Payload, &got) != nil || got.Consumer != "w1" {
				t.Fatalf("%s: %q %q", cmd, req.Topic, req.Payload)
			}
		}
	}
}

func TestQueueRequestBodyTooLarge(t *testing.T) {
	raw, _ := appendReqHeader(nil, CmdQueueCreate, [16]byte{}, []byte("t"), nil)
	raw = append(raw, 0, 0, 2, 0) // 128 KiB
	raw = append(raw, make([]byte, 128<<10)...)
	raw, _ = AppendQueueRequest(raw, CmdQueueInfo, "t", QueueRef{})
	rr := NewRequestReader(bufio.NewReader(bytes.NewReader(raw)), DefaultLimits())
	var req Request
	var re *RequestError
	if err := rr.Read(&req); !errors.As(err, &re) || re.Close {
		t.Fatalf("over-limit body: %v", err)
	}
	if err := rr.Read(&req); err != nil || req.Header.Cmd != CmdQueueInfo {
		t.Fatalf("next request after the discarded body: %v %v", err, req.Header.Cmd)
	}
}

func TestDecodeQueueBodyRefusesUnknownFields(t *testing.T) {
	var c QueueConfig
	if err := DecodeQueueBody([]byte(`{"group":"g","ackwait":5}`), &c); err == nil {
		t.Fatal("misspelt field accepted")
	}
	if err := DecodeQueueBody([]byte(`{"group":"g"} {}`), &c); err == nil {
		t.Fatal("trailing object accepted")
	}
	if !IsBizError(DecodeQueueBody([]byte(`x`), &c)) {
		t.Fatal("not a business error")
	}
}

func TestQueueFramesRoundTrip(t *testing.T) {
	rec, _ := AppendRecord(nil, Record{Body: []byte("hello")})
	var area []byte
	area = AppendQueueMessage(area, 11, 7, 1, rec)
	area = AppendQueueMessage(area, 12, 9, 3, rec)
	var stream []byte
	stream = AppendQueueFrameHeader(stream, 2, uint32(len(area)))
	stream = append(stream, area...)
	stream = AppendQueueConfirms(stream, []QueueConfirm{{EventID: 7, Op: QueueOpAck}, {EventID: 9, Op: QueueOpTerm, Result: QueueResultGone}})
	stream = AppendReplyAlive(stream)
	stream = AppendReplySubEnd(stream)
	r := bytes.NewReader(stream)
	f, err := ReadQueueFrame(r, 1<<20)
	if err != nil || f.Code != StatusQueueMessages {
		t.Fatal(f, err)
	}
	ms, err := ParseQueueMessages(f.Body, f.Count)
	if err != nil || len(ms) != 2 || ms[1].EventID != 9 || ms[1].Attempt != 3 || !bytes.Equal(ms[0].Record, rec) {
		t.Fatal(ms, err)
	}
	f, err = ReadQueueFrame(r, 1<<20)
	if err != nil || f.Code != StatusQueueConfirm {
		t.Fatal(f, err)
	}
	cs, err := ParseQueueConfirms(f.Body)
	if err != nil || len(cs) != 2 || cs[1] != (QueueConfirm{EventID: 9, Op: QueueOpTerm, Result: QueueResultGone}) {
		t.Fatal(cs, err)
	}
	for _, want := range []uint16{StatusAlive, StatusSubEnd} {
		if f, err := ReadQueueFrame(r, 1<<20); err != nil || f.Code != want {
			t.Fatal(f, err)
		}
	}
}

func TestQueueOutcomeDecode(t *testing.T) {
	tests := []struct {
		o  QueueOutcome
		ok bool
	}{
		{QueueOutcome{Op: QueueOpAck, EventID: 5}, true},
		{QueueOutcome{Op: QueueOpNak, EventID: 5, DelayMs: 100}, true},
		{QueueOutcome{Op: QueueOpProgress, EventID: 5}, true},
		{QueueOutcome{Op: QueueOpTerm, EventID: 5}, true},
		{QueueOutcome{Op: QueueOpStop}, true},
		{QueueOutcome{Op: QueueOpAck, EventID: 0}, false},
		{QueueOutcome{Op: QueueOpAck, EventID: 5, DelayMs: 1}, false},
		{QueueOutcome{Op: QueueOpStop, EventID: 1}, false},
		{QueueOutcome{Op: 9, EventID: 1}, false},
	}
	for _, tc := range tests {
		got, err := DecodeQueueOutcome(AppendQueueOutcome(nil, tc.o))
		if (err == nil) != tc.ok || (tc.ok && got != tc.o) {
			t.Errorf("%+v: got %+v, %v", tc.o, got, err)
		}
	}
	b := AppendQueueOutcome(nil, QueueOutcome{Op: QueueOpAck, EventID: 1})
	b[2] = 1
	if _, err := DecodeQueueOutcome(b); !errors.Is(err, ErrQueueFrame) {
		t.Fatal("reserved byte accepted")
	}
}

func FuzzQueueOutcome(f *testing.F) {
	f.Add(AppendQueueOutcome(nil, QueueOutcome{Op: QueueOpNak, EventID: 3, DelayMs: 9}))
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodeQueueOutcome(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendQueueOutcome(nil, o), b) {
			t.Fatalf("accepted %x does not re-encode to itself", b)
		}
	})
}

func FuzzQueueFrame(f *testing.F) {
	rec, _ := AppendRecord(nil, Record{Body: []byte("x")})
	area := AppendQueueMessage(nil, 1, 2, 3, rec)
	f.Add(append(AppendQueueFrameHeader(nil, 1, uint32(len(area))), area...))
	f.Add(AppendQueueConfirms(nil, []QueueConfirm{{EventID: 1, Op: QueueOpAck}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ReadQueueFrame(bytes.NewReader(b), 1<<16)
		if err != nil {
			return
		}
		switch fr.Code {
		case StatusQueueMessages:
			ms, err := ParseQueueMessages(fr.Body, fr.Count)
			if err == nil && len(ms) != fr.Count {
				t.Fatalf("%d messages for count %d", len(ms), fr.Count)
			}
		case StatusQueueConfirm:
			if cs, err := ParseQueueConfirms(fr.Body); err != nil || len(cs) != fr.Count {
				t.Fatalf("%d confirmations for count %d: %v", len(cs), fr.Count, err)
			}
		}
	})
}

func FuzzQueueConfig(f *testing.F) {
	f.Add([]byte(`{"group":"g","ackWaitMs":1000,"maxDeliver":3,"backoffMs":[10,20],"deadLetter":"d","from":"oldest"}`))
	f.Add([]byte(`{"group":"g","from":"-1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c QueueConfig
		if DecodeQueueBody(b, &c) != nil || c.Normalize() != nil {
			return
		}
		again := c
		if again.Normalize() != nil || !again.Same(&c) {
			t.Fatalf("normalized %+v changes when normalized again", c)
		}
		if c.AckWaitMs < MinQueueAckWait.Milliseconds() || c.MaxInFlight < 1 || c.MaxInFlightGroup < 1 {
			t.Fatalf("accepted out-of-range %+v", c)
		}
	})
}
