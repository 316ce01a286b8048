package server

import (
	"errors"
	"testing"
	"time"
)

func TestLazyDeadline(t *testing.T) {
	base := time.Unix(1000, 0)
	failSet := errors.New("set failed")
	steps := []struct {
		name    string
		want    time.Duration // after base
		slack   time.Duration
		setErr  error
		wantSet bool
		armedAt time.Duration // expected remembered deadline after base; -1 = forgotten
	}{
		{"first arm adds the slack", 10 * time.Second, time.Second, nil, true, 11 * time.Second},
		{"later want inside the slack keeps it", 10*time.Second + 500*time.Millisecond, time.Second, nil, false, 11 * time.Second},
		{"want exactly at the armed one keeps it", 11 * time.Second, time.Second, nil, false, 11 * time.Second},
		{"want past the armed one re-arms", 11*time.Second + time.Millisecond, time.Second, nil, true, 12*time.Second + time.Millisecond},
		{"much earlier want (shorter timeout) re-arms", 2 * time.Second, 0, nil, true, 2 * time.Second},
		{"zero slack needs the exact deadline", 2 * time.Second, 0, nil, false, 2 * time.Second},
		{"failed set forgets", 3 * time.Second, 0, failSet, true, -1},
		{"after a failure the next arm sets again", 3 * time.Second, 0, nil, true, 3 * time.Second},
	}
	var l lazyDeadline
	for _, st := range steps {
		called := false
		set := func(at time.Time) error {
			called = true
			return st.setErr
		}
		err := l.arm(set, base.Add(st.want), st.slack)
		if !errors.Is(err, st.setErr) {
			t.Fatalf("%s: err %v, want %v", st.name, err, st.setErr)
		}
		if called != st.wantSet {
			t.Fatalf("%s: set called %v, want %v", st.name, called, st.wantSet)
		}
		if st.armedAt < 0 {
			if !l.at.IsZero() {
				t.Fatalf("%s: remembered %v, want nothing", st.name, l.at)
			}
		} else if !l.at.Equal(base.Add(st.armedAt)) {
			t.Fatalf("%s: remembered %v, want %v", st.name, l.at.Sub(base), st.armedAt)
		}
	}
	l.forget()
	called := false
	_ = l.arm(func(time.Time) error { called = true; return nil }, base.Add(3*time.Second), time.Second)
	if !called {
		t.Fatal("arm after forget did not set the deadline")
	}
}
