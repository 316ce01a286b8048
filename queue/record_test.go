package queue

import (
	"reflect"
	"strings"
	"testing"

	"github.com/smssmq/smss/protocol"
)

func TestRecordRoundTrip(t *testing.T) {
	k := groupKey{"orders", "billing"}
	cfg := protocol.QueueConfig{Group: "billing", DeadLetter: "orders-dead", BackoffMs: []int64{10, 20}}
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	evs := []event{{op: evDeliver, eventID: 5, attempt: 1}, {op: evAck, eventID: 5}, {op: evDead, eventID: 1 << 40, attempt: 7}, {op: evDrop, eventID: 9, attempt: 2}}
	st := &stateRec{key: k, next: 99, delivered: 4, redelivered: 1, acked: 2, dead: 1, dropped: 0,
		pending: []event{{eventID: 7, attempt: 1}, {eventID: 8, attempt: 3}}}
	tests := []struct {
		name string
		body []byte
		want record
	}{
		{"config", encodeConfig(&configRec{key: k, created: 3, startAfter: 4, cfg: cfg}), record{kind: kindConfig, config: &configRec{key: k, created: 3, startAfter: 4, cfg: cfg}}},
		{"delete", encodeDelete(k), record{kind: kindDelete, key: k}},
		{"events", encodeEvents(k, evs), record{kind: kindEvents, key: k, events: evs}},
		{"snapshot", encodeSnapshot(), record{kind: kindSnapshot}},
		{"state", encodeState(st), record{kind: kindState, state: st}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeRecord(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			for i := 0; i < len(tc.body); i++ {
				if _, err := decodeRecord(tc.body[:i]); err == nil && !(tc.name == "events" && i > 2) {
					t.Fatalf("truncated to %d bytes accepted", i)
				}
			}
		})
	}
	if string(wrap(nil, encodeSnapshot())[8:]) != protocol.QueueSnapshotBody {
		t.Fatal("snapshot record differs from the broker's marker")
	}
}

func TestFoldSnapshotReplacesHistory(t *testing.T) {
	k := groupKey{"t", "g"}
	cfg := protocol.QueueConfig{Group: "g"}
	_ = cfg.Normalize()
	f := newFold()
	add := func(id int64, b []byte) {
		if err := f.add(id, b); err != nil {
			t.Fatal(err)
		}
	}
	add(1, encodeConfig(&configRec{key: k, cfg: cfg}))
	add(2, encodeEvents(k, []event{{op: evDeliver, eventID: 10, attempt: 1}, {op: evDeliver, eventID: 11, attempt: 1}, {op: evAck, eventID: 10}}))
	g := f.groups[k]
	if g.next != 11 || len(g.pending) != 1 || g.pending[11] != 1 || g.acked != 1 {
		t.Fatalf("state %+v", g)
	}
	// A delivery of a done message is not recorded again; an ack of one
	// not pending changes nothing.
	if g.apply(event{op: evDeliver, eventID: 10, attempt: 2}) || g.apply(event{op: evAck, eventID: 10}) {
		t.Fatal("done message changed")
	}
	snap := g.snapshot()
	f2 := newFold()
	_ = f2.add(3, encodeConfig(&configRec{key: groupKey{"t", "other"}, cfg: protocol.QueueConfig{Group: "other", AckWaitMs: 30000, MaxInFlight: 1, MaxInFlightGroup: 1, From: "newest"}}))
	_ = f2.add(9, encodeSnapshot())
	for _, r := range snap {
		_ = f2.add(9, r)
	}
	// A state record outside its snapshot's message is ignored.
	_ = f2.add(10, encodeState(&stateRec{key: k, next: 500}))
	if len(f2.groups) != 1 || !reflect.DeepEqual(f2.groups[k].pending, g.pending) || f2.groups[k].next != 11 || f2.groups[k].acked != 1 {
		t.Fatalf("after snapshot %+v", f2.groups)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	k := groupKey{"t", "g"}
	f.Add(encodeEvents(k, []event{{op: evDeliver, eventID: 1, attempt: 1}}))
	f.Add(encodeState(&stateRec{key: k, next: 1, pending: []event{{eventID: 1, attempt: 1}}}))
	f.Add(encodeConfig(&configRec{key: k, cfg: protocol.QueueConfig{Group: "g", AckWaitMs: 30000, MaxInFlight: 1, MaxInFlightGroup: 1, From: "newest"}}))
	f.Add(encodeDelete(k))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord(b)
		if err != nil {
			return
		}
		// Whatever decodes folds without panicking.
		fo := newFold()
		_ = fo.add(1, encodeConfig(&configRec{key: k, cfg: protocol.QueueConfig{Group: "g", AckWaitMs: 30000, MaxInFlight: 1, MaxInFlightGroup: 1, From: "newest"}}))
		_ = fo.add(1, b)
		if rec.kind == kindEvents && !reflect.DeepEqual(encodeEvents(rec.key, rec.events), b) && len(rec.events) > 0 {
			// Varints have one shortest form; a longer one decodes too.
			return
		}
	})
}

func TestDeadLetterIDFitsAMessageID(t *testing.T) {
	long := groupKey{strings.Repeat("t", protocol.MaxTopicNameLen), strings.Repeat("g", protocol.MaxQueueNameLen)}
	for _, k := range []groupKey{{"t", "g"}, long} {
		id := deadLetterID(k, 1<<62)
		if len(id) > protocol.MaxMsgIDLen || !strings.HasPrefix(id, "dead/") || id != deadLetterID(k, 1<<62) || id == deadLetterID(k, 1) {
			t.Errorf("%d-byte names: id %q", len(k.topic)+len(k.group), id)
		}
	}
	if got := deadLetterID(groupKey{"t", "g"}, 5); got != "dead/t/g/5" {
		t.Errorf("short names: %q", got)
	}
}
