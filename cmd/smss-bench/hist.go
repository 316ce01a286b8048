package main

import (
	"math"
	"math/bits"
	"time"
)

// Histogram layout: values below subCount are exact; above, every power of
// two is split into subCount equal buckets, so a bucket's width is at most
// 1/subCount (< 0.8 %) of the values it holds. maxExp bounds the tracked
// range (2^(maxExp+subBits) ns ≈ 39 h); larger values land in the last
// bucket, and Max stays exact.
const (
	subBits  = 7
	subCount = 1 << subBits
	maxExp   = 40
	nBuckets = (maxExp + 1) * subCount
)

// hist is a fixed-size latency histogram in nanoseconds. One per goroutine:
// it is not safe for concurrent use; merge them at the end.
type hist struct {
	counts [nBuckets]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

func newHist() *hist { return &hist{min: math.MaxInt64} }

func bucketOf(v int64) int {
	if v < subCount {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	exp := bits.Len64(uint64(v)) - subBits - 1 // v>>exp is in [subCount, 2*subCount)
	if exp > maxExp-1 {
		return nBuckets - 1
	}
	return (exp+1)*subCount + int(v>>exp) - subCount
}

// bucketHigh is the largest value that maps to bucket i.
func bucketHigh(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	exp := i/subCount - 1
	mant := int64(i%subCount + subCount)
	return (mant+1)<<exp - 1
}

func (h *hist) record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// quantile returns the nearest-rank p-quantile (0 < p ≤ 1): the smallest
// recorded value v such that at least ⌈p·n⌉ values are ≤ v, reported as the
// upper bound of its bucket and never above the exact maximum.
func (h *hist) quantile(p float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	if rank > h.n {
		rank = h.n
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(max(bucketHigh(i), h.min), h.max)
		}
	}
	return h.max
}

// Latency is the JSON/text summary of a histogram, in microseconds.
type Latency struct {
	Unit  string  `json:"unit"` // what one sample is: request, message, batch
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
	Max   float64 `json:"max_us"`
}

func (h *hist) summary(unit string) *Latency {
	if h.n == 0 {
		return nil
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	return &Latency{
		Unit:  unit,
		Count: h.n,
		Mean:  h.sum / float64(h.n) / 1e3,
		P50:   us(h.quantile(0.50)),
		P99:   us(h.quantile(0.99)),
		P999:  us(h.quantile(0.999)),
		Max:   us(h.max),
	}
}
