package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// exactQuantile is the nearest-rank definition the histogram approximates.
func exactQuantile(sorted []int64, p float64) int64 {
	rank := int(math.Ceil(p * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

func TestQuantileTable(t *testing.T) {
	seq := func(lo, hi int64) []int64 {
		var v []int64
		for i := lo; i <= hi; i++ {
			v = append(v, i)
		}
		return v
	}
	tests := []struct {
		name   string
		values []int64
		p      float64
		want   int64
	}{
		{"single", []int64{42}, 0.5, 42},
		{"single p999", []int64{42}, 0.999, 42},
		{"1..100 p50", seq(1, 100), 0.50, 50},
		{"1..100 p99", seq(1, 100), 0.99, 99},
		{"1..100 p999 rounds up to the last rank", seq(1, 100), 0.999, 100},
		{"1..100 p100", seq(1, 100), 1, 100},
		{"1..1000 p999", seq(1, 1000), 0.999, 999},
		{"two values p50 is the lower", []int64{10, 20}, 0.5, 10},
		{"two values p51 is the upper", []int64{10, 20}, 0.51, 20},
		{"outlier is the max", []int64{5, 5, 5, 5, 1_000_000}, 1, 1_000_000},
		{"p tiny is the min", []int64{7, 8, 9}, 0.0001, 7},
		{"zero durations", []int64{0, 0, 0}, 0.99, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHist()
			for _, v := range tc.values {
				h.record(time.Duration(v))
			}
			if got := h.quantile(tc.p); got != tc.want {
				t.Fatalf("quantile(%v) = %d, want %d", tc.p, got, tc.want)
			}
		})
	}
}

// Above the exact range a quantile is its bucket's upper bound: within
// 1/subCount of the exact answer, never below it, never above the max.
func TestQuantileRelativeError(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var vals []int64
	h := newHist()
	for i := 0; i < 200_000; i++ {
		v := int64(r.ExpFloat64() * 80_000) // ns, a latency-like tail
		vals = append(vals, v)
		h.record(time.Duration(v))
	}
	slices.Sort(vals)
	for _, p := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
		exact := exactQuantile(vals, p)
		got := h.quantile(p)
		if got < exact || float64(got-exact) > float64(exact)/subCount+1 || got > vals[len(vals)-1] {
			t.Errorf("p%v: got %d, exact %d", p*100, got, exact)
		}
	}
	if h.max != vals[len(vals)-1] || h.min != vals[0] {
		t.Errorf("min/max %d/%d, want %d/%d", h.min, h.max, vals[0], vals[len(vals)-1])
	}
}

func TestBucketsCoverValues(t *testing.T) {
	prevHigh := int64(-1)
	for i := 0; i < nBuckets-1; i++ {
		hi := bucketHigh(i)
		if hi <= prevHigh {
			t.Fatalf("bucket %d high %d not above previous %d", i, hi, prevHigh)
		}
		if bucketOf(prevHigh+1) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d: values %d..%d map to %d..%d", i, prevHigh+1, hi, bucketOf(prevHigh+1), bucketOf(hi))
		}
		prevHigh = hi
	}
	if got := bucketOf(math.MaxInt64); got != nBuckets-1 {
		t.Fatalf("huge value in bucket %d", got)
	}
}

func TestMergeAndSummary(t *testing.T) {
	a, b := newHist(), newHist()
	for i := 1; i <= 50; i++ {
		a.record(time.Duration(i) * time.Microsecond)
		b.record(time.Duration(i+50) * time.Microsecond)
	}
	a.merge(b)
	a.merge(newHist()) // empty: no effect on min
	s := a.summary("request")
	if s.Count != 100 || s.Max != 100 || s.Mean != 50.5 {
		t.Fatalf("summary %+v", s)
	}
	if s.P50 < 50 || s.P50 > 50*(1+1.0/subCount) {
		t.Fatalf("p50 %v µs, want ≈50", s.P50)
	}
	if newHist().summary("x") != nil {
		t.Fatal("empty histogram should have no summary")
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tc := range tests {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
