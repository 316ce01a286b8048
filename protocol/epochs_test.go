package protocol

import (
	"errors"
	"reflect"
	"testing"
)

func TestCheckEpochStarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    []EpochStart
		ok   bool
	}{
		{"empty", nil, true},
		{"one", []EpochStart{{1, 1}}, true},
		{"an epoch that assigned nothing", []EpochStart{{1, 1}, {2, 5}, {4, 5}}, true},
		{"epoch 0", []EpochStart{{0, 1}}, false},
		{"start 0", []EpochStart{{1, 0}}, false},
		{"epoch not increasing", []EpochStart{{2, 1}, {2, 5}}, false},
		{"epoch decreasing", []EpochStart{{3, 1}, {2, 5}}, false},
		{"start decreasing", []EpochStart{{1, 9}, {2, 5}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckEpochStarts(tc.h)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrEpochHistory)) {
				t.Fatalf("CheckEpochStarts(%v) = %v, want ok %v", tc.h, err, tc.ok)
			}
		})
	}
}

func TestEpochOf(t *testing.T) {
	h := []EpochStart{{2, 10}, {3, 20}, {5, 20}, {7, 31}}
	for _, tc := range []struct {
		id   int64
		want uint64
	}{{1, 0}, {9, 0}, {10, 2}, {19, 2}, {20, 5}, {30, 5}, {31, 7}, {1 << 40, 7}} {
		if got := EpochOf(h, tc.id); got != tc.want {
			t.Errorf("EpochOf(%d) = %d, want %d", tc.id, got, tc.want)
		}
	}
	if got := EpochStartOf(h, 25); got != (EpochStart{5, 20}) {
		t.Errorf("EpochStartOf(25) = %v", got)
	}
}

func TestWithPromotion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     []EpochStart
		epoch uint64
		next  int64
		want  []EpochStart
	}{
		{"first", nil, 1, 1, []EpochStart{{1, 1}}},
		{"after", []EpochStart{{1, 1}}, 2, 50, []EpochStart{{1, 1}, {2, 50}}},
		{"again after a restart", []EpochStart{{1, 1}, {2, 50}}, 2, 80, []EpochStart{{1, 1}, {2, 50}}},
		// A slave that lagged behind a master of epoch 3 is promoted to 4
		// before it received epoch 3's first eventId: 3 numbered eventIds
		// this history never had.
		{"drops epochs this history never reached", []EpochStart{{1, 1}, {3, 180}}, 4, 151, []EpochStart{{1, 1}, {4, 151}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WithPromotion(tc.h, tc.epoch, tc.next)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("WithPromotion(%v, %d, %d) = %v, want %v", tc.h, tc.epoch, tc.next, got, tc.want)
			}
			if err := CheckEpochStarts(got); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestResumePoint(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     []EpochStart
		pos   Position
		point int64
		ok    bool
	}{
		{"same epoch", []EpochStart{{1, 1}, {2, 100}}, Position{150, 2, 100}, 150, true},
		{"never promoted, both", nil, Position{150, 0, 0}, 150, true},
		// The first master (epoch 0) handed out 80; the slave it left
		// behind at 50 was promoted to epoch 1.
		{"the first master's history ended", []EpochStart{{1, 51}}, Position{80, 0, 0}, 50, false},
		{"before the first promotion", []EpochStart{{1, 51}}, Position{40, 0, 0}, 40, true},
		{"a node that never saw the consumer's epoch", nil, Position{150, 2, 100}, 99, false},
		// The old master handed out 180 at epoch 1; the promoted slave
		// held up to 150 and numbered 151.. at epoch 2.
		{"a less advanced slave promoted", []EpochStart{{1, 1}, {2, 151}}, Position{180, 1, 1}, 150, false},
		// Two masters at once: the consumer's took epoch 3 from 120 while
		// the node stayed at epoch 2, then became master of 5 at 300.
		{"a parallel epoch the node never had", []EpochStart{{1, 1}, {2, 100}, {5, 300}}, Position{150, 3, 120}, 119, false},
		{"a later epoch the consumer never saw", []EpochStart{{1, 1}, {2, 100}, {4, 140}}, Position{160, 2, 100}, 139, false},
		{"diverged at the very start", []EpochStart{{2, 1}}, Position{10, 1, 1}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			point, ok := ResumePoint(tc.h, tc.pos)
			if point != tc.point || ok != tc.ok {
				t.Fatalf("ResumePoint(%v, %+v) = %d, %v, want %d, %v", tc.h, tc.pos, point, ok, tc.point, tc.ok)
			}
		})
	}
}
