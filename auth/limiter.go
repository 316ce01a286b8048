package auth

import (
	"container/list"
	"net"
	"sync"
	"time"
)

// LimiterOptions configure a Limiter. Zero fields take the defaults.
type LimiterOptions struct {
	// Free is how many failures a key (an address and user, see Begin) may
	// have back to back; the Free-th starts a lockout. Default 5.
	Free int
	// AddressFree is the same for an address across all its users (see
	// Begin), so that guessing one password per user name does not escape
	// the limit. Default 4·Free.
	AddressFree int
	// BaseDelay is the first lockout; each further failure doubles it, up
	// to MaxDelay. Defaults 1 s and 5 min.
	BaseDelay, MaxDelay time.Duration
	// Forget drops a key's failures once it has been this long since its
	// last one (and it is not locked out). Default 15 min.
	Forget time.Duration
	// MaxEntries bounds the keys tracked. When full, the least recently
	// used entry that holds no active lockout is dropped; if a few tries
	// find only locked entries, the new key is refused (see Begin) rather
	// than lifting a lockout. Default 65536.
	MaxEntries int
	// StartRate is how many handshakes per second an address may start
	// (Start), with bursts of StartBurst. Defaults 100 and StartRate.
	StartRate  float64
	StartBurst int
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Limiter rate-limits handshakes per remote address (Key) and per address
// and user: Free failures may come back to back; the Free-th and every
// later failure lock the key out for BaseDelay·2^(failures−Free), capped at
// MaxDelay, during which its handshakes are refused unheard. Begin counts
// a verification as a failure until it ends, so concurrent guesses cannot
// overtake the lockout. Safe for concurrent use.
type Limiter struct {
	o   LimiterOptions
	mu  sync.Mutex
	m   map[string]*limitEntry
	lru list.List // of *limitEntry, least recently used first
}

type limitEntry struct {
	key         string
	free        int
	failures    int
	pending     int       // verifications under way (Begin without End)
	last        time.Time // last failure
	lockedUntil time.Time
	// Start token bucket (address entries).
	tokens   float64
	tokensAt time.Time
	elem     *list.Element
}

// evictTries bounds the entries eviction looks at: it stays O(1), and a
// table whose oldest entries are all locked out refuses a new key instead.
const evictTries = 8

// NewLimiter returns a Limiter.
func NewLimiter(o LimiterOptions) *Limiter {
	if o.Free <= 0 {
		o.Free = 5
	}
	if o.AddressFree <= 0 {
		o.AddressFree = 4 * o.Free
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
	if o.StartRate <= 0 {
		o.StartRate = 100
	}
	if o.StartBurst <= 0 {
		o.StartBurst = max(int(o.StartRate), 1)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Limiter{o: o, m: make(map[string]*limitEntry)}
}

// Key is the limiter key of a remote address: an IPv4 address, or the /64
// prefix of an IPv6 address (one host commonly holds a whole /64, so
// counting its addresses one by one would multiply its attempts).
func Key(addr net.Addr) string {
	var ip net.IP
	if tcp, ok := addr.(*net.TCPAddr); ok {
		ip = tcp.IP
	} else {
		s := addr.String()
		if host, _, err := net.SplitHostPort(s); err == nil {
			s = host
		}
		if ip = net.ParseIP(s); ip == nil {
			return s
		}
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}

// userKey is the key of an address and user name. The space cannot occur
// in an address key.
func userKey(addr, user string) string { return addr + " " + user }

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

// Start admits a handshake start (auth start) from addr: refused while the
// address is locked out or has used up its start rate. Nothing is verified
// at this step, but each start costs the server work and lets a client
// probe user names, so starts are counted.
func (l *Limiter) Start(addr string) (retryAfter time.Duration, ok bool) {
	if l == nil {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Now()
	e := l.entryLocked(addr, l.o.AddressFree, now)
	if e == nil {
		return time.Second, false
	}
	if now.Before(e.lockedUntil) {
		return e.lockedUntil.Sub(now), false
	}
	burst := float64(l.o.StartBurst)
	if e.tokensAt.IsZero() {
		e.tokens = burst
	} else {
		e.tokens = min(burst, e.tokens+now.Sub(e.tokensAt).Seconds()*l.o.StartRate)
	}
	e.tokensAt = now
	if e.tokens < 1 {
		return time.Duration((1 - e.tokens) / l.o.StartRate * float64(time.Second)), false
	}
	e.tokens--
	return 0, true
}

// Attempt is a proof verification admitted by Begin; exactly one of
// Succeed or Fail must follow.
type Attempt struct {
	l          *Limiter
	addr, user *limitEntry
}

// Begin admits the verification of a proof of user from addr, or refuses
// it (nothing must be verified then) while either the address or the
// address and user is locked out. An admitted attempt counts as a failure
// of both until it ends, so concurrent verifications can never exceed what
// the lockout allows: past the free failures, a key verifies one at a time.
func (l *Limiter) Begin(addr, user string) (*Attempt, time.Duration, bool) {
	if l == nil {
		return nil, 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Now()
	a := &Attempt{l: l}
	if a.addr = l.entryLocked(addr, l.o.AddressFree, now); a.addr == nil {
		return nil, time.Second, false
	}
	// Counted as under way at once: making room for the user's entry must
	// not evict the address's.
	a.addr.pending++
	if a.user = l.entryLocked(userKey(addr, user), l.o.Free, now); a.user == nil {
		a.addr.pending--
		return nil, time.Second, false
	}
	a.user.pending++
	var wait time.Duration
	for _, e := range []*limitEntry{a.addr, a.user} {
		l.forgetLocked(e, now)
		switch {
		case now.Before(e.lockedUntil):
			wait = max(wait, e.lockedUntil.Sub(now))
		case e.pending > 1 && e.failures+e.pending > e.free:
			// Should the attempts under way all fail, the key would be
			// locked out before this one: wait for them.
			wait = max(wait, time.Second)
		}
	}
	if wait > 0 {
		a.addr.pending--
		a.user.pending--
		return nil, wait, false
	}
	return a, 0, true
}

// Succeed ends an attempt whose proof verified: the address and user's
// failures are cleared. The address's are not: a success of one user must
// not clear the failures of guesses at others.
func (a *Attempt) Succeed() {
	if a == nil {
		return
	}
	l := a.l
	l.mu.Lock()
	defer l.mu.Unlock()
	a.addr.pending--
	a.user.pending--
	a.user.failures = 0
	a.user.lockedUntil = time.Time{}
	if a.user.pending == 0 && a.user.elem != nil {
		l.removeLocked(a.user)
	}
}

// Fail ends an attempt whose proof did not verify and returns the lockout
// it starts (the longer of the address's and the address and user's; 0
// while both have free failures left).
func (a *Attempt) Fail() time.Duration {
	if a == nil {
		return 0
	}
	l := a.l
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Now()
	a.addr.pending--
	a.user.pending--
	return max(l.failLocked(a.addr, now), l.failLocked(a.user, now))
}

// Failure records a failed handshake of key and returns the lockout it
// starts (0 while the key still has free failures). A key that cannot be
// tracked (a full table of lockouts) is not recorded.
func (l *Limiter) Failure(key string) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Now()
	e := l.entryLocked(key, l.o.Free, now)
	if e == nil {
		return 0
	}
	return l.failLocked(e, now)
}

// Success clears key's failures.
func (l *Limiter) Success(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[key]; e != nil && e.pending == 0 {
		l.removeLocked(e)
	}
}

// Len is the number of keys tracked.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

func (l *Limiter) forgetLocked(e *limitEntry, now time.Time) {
	if e.failures > 0 && now.Sub(e.last) > l.o.Forget && !now.Before(e.lockedUntil) {
		e.failures = 0
	}
}

func (l *Limiter) failLocked(e *limitEntry, now time.Time) time.Duration {
	l.forgetLocked(e, now)
	e.failures++
	e.last = now
	l.lru.MoveToBack(e.elem)
	over := e.failures - e.free + 1
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

// entryLocked returns key's entry, creating it (with free failures) if
// needed; nil when the table is full of entries that must not be dropped.
func (l *Limiter) entryLocked(key string, free int, now time.Time) *limitEntry {
	if e := l.m[key]; e != nil {
		l.lru.MoveToBack(e.elem)
		return e
	}
	if len(l.m) >= l.o.MaxEntries && !l.evictLocked(now) {
		return nil
	}
	e := &limitEntry{key: key, free: free}
	e.elem = l.lru.PushBack(e)
	l.m[key] = e
	return e
}

// evictLocked drops the least recently used entry that holds no active
// lockout and no attempt under way, looking at most at evictTries entries
// (the ones it passes over go to the back). False: none was dropped.
func (l *Limiter) evictLocked(now time.Time) bool {
	for range min(evictTries, l.lru.Len()) {
		e := l.lru.Front().Value.(*limitEntry)
		if e.pending == 0 && !now.Before(e.lockedUntil) {
			l.removeLocked(e)
			return true
		}
		l.lru.MoveToBack(e.elem)
	}
	return false
}

func (l *Limiter) removeLocked(e *limitEntry) {
	l.lru.Remove(e.elem)
	e.elem = nil
	delete(l.m, e.key)
}
