package replication

import (
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/internal/rawsys"
)

// confirmSender writes a slave's confirmation records (confirm.go) on the
// replica connection from its own goroutine, so the apply loop never waits
// for the network: post only stores the newest position, and the sender
// writes the newest one it finds, one record per wake-up (confirmations
// coalesce when the network is slower than the applies). The first record
// is the hello, sent once the first frame arrived, i.e. once the master
// accepted the stream: a master that refuses the request (400) and reads
// the next request from the connection never sees it.
type confirmSender struct {
	conn     net.Conn
	sock     rawsys.Conn // conn's writes, around the scheduler (package rawsys)
	instance [InstanceIDLen]byte
	fsynced  bool
	timeout  time.Duration
	log      *slog.Logger

	pos  atomic.Int64
	kick chan struct{}

	// v2: the hello says version 2 and an epoch record (epoch) follows it
	// (docs/protocol.md §4.6). Set before run.
	v2    bool
	epoch uint64
}

func newConfirmSender(conn net.Conn, instance [InstanceIDLen]byte, fsynced bool, timeout time.Duration, log *slog.Logger) *confirmSender {
	return &confirmSender{conn: conn, sock: rawsys.NewConn(conn), instance: instance, fsynced: fsynced, timeout: timeout, log: log, kick: make(chan struct{}, 1)}
}

// post makes pos (the last eventId the slave's writer committed) the next
// position to confirm.
func (c *confirmSender) post(pos int64) {
	c.pos.Store(pos)
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run sends until quit is closed or a write fails. A failed write ends
// only the confirmations of this session (the master then stops counting
// this slave); the stream's reads notice a broken connection themselves.
func (c *confirmSender) run(quit <-chan struct{}) {
	var (
		buf   []byte
		hello = true
		last  int64
	)
	for {
		select {
		case <-c.kick:
		case <-quit:
			return
		}
		pos := c.pos.Load()
		if !hello && pos == last {
			continue
		}
		kind := ConfirmConfirm
		if hello {
			kind = ConfirmHello
		}
		buf = AppendConfirm(buf[:0], Confirm{Kind: kind, Fsynced: c.fsynced, V2: c.v2, Instance: c.instance, EventID: pos})
		if hello && c.v2 {
			buf = AppendConfirm(buf, Confirm{Kind: ConfirmEpoch, EventID: int64(min(c.epoch, 1<<62))})
		}
		if err := c.write(buf); err != nil {
			select {
			case <-quit: // the session is ending: the connection was closed
			default:
				c.log.Warn("cannot send a confirmation to the master; this session no longer confirms", "eventId", pos, "err", err)
			}
			return
		}
		hello, last = false, pos
	}
}

// write sends buf whole within the write timeout.
func (c *confirmSender) write(buf []byte) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	_, err := c.sock.Write(buf)
	return err
}
