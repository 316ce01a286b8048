package logging

import "sync/atomic"

// Sampler passes 1 of every n calls to Sample: the 1st, the n+1st, ... so
// that c calls yield exactly ceil(c/n) samples and the first event is always
// logged. n <= 0 never samples, n == 1 always does. It is safe for
// concurrent use and does not allocate; a nil *Sampler never samples.
type Sampler struct {
	n     uint64
	calls atomic.Uint64
}

// NewSampler returns a Sampler for 1 in n (log.sample semantics).
func NewSampler(n int) *Sampler {
	if n < 0 {
		n = 0
	}
	return &Sampler{n: uint64(n)}
}

// Sample reports whether this call is the sampled one of its group of n.
func (s *Sampler) Sample() bool {
	if s == nil || s.n == 0 {
		return false
	}
	return (s.calls.Add(1)-1)%s.n == 0
}
