package client

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/smssmq/smss/protocol"
)

// pool is a bounded set of connections to one address.
//
// Invariant: open connections (borrowed + idle + being health-checked) never
// exceed the capacity of slots. A slot is held by every borrowed connection
// and by the health checker while it pings an idle one; a new connection is
// dialled only by a borrower holding a slot when no idle connection is left.
type pool struct {
	addr  string
	opts  *Options
	log   *slog.Logger
	slots chan struct{}

	mu     sync.Mutex
	idle   []*conn // most recently used last
	closed bool

	stop chan struct{}
	wg   sync.WaitGroup
}

func newPool(addr string, o *Options) *pool {
	p := &pool{
		addr:  addr,
		opts:  o,
		log:   o.Logger,
		slots: make(chan struct{}, o.MaxConns),
		stop:  make(chan struct{}),
	}
	if o.HealthCheckInterval > 0 {
		p.wg.Add(1)
		go p.healthLoop()
	}
	return p
}

// get borrows a connection: an idle one that passes the cheap liveness
// probe, or a new one.
func (p *pool) get(ctx context.Context) (*conn, error) {
	if err := p.acquire(ctx); err != nil {
		return nil, err
	}
	for {
		c, err := p.popIdle()
		if err != nil {
			p.release()
			return nil, err
		}
		if c == nil {
			break
		}
		if p.expired(c) || !c.usable() {
			c.close()
			continue
		}
		return c, nil
	}
	c, err := dialConn(ctx, p.opts, p.addr)
	if err != nil {
		p.release()
		return nil, err
	}
	return c, nil
}

// put returns a borrowed connection and its slot; bad ones are closed.
func (p *pool) put(c *conn, bad bool) {
	defer p.release()
	if bad || p.expired(c) {
		c.close()
		return
	}
	p.putIdle(c)
}

func (p *pool) putIdle(c *conn) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

func (p *pool) acquire(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
		return nil
	default:
	}
	if p.opts.WaitTimeout < 0 {
		return ErrPoolTimeout
	}
	t := time.NewTimer(p.opts.WaitTimeout)
	defer t.Stop()
	select {
	case p.slots <- struct{}{}:
		return nil
	case <-t.C:
		return ErrPoolTimeout
	case <-ctx.Done():
		return fmt.Errorf("wait for a connection: %w", ctx.Err())
	case <-p.stop:
		return ErrClosed
	}
}

func (p *pool) release() { <-p.slots }

func (p *pool) popIdle() (*conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	n := len(p.idle)
	if n == 0 {
		return nil, nil
	}
	c := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	return c, nil
}

func (p *pool) expired(c *conn) bool {
	return p.opts.MaxLifetime > 0 && time.Since(c.created) >= p.opts.MaxLifetime
}

func (p *pool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	close(p.stop)
	p.wg.Wait()
	for _, c := range idle {
		c.close()
	}
}

func (p *pool) healthLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.HealthCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.checkIdle()
		}
	}
}

// checkIdle closes expired idle connections and pings those idle for at
// least one interval. A connection is taken out of the idle list only while
// the checker holds a slot for it, so a concurrent borrower can never dial
// past the cap; when every slot is busy the check waits for the next round.
func (p *pool) checkIdle() {
	p.mu.Lock()
	kept := p.idle[:0]
	for _, c := range p.idle {
		if p.expired(c) {
			c.close()
		} else {
			kept = append(kept, c)
		}
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	p.mu.Unlock()

	// Each connection is checked at most once per round: a pinged one goes
	// back with a fresh lastUsed and no longer qualifies.
	for {
		select {
		case p.slots <- struct{}{}:
		default:
			return
		}
		c := p.takeStale()
		if c == nil {
			p.release()
			return
		}
		ok := p.ping(c)
		if !ok {
			p.log.Debug("smss client: dropped dead idle connection", "addr", p.addr)
		}
		p.put(c, !ok)
	}
}

// takeStale removes and returns the least recently used idle connection if
// it has been idle for a whole check interval.
func (p *pool) takeStale() *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) == 0 || time.Since(p.idle[0].lastUsed) < p.opts.HealthCheckInterval {
		return nil
	}
	c := p.idle[0]
	p.idle[0] = nil
	p.idle = p.idle[1:]
	return c
}

func (p *pool) ping(c *conn) bool {
	req, _ := protocol.AppendAlive(nil, []byte("health-check"))
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.DialTimeout)
	defer cancel()
	_, err := c.roundTrip(ctx, req, protocol.ReplyPlain, 0, p.opts.DialTimeout, "")
	return err == nil
}
