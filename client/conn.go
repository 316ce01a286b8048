package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/smssmq/smss/protocol"
)

// conn is one TCP connection with its read buffer. It is used by one
// goroutine at a time (the pool hands it out exclusively).
type conn struct {
	nc       net.Conn
	r        *bufio.Reader
	created  time.Time
	lastUsed time.Time
}

func dialConn(ctx context.Context, o *Options, addr string) (*conn, error) {
	nc, err := dial(ctx, o.DialContext, o.DialTimeout, addr)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &conn{nc: nc, r: bufio.NewReader(nc), created: now, lastUsed: now}, nil
}

func (c *conn) close() { c.nc.Close() }

// aLongTimeAgo is a deadline that makes pending I/O fail at once.
var aLongTimeAgo = time.Unix(1, 0)

// watch arms the connection's deadline from ctx (or fallback when ctx has
// none) and interrupts its I/O when ctx is cancelled. The returned function
// must be called when the I/O is over; it reports whether ctx interrupted it.
func (c *conn) watch(ctx context.Context, fallback time.Duration) (done func() bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(fallback)
	}
	c.nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(aLongTimeAgo) })
	return func() bool { return !stop() }
}

// roundTrip writes one request and reads its reply. A non-nil error other
// than *ServerError means the connection must be discarded.
func (c *conn) roundTrip(ctx context.Context, req []byte, kind protocol.ReplyKind, maxBody int, fallback time.Duration, topic string) ([]byte, error) {
	done := c.watch(ctx, fallback)
	body, err := c.exchange(req, kind, maxBody)
	done()
	if err != nil {
		err = ctxCause(ctx, err)
	}
	c.lastUsed = time.Now()
	if err != nil {
		if errors.Is(err, protocol.ErrUnexpectedStatus) || errors.Is(err, protocol.ErrReplyTooLarge) {
			err = fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		return nil, toServerError(err, topic)
	}
	return body, nil
}

func (c *conn) exchange(req []byte, kind protocol.ReplyKind, maxBody int) ([]byte, error) {
	if _, err := c.nc.Write(req); err != nil {
		return nil, fmt.Errorf("write request: %w", err)
	}
	return protocol.ReadReply(c.r, kind, maxBody)
}

// usable reports whether an idle connection can be handed out: the server
// must not have closed it and no unsolicited bytes may be waiting. It costs
// one non-blocking syscall, no round trip.
func (c *conn) usable() bool {
	if c.r.Buffered() > 0 {
		return false
	}
	return peekAlive(c.nc) == nil
}

// ctxCause reports an I/O failure caused by ctx (cancelled, or its deadline,
// which is the connection's deadline, passed) as ctx's error. The socket
// timer can fire a moment before ctx's own, so a deadline error counts when
// ctx has a deadline that has passed.
func ctxCause(ctx context.Context, err error) error {
	cause := ctx.Err()
	if cause == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			cause = context.DeadlineExceeded
		}
	}
	if cause == nil {
		return err
	}
	return fmt.Errorf("%w (%v)", cause, err)
}

// dial connects within timeout and ctx.
func dial(ctx context.Context, dc func(context.Context, string, string) (net.Conn, error), timeout time.Duration, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := dc(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, ctxCause(ctx, err))
	}
	return nc, nil
}
