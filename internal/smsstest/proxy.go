package smsstest

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a loopback port to a target, and
// lets a test fail the link between them: Cut it (connections closed, new
// ones refused), Pause it (connections stay open, nothing gets through),
// Delay it (every byte arrives d late), Reset it (the connections so far
// are closed, new ones are forwarded), and Restore it. Its port stays the
// same across Cut and Restore.
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu     sync.Mutex
	ln     net.Listener // nil while cut or closed
	conns  map[net.Conn]struct{}
	delay  time.Duration
	paused chan struct{} // non-nil while paused; closed by Restore
	closed bool
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to target on a free loopback port; it is closed
// in t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{t: t, target: target, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}}
	if err := p.listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Port is the proxy's port.
func (p *Proxy) Port() int {
	_, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	return n
}

// listen opens the proxy's port (the same one again after a Cut); p.mu
// must not be held.
func (p *Proxy) listen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil || p.closed {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("proxy listen %s: %w", p.addr, err)
	}
	p.ln, p.addr = ln, ln.Addr().String()
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close() // the target is down: the client sees its connection end
			continue
		}
		p.mu.Lock()
		if p.closed || p.ln != ln {
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// chunk is bytes read from one side, due on the other at a time.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst through the proxy's gate (pause, delay) until
// either side fails, then closes both. Reading and writing are apart so
// a delay is latency, not a cap on throughput.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer p.drop(dst, src)
	// Deep enough that a delay adds latency without capping the rate: a
	// stream of small writes (a replica stream, confirmations) fills many
	// chunks per delay.
	queue := make(chan chunk, 8192)
	done := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(queue)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				due := time.Now().Add(p.delay)
				p.mu.Unlock()
				select {
				case queue <- chunk{append([]byte(nil), buf[:n]...), due}:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer close(done)
	for c := range queue {
		if !p.gate(c.due, src) {
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
	// src ended: the deferred drop closes both sides, as a relay whose
	// peer hung up does (the protocol has no half-closed state).
}

// gate waits until a chunk may pass: the link is not paused and the chunk
// is due. It reports false if the connection was closed meanwhile.
func (p *Proxy) gate(due time.Time, a net.Conn) bool {
	for {
		p.mu.Lock()
		paused := p.paused
		_, live := p.conns[a]
		p.mu.Unlock()
		if !live {
			return false
		}
		if paused != nil {
			<-paused
			continue
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d) // latency the test asked for
		}
		return true
	}
}

func (p *Proxy) drop(a, b net.Conn) {
	p.mu.Lock()
	delete(p.conns, a)
	delete(p.conns, b)
	p.mu.Unlock()
	a.Close()
	b.Close()
}

// closeConns closes every forwarded connection; p.mu must be held.
func (p *Proxy) closeConns() {
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
	if p.paused != nil {
		close(p.paused) // wake the gates, which then see their connection gone
		p.paused = nil
	}
}

// Cut closes the proxy's port and every forwarded connection: clients see
// their connections end and new ones refused until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	p.closeConns()
}

// Reset closes the connections forwarded so far; new ones are forwarded
// as before. Both ends see a network failure and may reconnect at once.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeConns()
}

// Pause holds every byte in flight, in both directions, until Restore;
// connections stay open, as in a partition that drops no connection.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == nil {
		p.paused = make(chan struct{})
	}
}

// Delay makes every byte read from now on arrive d later on the other side
// (0: none); order is kept.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Restore undoes Cut, Pause and Delay: the port is open again on the same
// address and bytes flow without delay. It fails the test if the port
// cannot be opened again.
func (p *Proxy) Restore() {
	p.t.Helper()
	p.mu.Lock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
	p.delay = 0
	p.mu.Unlock()
	if err := p.listen(); err != nil {
		p.t.Fatal(err)
	}
}

// Close ends the proxy: its port and every connection are closed, and its
// goroutines have returned when Close does.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	p.closeConns()
	p.mu.Unlock()
	p.wg.Wait()
}
