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
	if k := auth.Key(&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5555}); k != "10.1.2.3" {
		t.Fatalf("key %q", k)
	}
	if k := auth.Key(&net.TCPAddr{IP: net.ParseIP("::1"), Port: 1}); k != "::1" {
		t.Fatalf("key %q", k)
	}
}
