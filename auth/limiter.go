package auth

import (
	"net"
	"sync"
	"time"
)

// LimiterOptions configure a Limiter. Zero fields take the defaults.
type LimiterOptions struct {
	// Free is how many failures an address may have back to back; the
	// Free-th starts a lockout. Default 5.
	Free int
	// BaseDelay is the first lockout; each further failure doubles it, up
	// to MaxDelay. Defaults 1 s and 5 min.
	BaseDelay, MaxDelay time.Duration
	// Forget drops an address's failures once it has been this long since
	// its last one (and it is not locked out). Default 15 min.
	Forget time.Duration
	// MaxEntries bounds the addresses tracked; when full, the entry with
	// the oldest failure is dropped. Default 65536.
	MaxEntries int
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Limiter rate-limits failed handshakes per remote IP address: Free
// failures may come back to back; the Free-th and every later failure lock
// the address out for BaseDelay·2^(failures−Free), capped at MaxDelay, during
// which its handshakes are refused unheard. A success clears the address.
// Safe for concurrent use.
type Limiter struct {
	o  LimiterOptions
	mu sync.Mutex
	m  map[string]*limitEntry
}

type limitEntry struct {
	failures    int
	last        time.Time // last failure
	lockedUntil time.Time
}

// NewLimiter returns a Limiter.
func NewLimiter(o LimiterOptions) *Limiter {
	if o.Free <= 0 {
		o.Free = 5
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = time.Second
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 5 * time.Minute
	}
	if o.MaxDelay < o.BaseDelay {
		o.MaxDelay = o.BaseDelay
	}
	if o.Forget <= 0 {
		o.Forget = 15 * time.Minute
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 65536
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Limiter{o: o, m: make(map[string]*limitEntry)}
}

// Key is the limiter key of a remote address: its IP without the port.
func Key(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	s := addr.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}

// Check reports whether key may attempt a handshake now, and otherwise how
// long it is still locked out.
func (l *Limiter) Check(key string) (retryAfter time.Duration, ok bool) {
	if l == nil {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[key]
	if e == nil {
		return 0, true
	}
	now := l.o.Now()
	if now.Before(e.lockedUntil) {
		return e.lockedUntil.Sub(now), false
	}
	return 0, true
}

// Failure records a failed handshake of key and returns the lockout it
// starts (0 while the address still has free failures).
func (l *Limiter) Failure(key string) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Now()
	e := l.m[key]
	if e != nil && now.Sub(e.last) > l.o.Forget && !now.Before(e.lockedUntil) {
		e.failures = 0
	}
	if e == nil {
		if len(l.m) >= l.o.MaxEntries {
			l.evictLocked(now)
		}
		e = &limitEntry{}
		l.m[key] = e
	}
	e.failures++
	e.last = now
	over := e.failures - l.o.Free + 1
	if over <= 0 {
		return 0
	}
	d := l.o.BaseDelay
	for i := 1; i < over && d < l.o.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, l.o.MaxDelay)
	e.lockedUntil = now.Add(d)
	return d
}

// Success clears key's failures.
func (l *Limiter) Success(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	delete(l.m, key)
	l.mu.Unlock()
}

// evictLocked drops forgotten entries, or else the one whose last failure
// is oldest.
func (l *Limiter) evictLocked(now time.Time) {
	var oldestKey string
	var oldest time.Time
	for k, e := range l.m {
		if now.Sub(e.last) > l.o.Forget && !now.Before(e.lockedUntil) {
			delete(l.m, k)
			continue
		}
		if oldestKey == "" || e.last.Before(oldest) {
			oldestKey, oldest = k, e.last
		}
	}
	if len(l.m) >= l.o.MaxEntries && oldestKey != "" {
		delete(l.m, oldestKey)
	}
}
