package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/smssmq/smss/protocol"
)

// PublishBatch answers each publish as Publish would: the refused ones
// with Publish's refusal (and nothing stored), the others with eventIds in
// the batch's order, stored in that order; a slave refuses them all.
func TestPublishBatch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, func(o *Options) { o.Logger = quietLog })
	defer b.Close()
	for _, name := range []string{"a", "b"} {
		if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
	type want struct {
		err error // nil: stored
	}
	cases := []struct {
		topic string
		body  string
		want  want
	}{
		{"a", "a1", want{}},
		{"b", "b1", want{}},
		{"bad name!", "x", want{protocol.ValidateTopicName([]byte("bad name!"))}},
		{"a", "a2", want{}},
		{CursorTopic, "c", want{ErrReservedTopic}},
		{"new", "n1", want{protocol.ErrTopicNotExist}}, // refused by the writer, inside the group
		{"a", "a3", want{}},
	}
	ps := make([]Pub, len(cases))
	for i, c := range cases {
		ps[i] = Pub{Topic: []byte(c.topic), Records: rec(c.body), Count: 1}
	}
	before := b.LastEventID()
	b.PublishBatch(ctx, ps)
	next := before + 1
	stored := map[string][]string{}
	for i, c := range cases {
		p := ps[i]
		if c.want.err != nil {
			if p.Err == nil || p.Err.Error() != c.want.err.Error() {
				t.Errorf("pub %d (%s): err %v, want %v", i, c.topic, p.Err, c.want.err)
			}
			continue
		}
		if p.Err != nil {
			t.Fatalf("pub %d (%s): %v", i, c.topic, p.Err)
		}
		if p.EventID < next {
			t.Errorf("pub %d (%s): eventId %d, want > %d (batch order)", i, c.topic, p.EventID, next-1)
		}
		next = p.EventID + 1
		stored[c.topic] = append(stored[c.topic], c.body)
	}
	for topic, bodies := range stored {
		_, recs := readTopic(t, dir, topic)
		var got []string
		for _, r := range recs {
			got = append(got, string(r))
		}
		var wantRecs []string
		for _, body := range bodies {
			wantRecs = append(wantRecs, string(rec(body)))
		}
		if fmt.Sprint(got) != fmt.Sprint(wantRecs) {
			t.Errorf("topic %s holds %q, want %q", topic, got, wantRecs)
		}
	}

	// An empty batch is a no-op; a slave refuses every publish.
	b.PublishBatch(ctx, nil)
	b.slave.Store(true)
	ps = []Pub{{Topic: []byte("a"), Records: rec("s"), Count: 1}, {Topic: []byte("b"), Records: rec("s"), Count: 1}}
	b.PublishBatch(ctx, ps)
	for i, p := range ps {
		if !errors.Is(p.Err, protocol.ErrSlavePub) {
			t.Errorf("slave pub %d: err %v, want %v", i, p.Err, protocol.ErrSlavePub)
		}
	}
	b.slave.Store(false)
}
