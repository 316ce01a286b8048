package meta

import (
	"slices"
	"testing"
)

func TestScanDelays(t *testing.T) {
	s, _ := openTemp(t)
	type d struct {
		trigger, id int64
		topic       string
	}
	in := []d{{300, 5, "b"}, {100, 1, "a"}, {200, 3, "a"}, {200, 2, "c"}, {1000, 9, "a"}, {100, 4, "z"}}
	commit(t, s, func(b *Batch) {
		for _, x := range in {
			b.PutDelay(DelayKey(x.trigger, x.id, []byte(x.topic)), DelayValue(x.trigger, x.id, []byte("rec-"+x.topic)))
		}
		b.PutDelay(DelayKey(250, 7, []byte("bad")), DelayValue(251, 7, nil)) // value disagrees: skipped
	})
	tests := []struct {
		from, now int64
		limit     int
		want      []d
		next      int64 // 0: none
	}{
		{0, 99, 10, nil, 100},
		{0, 100, 10, []d{{100, 1, "a"}, {100, 4, "z"}}, 200},
		{0, 250, 3, []d{{100, 1, "a"}, {100, 4, "z"}, {200, 2, "c"}}, 200},
		{0, 250, 10, []d{{100, 1, "a"}, {100, 4, "z"}, {200, 2, "c"}, {200, 3, "a"}}, 300},
		{101, 250, 10, []d{{200, 2, "c"}, {200, 3, "a"}}, 300},
		{200, 5000, 10, []d{{200, 2, "c"}, {200, 3, "a"}, {300, 5, "b"}, {1000, 9, "a"}}, 0},
		{201, 260, 10, nil, 300},
		{1001, 5000, 10, nil, 0},
		{-5, 100, 0, nil, 100},
	}
	for _, tc := range tests {
		p, err := s.ScanDelays(tc.from, tc.now, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []d
		for _, e := range p.Due {
			got = append(got, d{e.TriggerTime, e.DelayEventID, e.Topic})
			if string(e.Value) != string(DelayValue(e.TriggerTime, e.DelayEventID, []byte("rec-"+e.Topic))) {
				t.Errorf("entry value %x", e.Value)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ScanDelays(%d, %d, %d) due %v, want %v", tc.from, tc.now, tc.limit, got, tc.want)
		}
		if p.HasNext != (tc.next != 0) || p.Next != tc.next {
			t.Errorf("ScanDelays(%d, %d, %d) next %d %v, want %d", tc.from, tc.now, tc.limit, p.Next, p.HasNext, tc.next)
		}
		// From the start it agrees with DueDelays.
		if tc.from <= 0 {
			due, err := s.DueDelays(tc.now, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(due) != len(p.Due) {
				t.Errorf("DueDelays(%d, %d) returned %d entries, ScanDelays %d", tc.now, tc.limit, len(due), len(p.Due))
			}
		}
	}
}
