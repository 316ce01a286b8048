package bridge

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// A failed Kafka session can leave produce requests written to a broker
// that has not answered them yet (a frozen or overloaded broker: the
// session gave up after kafka.ackTimeoutMs). Their outcome is unknown
// until the broker either answers or drops the connection. If the next
// session read the partitions' tails first, such a request applied later
// would store its records a second time, after the resume decided to send
// them again (a zombie producer: Kafka fences those only for transactional
// producers).
//
// So a session's connections are never just closed. Closing one (kgo does
// it when the session ends, or when it gives up on a connection) half-
// closes it: the bridge stops writing (FIN after whatever was written) and
// keeps reading, discarding the answers, until the broker closes its side.
// A broker processes the requests of one connection in order and only then
// meets the FIN, so once the broker has closed, every request the session
// wrote has been handed to the broker's request processing. The next
// session opens only after that (drained, called by Open), so its reads of
// the tails come after them. With kfake, which handles all requests in
// one queue in arrival order, that closes the window; a real Kafka broker
// may still be applying the last request in a handler thread when it
// closes the connection, so a window of that size remains there (the
// docs/bridge.md says so). A connection that breaks (the broker was
// killed) ends the wait at once: a dead broker applies nothing more.

// drainConn is a session connection whose Close half-closes and drains.
type drainConn struct {
	*net.TCPConn
	sess *kafkaSession

	mu     sync.Mutex
	closed bool
	busy   sync.WaitGroup // kgo's reads and writes in progress
	once   sync.Once
}

func (c *drainConn) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.busy.Add(1)
	return true
}

func (c *drainConn) Read(p []byte) (int, error) {
	if !c.enter() {
		return 0, net.ErrClosed
	}
	defer c.busy.Done()
	return c.TCPConn.Read(p)
}

func (c *drainConn) Write(p []byte) (int, error) {
	if !c.enter() {
		return 0, net.ErrClosed
	}
	defer c.busy.Done()
	return c.TCPConn.Write(p)
}

// The deadlines kgo sets stop applying once the connection is closed: the
// drain sets its own.
func (c *drainConn) SetDeadline(t time.Time) error {
	if !c.enter() {
		return nil
	}
	defer c.busy.Done()
	return c.TCPConn.SetDeadline(t)
}

func (c *drainConn) SetReadDeadline(t time.Time) error {
	if !c.enter() {
		return nil
	}
	defer c.busy.Done()
	return c.TCPConn.SetReadDeadline(t)
}

func (c *drainConn) SetWriteDeadline(t time.Time) error {
	if !c.enter() {
		return nil
	}
	defer c.busy.Done()
	return c.TCPConn.SetWriteDeadline(t)
}

// Close stops kgo's use of the connection at once (a blocked read or
// write returns) and drains the connection in the background.
func (c *drainConn) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		past := time.Unix(1, 0)
		_ = c.TCPConn.SetDeadline(past) // wakes kgo's blocked read or write
		go c.drain()
	})
	return nil
}

func (c *drainConn) drain() {
	defer c.sess.conns.Done()
	defer c.TCPConn.Close()
	c.busy.Wait()
	if err := c.TCPConn.SetDeadline(time.Time{}); err != nil {
		return
	}
	if err := c.TCPConn.CloseWrite(); err != nil {
		return // already broken: nothing more reaches the broker
	}
	_, _ = io.Copy(io.Discard, c.TCPConn) // until the broker closes (EOF) or the connection breaks
}

// drained waits until every connection the session opened is closed and
// drained, logging every few seconds while a broker keeps one open. It
// returns early only when ctx ends.
func (s *kafkaSession) drained(ctx context.Context, log *slog.Logger) error {
	done := make(chan struct{})
	go func() {
		s.conns.Wait()
		close(done)
	}()
	start := time.Now()
	tick := time.NewTicker(drainLogEvery)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			log.Warn("waiting for the Kafka broker to finish the failed session's connections before resuming",
				"waited", time.Since(start).Round(time.Second))
		}
	}
}

// drainLogEvery is how often a long drain is logged.
const drainLogEvery = 5 * time.Second
