package rawsys

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		acc <- res{c, err}
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

func TestConnRawOnLinuxTCPOnly(t *testing.T) {
	a, _ := tcpPair(t)
	if got := NewConn(a).Raw(); got != Enabled {
		t.Fatalf("TCP conn: Raw() = %v, want %v (Enabled)", got, Enabled)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if NewConn(p1).Raw() {
		t.Fatal("net.Pipe has no descriptor: Raw() must be false")
	}
}

// TestConnLikeNetConn: what a reader of net.Conn branches on holds for
// Conn too, raw or not (a TCP pair and a pipe).
func TestConnLikeNetConn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pair   func(t *testing.T) (net.Conn, net.Conn)
		closed error // what a closed connection's calls return
	}{
		{"tcp", tcpPair, net.ErrClosed},
		{"pipe", func(t *testing.T) (net.Conn, net.Conn) {
			a, b := net.Pipe()
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		}, io.ErrClosedPipe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			ca, cb := NewConn(a), NewConn(b)

			// A read waits for the bytes, and returns what came.
			go func() { _, _ = cb.Write([]byte("hello")) }()
			buf := make([]byte, 16)
			n, err := ca.Read(buf)
			if err != nil || string(buf[:n]) != "hello" {
				t.Fatalf("read = %q, %v", buf[:n], err)
			}
			if ca.Raw() {
				// An empty read returns at once (a pipe's waits for a write).
				if n, err := ca.Read(nil); n != 0 || err != nil {
					t.Fatalf("empty read = %d, %v", n, err)
				}
			}

			// The read deadline ends a read with a timeout.
			if err := a.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			_, err = ca.Read(buf)
			var ne net.Error
			if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("read past the deadline: %v, want a timeout", err)
			}
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "read" {
				t.Fatalf("read past the deadline: %#v, want a net.OpError of read", err)
			}
			if err := a.SetReadDeadline(time.Time{}); err != nil {
				t.Fatal(err)
			}

			// The end of the stream is io.EOF, once every byte is read (a
			// deadline, so that a reader that never says EOF fails fast).
			go func() { _, _ = cb.Write([]byte("bye")); b.Close() }()
			if err := a.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			var got []byte
			for i := 0; ; i++ {
				n, err := ca.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil || i > 100 {
					t.Fatalf("reading to the end: got %q, then %d, %v; want io.EOF", got, n, err)
				}
			}
			if string(got) != "bye" {
				t.Fatalf("read to the end = %q, want \"bye\"", got)
			}

			// A closed connection says so.
			a.Close()
			if _, err := ca.Read(buf); !errors.Is(err, tc.closed) {
				t.Fatalf("read of a closed conn: %v, want %v", err, tc.closed)
			}
			if _, err := ca.Write([]byte("x")); !errors.Is(err, tc.closed) {
				t.Fatalf("write of a closed conn: %v, want %v", err, tc.closed)
			}
		})
	}
}

// TestConnWriteWaitsForTheReader: a write larger than the socket buffers
// waits (through the poller) until the peer read it all, and honours the
// write deadline when the peer reads nothing.
func TestConnWriteWaitsForTheReader(t *testing.T) {
	a, b := tcpPair(t)
	// Small buffers, so that the writes below outgrow them.
	_ = a.(*net.TCPConn).SetWriteBuffer(64 << 10)
	_ = b.(*net.TCPConn).SetReadBuffer(64 << 10)
	ca := NewConn(a)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		all, _ := io.ReadAll(io.LimitReader(b, int64(len(big))))
		got <- all
	}()
	if n, err := ca.Write(big); n != len(big) || err != nil {
		t.Fatalf("write = %d, %v; want %d", n, err, len(big))
	}
	if g := <-got; !bytes.Equal(g, big) {
		t.Fatalf("the reader got %d bytes, not what was written", len(g))
	}

	// Nobody reads now: the write stops at the deadline, having written
	// what the buffers took.
	if err := a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := ca.Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(big) {
		t.Fatalf("write with no reader = %d, %v; want a part and a timeout", n, err)
	}
}

// TestConnTryWriteNeverWaits: TryWrite writes what the socket takes and
// returns at once when it is full, the rest left to the caller; through a
// net.Conn with no descriptor it writes nothing.
func TestConnTryWriteNeverWaits(t *testing.T) {
	a, b := tcpPair(t)
	_ = a.(*net.TCPConn).SetWriteBuffer(64 << 10)
	_ = b.(*net.TCPConn).SetReadBuffer(64 << 10)
	ca := NewConn(a)
	rec := []byte("a twenty-byte record")
	if n, err := ca.TryWrite(rec); err != nil || n != len(rec) && Enabled || n != 0 && !Enabled {
		t.Fatalf("TryWrite on an empty socket = %d, %v (raw %v)", n, err, Enabled)
	}
	if !Enabled {
		return
	}
	// Nobody reads: the buffers fill, and then a TryWrite writes less than
	// asked without waiting (no deadline is set: a wait would hang).
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<12) // 64 KiB
	total, short := len(rec), false
	for i := 0; i < 1<<10 && !short; i++ {
		n, err := ca.TryWrite(big)
		if err != nil {
			t.Fatalf("TryWrite: %v", err)
		}
		total += n
		short = n < len(big)
	}
	if !short {
		t.Fatalf("64 MiB taken whole by a socket nobody reads")
	}
	// Everything written arrives, in order.
	got := make(chan int, 1)
	go func() {
		n, _ := io.Copy(io.Discard, io.LimitReader(b, int64(total)))
		got <- int(n)
	}()
	if n := <-got; n != total {
		t.Fatalf("the reader got %d bytes of %d", n, total)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if n, err := NewConn(p1).TryWrite(rec); n != 0 || err != nil {
		t.Fatalf("TryWrite through a pipe = %d, %v; want 0, nil", n, err)
	}
}

// TestConnWriteToAResetPeer: an errno comes back as net.Conn gives it.
func TestConnWriteToAResetPeer(t *testing.T) {
	a, b := tcpPair(t)
	if tc, ok := b.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with a reset
	}
	b.Close()
	ca := NewConn(a)
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for err == nil && time.Now().Before(deadline) {
		_, err = ca.Write([]byte("after the reset"))
	}
	var se *os.SyscallError
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write after a reset: %v, want ECONNRESET or EPIPE", err)
	}
	if Enabled && !errors.As(err, &se) {
		t.Fatalf("write after a reset: %#v, want an os.SyscallError inside", err)
	}
}

func TestFileWriteReadAt(t *testing.T) {
	for _, slow := range []bool{false, true} {
		f, err := os.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		var g File
		g.slow = slow // through the runtime, as after a slow call
		for _, s := range []string{"abc", "", "defgh"} {
			if n, err := g.Write(f, []byte(s)); n != len(s) || err != nil {
				t.Fatalf("slow=%v: write %q = %d, %v", slow, s, n, err)
			}
		}
		buf := make([]byte, 5)
		if n, err := g.ReadAt(f, buf, 2); n != 5 || err != nil || string(buf) != "cdefg" {
			t.Fatalf("slow=%v: ReadAt = %d %q %v", slow, n, buf[:n], err)
		}
		// Past the end: what there is, and io.EOF.
		if n, err := g.ReadAt(f, buf, 6); n != 2 || err != io.EOF || string(buf[:n]) != "gh" {
			t.Fatalf("slow=%v: ReadAt past the end = %d %q %v", slow, n, buf[:n], err)
		}
		f.Close()
		// A closed file fails with an error, not a panic.
		if _, err := g.Write(f, []byte("x")); err == nil {
			t.Fatalf("slow=%v: write to a closed file succeeded", slow)
		}
	}
}

// TestFileSlowCallGoesThroughTheRuntime: a call slower than SlowCall
// sends the next ones through the runtime until one is fast again.
func TestFileSlowCallGoesThroughTheRuntime(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer func(d time.Duration) { SlowCall = d }(SlowCall)
	var g File
	SlowCall = -1 // every call is slow
	if _, err := g.Write(f, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if !g.slow {
		t.Fatal("a slow write did not send the next calls through the runtime")
	}
	SlowCall = time.Hour
	if _, err := g.Write(f, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if g.slow {
		t.Fatal("a fast write did not bring the raw calls back")
	}
}

// TestConnWriteBuffers: what net.Buffers.WriteTo does, raw: every buffer
// arrives in order, more buffers than one writev takes included, and the
// buffers that went out are consumed; after a timeout a retry sends only
// the rest.
func TestConnWriteBuffers(t *testing.T) {
	a, b := tcpPair(t)
	_ = a.(*net.TCPConn).SetWriteBuffer(64 << 10)
	_ = b.(*net.TCPConn).SetReadBuffer(64 << 10)
	ca := NewConn(a)

	var want []byte
	var bufs net.Buffers
	for i := range 3000 { // more than maxIovecs, some empty
		p := bytes.Repeat([]byte{byte(i)}, i%700)
		bufs = append(bufs, p)
		want = append(want, p...)
	}
	got := make(chan []byte, 1)
	go func() {
		all, _ := io.ReadAll(io.LimitReader(b, int64(len(want))))
		got <- all
	}()
	n, err := ca.WriteBuffers(&bufs)
	if err != nil || n != int64(len(want)) || len(bufs) != 0 {
		t.Fatalf("WriteBuffers = %d, %v, %d buffers left; want %d, nil, 0", n, err, len(bufs), len(want))
	}
	if g := <-got; !bytes.Equal(g, want) {
		t.Fatalf("the reader got %d bytes, not the %d written in order", len(g), len(want))
	}

	// Nobody reads: the deadline stops the write part-way, and what is
	// left in bufs is exactly what did not go out.
	big := bytes.Repeat([]byte("x"), 8<<20)
	bufs = net.Buffers{big[:1<<20], big[1<<20:]}
	if err := a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err = ca.WriteBuffers(&bufs)
	left := 0
	for _, p := range bufs {
		left += len(p)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 || int(n)+left != len(big) {
		t.Fatalf("WriteBuffers with no reader = %d, %v, %d left; want a part, a timeout, and the rest left", n, err, left)
	}
}
