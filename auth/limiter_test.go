package auth_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
)

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func TestLimiterLocksOutExponentially(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	l := auth.NewLimiter(auth.LimiterOptions{Free: 5, BaseDelay: time.Second, MaxDelay: 8 * time.Second,
		Forget: time.Minute, Now: clk.Now})
	const ip = "192.0.2.1"
	for i := 1; i <= 4; i++ {
		if _, ok := l.Check(ip); !ok {
			t.Fatalf("attempt %d refused", i)
		}
		if d := l.Failure(ip); d != 0 {
			t.Fatalf("failure %d locked out for %v", i, d)
		}
	}
	// The 5th failure starts the lockout; each later one doubles it up to
	// the cap.
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		if _, ok := l.Check(ip); !ok {
			t.Fatalf("failure %d: refused before the lockout began", 5+i)
		}
		if d := l.Failure(ip); d != want {
			t.Fatalf("failure %d: lockout %v, want %v", 5+i, d, want)
		}
		if wait, ok := l.Check(ip); ok || wait != want {
			t.Fatalf("failure %d: check (%v, %v) during the lockout", 5+i, wait, ok)
		}
		if _, ok := l.Check("192.0.2.2"); !ok {
			t.Fatal("another address is locked out")
		}
		clk.now = clk.now.Add(want - time.Millisecond)
		if _, ok := l.Check(ip); ok {
			t.Fatal("lockout ended early")
		}
		clk.now = clk.now.Add(time.Millisecond)
	}
	l.Success(ip)
	if d := l.Failure(ip); d != 0 {
		t.Fatalf("after a success the next failure locked out for %v", d)
	}
}

func TestLimiterForgetsAndBounds(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	l := auth.NewLimiter(auth.LimiterOptions{Free: 2, Forget: time.Minute, MaxEntries: 3, Now: clk.Now})
	l.Failure("a")
	clk.now = clk.now.Add(2 * time.Minute)
	if d := l.Failure("a"); d != 0 {
		t.Fatalf("an old failure still counted: lockout %v", d)
	}
	// Fill beyond MaxEntries: the table stays bounded and new addresses are
	// still tracked.
	for i := range 10 {
		clk.now = clk.now.Add(time.Second)
		l.Failure(fmt.Sprint("h", i))
	}
	if d := l.Failure("h9"); d == 0 {
		t.Fatal("the newest address lost its failures")
	}
}

func TestLimiterKey(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5555}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5555}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 1}, "::/64"},
		// Every address of a /64 is one key.
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa::1"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff:ffff:ffff:ffff"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1"), Port: 1}, "2001:db8:1:3::/64"},
		{&net.UDPAddr{IP: net.ParseIP("2001:db8:1:2::9"), Port: 1}, "2001:db8:1:2::/64"},
	} {
		if k := auth.Key(tc.addr); k != tc.want {
			t.Errorf("Key(%v) = %q, want %q", tc.addr, k, tc.want)
		}
	}
}

// begin admits an attempt or fails the test.
func begin(t *testing.T, l *auth.Limiter, addr, user string) *auth.Attempt {
	t.Helper()
	a, wait, ok := l.Begin(addr, user)
	if !ok {
		t.Fatalf("attempt of %s from %s refused (retry in %v)", user, addr, wait)
	}
	return a
}

func TestLimiterConcurrentAttemptsCannotOvertakeLockout(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	l := auth.NewLimiter(auth.LimiterOptions{Free: 3, AddressFree: 100, BaseDelay: time.Minute, Now: clk.Now})
	// Three verifications may be under way at once (should they all fail,
	// the third starts the lockout); a fourth must wait.
	var atts []*auth.Attempt
	for range 3 {
		atts = append(atts, begin(t, l, "192.0.2.1", "alice"))
	}
	if _, _, ok := l.Begin("192.0.2.1", "alice"); ok {
		t.Fatal("a fourth concurrent attempt was admitted")
	}
	for _, a := range atts {
		a.Fail()
	}
	if wait, ok := l.Check("192.0.2.1 alice"); ok || wait != time.Minute {
		t.Fatalf("after three failures: check (%v, %v), want a 1m lockout", wait, ok)
	}
	if _, _, ok := l.Begin("192.0.2.1", "alice"); ok {
		t.Fatal("an attempt was admitted during the lockout")
	}
	// Once the lockout ends, attempts are admitted one at a time.
	clk.now = clk.now.Add(time.Minute)
	a := begin(t, l, "192.0.2.1", "alice")
	if _, _, ok := l.Begin("192.0.2.1", "alice"); ok {
		t.Fatal("a second attempt past the free failures was admitted while one is under way")
	}
	a.Succeed()
	begin(t, l, "192.0.2.1", "alice").Fail()
}

func TestLimiterCountsPerAddressAndUser(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	l := auth.NewLimiter(auth.LimiterOptions{Free: 2, AddressFree: 4, BaseDelay: time.Minute, Now: clk.Now})
	const ip = "192.0.2.1"
	// One failure each for three users, a success of a fourth between:
	// the success does not reset the address's count.
	begin(t, l, ip, "u1").Fail()
	begin(t, l, ip, "u2").Fail()
	begin(t, l, ip, "mallory").Succeed()
	begin(t, l, ip, "u3").Fail()
	if d := begin(t, l, ip, "u4").Fail(); d != time.Minute {
		t.Fatalf("4th failure of the address: lockout %v, want 1m", d)
	}
	if _, _, ok := l.Begin(ip, "mallory"); ok {
		t.Fatal("a locked-out address may still try another user")
	}
	if _, ok := l.Start(ip); ok {
		t.Fatal("a locked-out address may still start a handshake")
	}
	// Another address is unaffected; per user, the lockout is reached with
	// fewer failures.
	begin(t, l, "192.0.2.2", "u1").Fail()
	if d := begin(t, l, "192.0.2.2", "u1").Fail(); d != time.Minute {
		t.Fatalf("2nd failure of one user: lockout %v, want 1m", d)
	}
	begin(t, l, "192.0.2.2", "u2").Succeed()
}

func TestLimiterEvictionNeverLiftsLockout(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	l := auth.NewLimiter(auth.LimiterOptions{Free: 1, AddressFree: 1, BaseDelay: time.Hour, MaxEntries: 4, Now: clk.Now})
	begin(t, l, "192.0.2.1", "alice").Fail() // locks the address and the user
	// A flood of other addresses, each only starting handshakes.
	for i := range 1000 {
		clk.now = clk.now.Add(time.Millisecond)
		l.Start(fmt.Sprintf("198.51.100.%d", i%250))
		if n := l.Len(); n > 4 {
			t.Fatalf("%d entries, bound 4", n)
		}
	}
	if _, ok := l.Check("192.0.2.1"); ok {
		t.Fatal("the flood evicted an active lockout")
	}
	if _, _, ok := l.Begin("192.0.2.1", "alice"); ok {
		t.Fatal("attempt admitted after the flood")
	}
	// A table full of lockouts refuses new keys rather than dropping one.
	l2 := auth.NewLimiter(auth.LimiterOptions{Free: 1, AddressFree: 1, BaseDelay: time.Hour, MaxEntries: 2, Now: clk.Now})
	begin(t, l2, "192.0.2.1", "alice").Fail()
	if _, _, ok := l2.Begin("192.0.2.9", "bob"); ok {
		t.Fatal("a new key was admitted by dropping a lockout")
	}
	if _, ok := l2.Check("192.0.2.1"); ok {
		t.Fatal("lockout lifted")
	}
}

func TestLimiterStartRate(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	l := auth.NewLimiter(auth.LimiterOptions{StartRate: 10, StartBurst: 5, Now: clk.Now})
	for i := range 5 {
		if _, ok := l.Start("192.0.2.1"); !ok {
			t.Fatalf("start %d of the burst refused", i)
		}
	}
	wait, ok := l.Start("192.0.2.1")
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("start past the burst: (%v, %v), want refused for 100ms", wait, ok)
	}
	if _, ok := l.Start("192.0.2.2"); !ok {
		t.Fatal("another address was refused")
	}
	clk.now = clk.now.Add(100 * time.Millisecond)
	if _, ok := l.Start("192.0.2.1"); !ok {
		t.Fatal("refused after the rate allowed one more")
	}
}
