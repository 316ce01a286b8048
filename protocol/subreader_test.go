package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

func TestSubFrameReader(t *testing.T) {
	var area []byte
	area = AppendSubMessage(area, 7, 41, 0, 100, rec(3))
	area = AppendSubMessage(area, 7, 42, 0, 200, must(AppendRecord(nil, Record{Headers: []KV{{"k", "v"}}, Body: []byte("body")})))
	data := append(AppendSubFrameHeader(nil, 2, uint32(len(area))), area...)
	small := AppendSubMessage(nil, 8, 43, 1, 0, rec(1))
	data2 := append(AppendSubFrameHeader(nil, 1, uint32(len(small))), small...)

	var stream []byte
	stream = append(stream, data...)
	stream = AppendReplyAlive(stream)
	stream = append(stream, data2...)
	stream = AppendReplySubEnd(stream)
	stream = AppendReplyError(stream, "topic not exist")
	fr := NewSubFrameReader(bufio.NewReader(bytes.NewReader(stream)), 1<<20)

	steps := []struct {
		code   uint16
		ids    []int64
		bodies []string
		err    string
	}{
		{code: StatusOK, ids: []int64{41, 42}, bodies: []string{"aaa", "body"}},
		{code: StatusAlive},
		{code: StatusOK, ids: []int64{43}, bodies: []string{"a"}},
		{code: StatusSubEnd},
		{err: "topic not exist"},
	}
	var first []byte
	for i, st := range steps {
		f, err := fr.Next()
		if st.err != "" {
			var be *BizError
			if !errors.As(err, &be) || be.Msg != st.err {
				t.Fatalf("step %d: error %v, want 400 %q", i, err, st.err)
			}
			continue
		}
		if err != nil || f.Code != st.code {
			t.Fatalf("step %d: frame %d err %v, want %d", i, f.Code, err, st.code)
		}
		if f.Code != StatusOK {
			continue
		}
		if first == nil {
			first = f.Body
		} else if &f.Body[0] != &first[0] {
			t.Fatalf("step %d: a smaller frame did not reuse the buffer", i)
		}
		var ids []int64
		var bodies []string
		if err := WalkSubMessages(f.Body, f.Count, func(id int64, body []byte) {
			ids = append(ids, id)
			bodies = append(bodies, string(body))
		}); err != nil {
			t.Fatalf("step %d: walk: %v", i, err)
		}
		if len(ids) != len(st.ids) {
			t.Fatalf("step %d: ids %v, want %v", i, ids, st.ids)
		}
		for j := range ids {
			if ids[j] != st.ids[j] || bodies[j] != st.bodies[j] {
				t.Fatalf("step %d: message %d is %d %q, want %d %q", i, j, ids[j], bodies[j], st.ids[j], st.bodies[j])
			}
		}
	}

	capped := NewSubFrameReader(bytes.NewReader(data), len(area)-1)
	if _, err := capped.Next(); !errors.Is(err, ErrReplyTooLarge) {
		t.Fatalf("frame over the cap: %v", err)
	}
	torn := NewSubFrameReader(bytes.NewReader(data[:len(data)-1]), 1<<20)
	if _, err := torn.Next(); err == nil {
		t.Fatal("torn frame read without error")
	}
}
