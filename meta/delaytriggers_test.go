package meta

import (
	"slices"
	"testing"
)

func TestDelayTriggers(t *testing.T) {
	s, _ := openTemp(t)
	var none []int64
	if err := s.DelayTriggers(func(tr int64) { none = append(none, tr) }); err != nil || none != nil {
		t.Fatalf("empty store: %v, %v", none, err)
	}
	commit(t, s, func(b *Batch) {
		for _, x := range []struct {
			trigger, id int64
			topic       string
		}{{300, 5, "b"}, {100, 1, "a"}, {200, 3, "a"}, {100, 4, "z"}, {1 << 40, 9, "a"}} {
			b.PutDelay(DelayKey(x.trigger, x.id, []byte(x.topic)), DelayValue(x.trigger, x.id, []byte("r")))
		}
		// Neighbouring prefixes and a too-short key are not delays.
		b.set([]byte("delay@short"), []byte("x"))
		b.PutTopic(&Topic{Name: "delayed", CreateEventID: 1})
	})
	commit(t, s, func(b *Batch) { b.DeleteDelay(DelayKey(200, 3, []byte("a"))) })

	var got []int64
	if err := s.DelayTriggers(func(tr int64) { got = append(got, tr) }); err != nil {
		t.Fatal(err)
	}
	if want := []int64{100, 100, 300, 1 << 40}; !slices.Equal(got, want) {
		t.Fatalf("triggers %v, want %v (deleted entry gone, key order)", got, want)
	}
	n, err := s.PendingDelays()
	if err != nil || n != len(got) {
		t.Fatalf("PendingDelays %d (%v), DelayTriggers saw %d", n, err, len(got))
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.DelayTriggers(func(int64) {}); err == nil {
		t.Fatal("DelayTriggers on a closed store: no error")
	}
}
