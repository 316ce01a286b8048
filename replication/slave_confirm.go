package replication

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/internal/rawsys"
)

// confirmSender writes a slave's confirmation records (confirm.go) on the
// replica connection. The apply loop never waits for the network:
//
//   - post stores the newest position and writes its record itself when
//     the socket takes it at once (TryWrite), which is nearly always: a
//     20-byte record after each apply. That saves a goroutine wake-up per
//     apply, a scheduler hand-off that cost about 40 µs of latency on a
//     busy 2-core machine (BENCHMARKS.md, semi-synchronous replication);
//   - otherwise (the sender is writing, the socket is full, or the hello
//     is not out yet) the sender goroutine writes it, waiting up to the
//     write timeout, with the newest position it finds: confirmations
//     coalesce when the network is slower than the applies.
//
// The first record is the hello, sent by the sender once the first frame
// arrived, i.e. once the master accepted the stream: a master that
// refuses the request (400) and reads the next request from the
// connection never sees it. mu orders the two writers, so the master
// reads whole records in position order; a record the socket took only in
// part is finished by the sender before anything else.
type confirmSender struct {
	conn     net.Conn
	sock     rawsys.Conn // conn's writes, around the scheduler (package rawsys)
	instance [InstanceIDLen]byte
	fsynced  bool
	timeout  time.Duration
	log      *slog.Logger

	// tryWrite is sock.TryWrite (a test's stand-in cuts records short).
	tryWrite func([]byte) (int, error)

	pos    atomic.Int64
	kick   chan struct{}
	posted bool   // post ran once (apply loop only)
	rec    []byte // post's record buffer (apply loop only)

	mu     sync.Mutex
	sent   int64  // the last position whose record was started
	hello  bool   // the hello went out: the apply loop may write
	tail   []byte // the rest of a record the socket took in part
	broken bool   // a write failed: this session confirms no more

	// v2: the hello says version 2 and an epoch record (epoch) follows it
	// (docs/protocol.md §4.6). Set before run.
	v2    bool
	epoch uint64
}

func newConfirmSender(conn net.Conn, instance [InstanceIDLen]byte, fsynced bool, timeout time.Duration, log *slog.Logger) *confirmSender {
	c := &confirmSender{conn: conn, sock: rawsys.NewConn(conn), instance: instance, fsynced: fsynced, timeout: timeout, log: log, kick: make(chan struct{}, 1)}
	c.tryWrite = c.sock.TryWrite
	return c
}

// post makes pos (the last eventId the slave's writer committed) the next
// position to confirm (apply loop only).
func (c *confirmSender) post(pos int64) {
	if c.posted && c.pos.Load() == pos {
		return // the sender has it, or sent it: no wake-up for nothing
	}
	c.posted = true
	c.pos.Store(pos)
	if c.direct(pos) {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// direct writes pos's record from the apply loop if the socket takes it
// now; it reports whether nothing is left for the sender.
func (c *confirmSender) direct(pos int64) bool {
	if !c.mu.TryLock() {
		return false // the sender is writing: it takes the newest position after
	}
	defer c.mu.Unlock()
	if !c.hello || c.broken || len(c.tail) > 0 {
		return false
	}
	if pos <= c.sent {
		return true
	}
	c.rec = AppendConfirm(c.rec[:0], Confirm{Kind: ConfirmConfirm, Fsynced: c.fsynced, V2: c.v2, Instance: c.instance, EventID: pos})
	n, err := c.tryWrite(c.rec)
	if err != nil {
		return false // the sender meets the failure and says so
	}
	if n > 0 {
		c.sent = pos
		c.tail = append(c.tail[:0], c.rec[n:]...)
	}
	return n == len(c.rec)
}

// run sends until quit is closed or a write fails. A failed write ends
// only the confirmations of this session (the master then stops counting
// this slave); the stream's reads notice a broken connection themselves.
func (c *confirmSender) run(quit <-chan struct{}) {
	var buf []byte
	for {
		select {
		case <-c.kick:
		case <-quit:
			return
		}
		if err := c.send(&buf); err != nil {
			select {
			case <-quit: // the session is ending: the connection was closed
			default:
				c.log.Warn("cannot send a confirmation to the master; this session no longer confirms", "eventId", c.pos.Load(), "err", err)
			}
			return
		}
	}
}

// send writes what the apply loop left: the rest of a record, then the
// newest position's record (the hello with the first one).
func (c *confirmSender) send(buf *[]byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tail) > 0 {
		if err := c.write(c.tail); err != nil {
			c.broken = true
			return err
		}
		c.tail = c.tail[:0]
	}
	pos := c.pos.Load()
	if c.hello && pos <= c.sent {
		return nil
	}
	kind := ConfirmConfirm
	if !c.hello {
		kind = ConfirmHello
	}
	*buf = AppendConfirm((*buf)[:0], Confirm{Kind: kind, Fsynced: c.fsynced, V2: c.v2, Instance: c.instance, EventID: pos})
	if !c.hello && c.v2 {
		*buf = AppendConfirm(*buf, Confirm{Kind: ConfirmEpoch, EventID: int64(min(c.epoch, 1<<62))})
	}
	if err := c.write(*buf); err != nil {
		c.broken = true
		return err
	}
	c.hello, c.sent = true, pos
	return nil
}

// write sends buf whole within the write timeout.
func (c *confirmSender) write(buf []byte) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	_, err := c.sock.Write(buf)
	return err
}
