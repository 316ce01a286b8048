package smsstest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

type lineConn struct {
	net.Conn
	r *bufio.Reader
}

func dialLine(t *testing.T, addr string) *lineConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &lineConn{c, bufio.NewReader(c)}
}

// echo sends s and reads the answer within d.
func (c *lineConn) echo(s string, d time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, s+"\n"); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return line[:len(line)-1], nil
}

func mustEcho(t *testing.T, c *lineConn, s string) {
	t.Helper()
	if got, err := c.echo(s, 10*time.Second); err != nil || got != s {
		t.Fatalf("echo %q: %q, %v", s, got, err)
	}
}

func TestProxyCutAndRestore(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	addr := p.Addr()
	c := dialLine(t, addr)
	mustEcho(t, c, "before")

	p.Cut()
	if _, err := c.echo("during", 10*time.Second); err == nil {
		t.Fatal("a connection survived the cut")
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the cut connection hung instead of ending: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a new connection was accepted while cut")
	}

	p.Restore()
	if p.Addr() != addr {
		t.Fatalf("address changed across the cut: %s, then %s", addr, p.Addr())
	}
	mustEcho(t, dialLine(t, addr), "after")
}

func TestProxyReset(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c := dialLine(t, p.Addr())
	mustEcho(t, c, "one")
	p.Reset()
	if _, err := c.echo("two", 10*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Reset the old connection answered or hung: %v", err)
	}
	mustEcho(t, dialLine(t, p.Addr()), "three") // no Restore needed
}

func TestProxyPause(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c := dialLine(t, p.Addr())
	mustEcho(t, c, "one")
	p.Pause()
	// Nothing gets through while paused: the answer does not come within
	// the bounded look, and the connection stays open.
	if got, err := c.echo("two", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("paused link answered %q, %v", got, err)
	}
	p.Restore()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if line, err := c.r.ReadString('\n'); err != nil || line != "two\n" {
		t.Fatalf("held bytes after Restore: %q, %v", line, err)
	}
	mustEcho(t, c, "three")
}

func TestProxyDelay(t *testing.T) {
	const d = 150 * time.Millisecond
	p := NewProxy(t, echoServer(t))
	c := dialLine(t, p.Addr())
	mustEcho(t, c, "warm")
	p.Delay(d)
	start := time.Now()
	mustEcho(t, c, "slow")
	// Both directions are delayed: the round trip takes at least 2d.
	if took := time.Since(start); took < 2*d {
		t.Errorf("delayed round trip took %v, want ≥ %v", took, 2*d)
	}
	p.Restore()
	start = time.Now()
	mustEcho(t, c, "fast")
	if took := time.Since(start); took >= 2*d {
		t.Errorf("round trip after Restore took %v", took)
	}
}

func TestProxyTargetDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := l.Addr().String()
	l.Close()
	p := NewProxy(t, target)
	c := dialLine(t, p.Addr())
	if _, err := c.echo("x", 10*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("with the target down: %v, want the connection ended", err)
	}
}

func TestProxyClose(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c := dialLine(t, p.Addr())
	mustEcho(t, c, "one")
	p.Pause()
	p.Close() // returns although a pipe was paused
	if _, err := c.echo("two", 10*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Close: %v", err)
	}
	p.Close() // again: a no-op
}
