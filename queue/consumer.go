package queue

import (
	"sync"
	"time"

	"github.com/smssmq/smss/protocol"
)

// Consumer is one connected member of a group, as the server's connection
// handler sees it: it takes the frames the group queued for it (Take,
// after Wake), passes on what the client says of its messages (Outcomes),
// and ends with Leave. The group's loop owns every field below mu except
// those mu guards.
type Consumer struct {
	g     *group
	name  string
	addr  string
	max   int
	since time.Time

	mu     sync.Mutex
	out    []byte // frames not yet taken
	ended  bool
	endErr error // nil: ended normally (255)
	wake   chan struct{}
	done   chan struct{}

	// loop-owned
	inFlight int
	acked    int64
	stopping bool
}

// Name is the consumer's name as it joined.
func (c *Consumer) Name() string { return c.name }

// Wake is signalled when frames are queued or the consumer ended.
func (c *Consumer) Wake() <-chan struct{} { return c.wake }

// Done is closed when the consumer ended; Take then returns the last
// frames and Err why.
func (c *Consumer) Done() <-chan struct{} { return c.done }

// Err is nil after a normal end (stop, or the group or its topic deleted:
// the stream ends with 255) and the refusal otherwise (400).
func (c *Consumer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endErr
}

// Take appends the queued frames to dst and returns it.
func (c *Consumer) Take(dst []byte) []byte {
	c.mu.Lock()
	dst = append(dst, c.out...)
	c.out = c.out[:0]
	if cap(c.out) > 1<<20 {
		c.out = nil
	}
	c.mu.Unlock()
	return dst
}

// Outcomes hands what the client said of its messages to the group. A
// stop ends the consumer once the outcomes before it are recorded.
func (c *Consumer) Outcomes(os []protocol.QueueOutcome) {
	c.g.post(outcomesEv{c: c, os: os})
}

// Leave removes the consumer (its connection ended). Its messages stay
// in flight until their ack wait passes.
func (c *Consumer) Leave() { c.g.post(leaveEv{c: c}) }

// queue appends a frame; called by the group's loop.
func (c *Consumer) queue(frame []byte) {
	c.mu.Lock()
	if !c.ended {
		c.out = append(c.out, frame...)
	}
	c.mu.Unlock()
	c.signal()
}

func (c *Consumer) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// end ends the consumer once; called by the group's loop.
func (c *Consumer) end(err error) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended, c.endErr = true, err
	close(c.done)
	c.mu.Unlock()
	c.signal()
}
