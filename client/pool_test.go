package client

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// replyAll answers every request with a 201 (alive) or plain 200.
func replyAll(c net.Conn, r *bufio.Reader) {
	for {
		req, err := readReq(r)
		if err != nil {
			return
		}
		reply := protocol.AppendReplyOK(nil)
		if req.Header.Cmd == protocol.CmdAlive {
			reply = protocol.AppendReplyAlive(nil)
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

func TestPoolExhaustionAndRecovery(t *testing.T) {
	f := startFake(t, replyAll)
	var d countingDialer
	c := dialT(t, f.addr(), Options{MaxConns: 2, WaitTimeout: 100 * time.Millisecond, DialContext: d.dial})
	ctx := ctxT(t, 10*time.Second)

	a, err := c.pool.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.pool.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.Alive(ctx)
	if !errors.Is(err, ErrPoolTimeout) {
		t.Fatalf("third call with both connections borrowed: %v, want ErrPoolTimeout", err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond || waited > 5*time.Second {
		t.Errorf("waited %v, want about the 100ms wait timeout", waited)
	}
	// A context deadline shorter than the wait timeout wins. On a pool of
	// its own whose wait timeout is far off: with 100ms, a waiter
	// descheduled for that long would find both expired and pick either.
	c2 := dialT(t, f.addr(), Options{MaxConns: 1, WaitTimeout: time.Minute})
	only, err := c2.pool.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	err = c2.Alive(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call with 10ms deadline on an exhausted pool: %v", err)
	}
	c2.pool.put(only, false)

	c.pool.put(a, false)
	c.pool.put(b, false)
	for i := 0; i < 10; i++ {
		if err := c.Alive(ctx); err != nil {
			t.Fatalf("after recovery: %v", err)
		}
	}
	if n := d.n.Load(); n > 2 {
		t.Errorf("%d connections dialled, cap is 2", n)
	}
}

func TestPoolWaiterGetsReturnedConnection(t *testing.T) {
	f := startFake(t, replyAll)
	var d countingDialer
	c := dialT(t, f.addr(), Options{MaxConns: 1, WaitTimeout: 10 * time.Second, DialContext: d.dial})
	ctx := ctxT(t, 20*time.Second)
	a, err := c.pool.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Alive(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("call finished while the only connection was borrowed: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.pool.put(a, false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not served after the connection was returned")
	}
	if n := d.n.Load(); n != 1 {
		t.Errorf("%d connections dialled, want the one reused", n)
	}
}

// A reply that arrives after the caller gave up must never be read as the
// reply of the next call (docs/protocol.md §10.27): the timed-out connection is dropped.
func TestTimedOutConnectionIsDiscarded(t *testing.T) {
	release := make(chan struct{})
	f := startFake(t, func(c net.Conn, r *bufio.Reader) {
		for {
			req, err := readReq(r)
			if err != nil {
				return
			}
			// Keyed on the topic, not on arrival order: a slow request the
			// client gave up on before writing it must not make the fake
			// hold the next call's request instead.
			if string(req.Topic) == "slow" {
				<-release
				c.Write(protocol.AppendReplyError(nil, "late reply"))
				continue
			}
			c.Write(protocol.AppendReplyOK(nil))
		}
	})
	defer close(release)
	var d writeCountingDialer
	c := dialT(t, f.addr(), Options{DialContext: d.dial, HealthCheckInterval: -1})
	// The 50ms deadline may pass before the request is even written on a
	// loaded machine; then no late reply is pending and the case is not
	// exercised, so try again.
	for attempt := 1; ; attempt++ {
		written := d.writes.Load()
		short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := c.DeleteTopic(short, "slow")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("first call: %v, want deadline exceeded", err)
		}
		if n := c.pool.idleCount(); n != 0 {
			t.Fatalf("timed-out connection returned to the pool (%d idle)", n)
		}
		if d.writes.Load() > written {
			break
		}
		if attempt == 20 {
			t.Fatal("the slow request was never written within its 50ms deadline")
		}
	}
	if err := c.DeleteTopic(ctxT(t, 5*time.Second), "t"); err != nil {
		t.Fatalf("second call read someone else's reply: %v", err)
	}
}

// writeCountingDialer dials connections that count the writes they
// complete.
type writeCountingDialer struct{ writes atomic.Int32 }

func (d *writeCountingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &writeCountingConn{Conn: nc, d: d}, nil
}

type writeCountingConn struct {
	net.Conn
	d *writeCountingDialer
}

func (c *writeCountingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && n == len(p) {
		c.d.writes.Add(1)
	}
	return n, err
}

// SyscallConn keeps the pool's idle-connection probe working on the
// wrapped socket.
func (c *writeCountingConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

func TestCancelInterruptsCall(t *testing.T) {
	f := startFake(t, func(c net.Conn, r *bufio.Reader) {
		readReq(r)
		r.ReadByte() // never replies; returns when the client closes
	})
	c := dialT(t, f.addr(), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	err := c.Alive(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
}

func TestProtocolErrorDiscardsConnection(t *testing.T) {
	f := startFake(t, func(c net.Conn, r *bufio.Reader) {
		for {
			if _, err := readReq(r); err != nil {
				return
			}
			c.Write([]byte{0x2a, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // status 42
		}
	})
	var d countingDialer
	c := dialT(t, f.addr(), Options{DialContext: d.dial})
	for i := 0; i < 3; i++ {
		if err := c.Alive(ctxT(t, 5*time.Second)); !errors.Is(err, ErrProtocol) {
			t.Fatalf("call %d: %v, want ErrProtocol", i, err)
		}
	}
	if n := d.n.Load(); n != 3 {
		t.Errorf("%d dials for 3 calls that each broke their connection", n)
	}
}

func TestServerErrorKeepsConnection(t *testing.T) {
	f := startFake(t, func(c net.Conn, r *bufio.Reader) {
		for {
			if _, err := readReq(r); err != nil {
				return
			}
			c.Write(protocol.AppendReplyError(nil, "topic exist"))
		}
	})
	var d countingDialer
	c := dialT(t, f.addr(), Options{DialContext: d.dial})
	for i := 0; i < 3; i++ {
		err := c.CreateTopic(ctxT(t, 5*time.Second), "t")
		if !errors.Is(err, ErrTopicExist) || !errors.Is(err, protocol.ErrTopicExist) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := d.n.Load(); n != 1 {
		t.Errorf("%d dials, want 1: a 400 leaves the connection usable", n)
	}
}

// The background check pings idle connections (so the server's idle
// timeout never closes them) and never adds a round trip to calls.
func TestHealthCheckPingsIdleConnections(t *testing.T) {
	var pings atomic.Int32
	f := startFake(t, func(c net.Conn, r *bufio.Reader) {
		for {
			req, err := readReq(r)
			if err != nil {
				return
			}
			if req.Header.Cmd == protocol.CmdAlive {
				pings.Add(1)
			}
			c.Write(protocol.AppendReplyOK(nil))
		}
	})
	c := dialT(t, f.addr(), Options{HealthCheckInterval: 20 * time.Millisecond})
	smsstest.WaitFor(t, 5*time.Second, "three health pings", func() bool { return pings.Load() >= 3 })
	if n := f.conns.Load(); n != 1 {
		t.Errorf("%d connections, want the one idle connection pinged", n)
	}

	// Calls themselves send only their own request.
	c.Close()
	pings.Store(0)
	calls := dialT(t, f.addr(), Options{HealthCheckInterval: -1})
	for i := 0; i < 20; i++ {
		if err := calls.DeleteTopic(ctxT(t, 5*time.Second), "t"); err != nil {
			t.Fatal(err)
		}
	}
	if n := pings.Load(); n != 0 {
		t.Errorf("%d alive requests sent by 20 calls", n)
	}
}

func TestHealthCheckDropsDeadConnection(t *testing.T) {
	f := startFake(t, func(c net.Conn, r *bufio.Reader) {
		readReq(r) // answer nothing, close after the first request
	})
	c := dialT(t, f.addr(), Options{HealthCheckInterval: 20 * time.Millisecond})
	smsstest.WaitFor(t, 5*time.Second, "dead idle connection dropped", func() bool { return c.pool.idleCount() == 0 })
}

func TestMaxLifetime(t *testing.T) {
	f := startFake(t, replyAll)
	var d countingDialer
	c := dialT(t, f.addr(), Options{MaxLifetime: 30 * time.Millisecond, HealthCheckInterval: -1, DialContext: d.dial})
	ctx := ctxT(t, 5*time.Second)
	if err := c.Alive(ctx); err != nil {
		t.Fatal(err)
	}
	first := d.n.Load()
	c.pool.mu.Lock()
	created := c.pool.idle[0].created
	c.pool.mu.Unlock()
	smsstest.WaitFor(t, time.Second, "connection older than MaxLifetime", func() bool { return time.Since(created) > 30*time.Millisecond })
	if err := c.Alive(ctx); err != nil {
		t.Fatal(err)
	}
	if d.n.Load() != first+1 {
		t.Errorf("connection older than MaxLifetime was reused")
	}
}

func TestClosedClient(t *testing.T) {
	f := startFake(t, replyAll)
	c := dialT(t, f.addr(), Options{})
	c.Close()
	if err := c.Alive(ctxT(t, time.Second)); !errors.Is(err, ErrClosed) {
		t.Fatalf("call on closed client: %v", err)
	}
}
