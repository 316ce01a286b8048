package logging

import (
	"sync"
	"testing"
)

func TestSamplerCounts(t *testing.T) {
	for _, tc := range []struct{ n, calls, want int }{
		{0, 100, 0},
		{-5, 100, 0},
		{1, 100, 100},
		{2, 5, 3},
		{3, 9, 3},
		{3, 10, 4},
		{10000, 1, 1},
		{10000, 10000, 1},
		{10000, 10001, 2},
		{7, 0, 0},
	} {
		s := NewSampler(tc.n)
		got := 0
		for range tc.calls {
			if s.Sample() {
				got++
			}
		}
		if got != tc.want {
			t.Errorf("n=%d calls=%d: %d samples, want %d", tc.n, tc.calls, got, tc.want)
		}
	}
}

func TestSamplerFirstCallSampled(t *testing.T) {
	s := NewSampler(5)
	var pattern []bool
	for range 11 {
		pattern = append(pattern, s.Sample())
	}
	for i, got := range pattern {
		if want := i%5 == 0; got != want {
			t.Fatalf("call %d: sampled=%v, want %v (pattern %v)", i, got, want, pattern)
		}
	}
}

func TestSamplerConcurrent(t *testing.T) {
	const goroutines, per, n = 8, 12345, 7
	s := NewSampler(n)
	var wg sync.WaitGroup
	counts := make([]int, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				if s.Sample() {
					counts[g]++
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, c := range counts {
		total += c
	}
	calls := goroutines * per
	if want := (calls + n - 1) / n; total != want {
		t.Fatalf("%d samples over %d concurrent calls, want %d", total, calls, want)
	}
}

func TestSamplerNilAndAllocs(t *testing.T) {
	var nilSampler *Sampler
	if nilSampler.Sample() {
		t.Fatal("nil sampler sampled")
	}
	s := NewSampler(3)
	if a := testing.AllocsPerRun(1000, func() { s.Sample() }); a != 0 {
		t.Fatalf("Sample allocates %v per call", a)
	}
}

func BenchmarkSampler(b *testing.B) {
	s := NewSampler(10000)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Sample()
		}
	})
}
