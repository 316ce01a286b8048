package client

import (
	"bufio"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/client/internal/testserver"
	"github.com/smssmq/smss/protocol"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// fake is a scripted TCP server: serve runs for every accepted connection.
type fake struct {
	l     net.Listener
	conns atomic.Int32
	wg    sync.WaitGroup
}

func startFake(t *testing.T, serve func(c net.Conn, r *bufio.Reader)) *fake {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{l: l}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		f.wg.Wait()
	})
	return f
}

func (f *fake) addr() string { return f.l.Addr().String() }

// readReq reads one request from a client connection.
func readReq(r *bufio.Reader) (*protocol.Request, error) {
	return protocol.ReadRequest(r, protocol.DefaultLimits())
}

// countingDialer counts the connections a Client opens.
type countingDialer struct{ n atomic.Int32 }

func (d *countingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func dialT(t *testing.T, addr string, o Options) *Client {
	t.Helper()
	c, err := Dial(ctxT(t, 10*time.Second), addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
