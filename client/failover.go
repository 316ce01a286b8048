package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/smssmq/smss/protocol"
)

// ErrNoFailover is returned by Promote and Follow when the server does not
// know those commands (an original smss). It wraps ErrNotSupported.
var ErrNoFailover = fmt.Errorf("smss client: server has no promote/follow commands: %w", ErrNotSupported)

// Promote turns the server, a slave, into a master without a restart and
// returns its new promotion epoch. It needs the admin role when the server
// has authentication on. On a master the error matches
// protocol.ErrAlreadyMaster (errors.Is).
func (c *Client) Promote(ctx context.Context) (uint64, error) {
	req, err := protocol.AppendPromote(nil, traceID(ctx))
	if err != nil {
		return 0, c.encodeErr("promote", "", err)
	}
	body, err := c.callMaybeUnknown(ctx, "promote", "", req, protocol.ReplyJSON, ErrNoFailover)
	if err != nil {
		return 0, err
	}
	st, err := ParseNodeStatus(body)
	if err != nil {
		return 0, c.wrap("promote", "", err)
	}
	if !st.IsMaster() {
		return 0, c.wrap("promote", "", fmt.Errorf("%w: promote answered role %q", ErrProtocol, st.Role))
	}
	return st.Epoch, nil
}

// Follow re-points the server, a slave, to the master at addr
// ("host:port"). It needs the admin role when the server has
// authentication on; a master refuses it (bring an old master back as a
// slave by restarting it with -rejoin).
func (c *Client) Follow(ctx context.Context, addr string) error {
	req, err := protocol.AppendFollow(nil, addr, traceID(ctx))
	if err != nil {
		return c.encodeErr("follow", addr, err)
	}
	_, err = c.callMaybeUnknown(ctx, "follow", addr, req, protocol.ReplyPlain, ErrNoFailover)
	return err
}

// callMaybeUnknown is call for commands an original server does not know:
// its "don't support action" comes with a closed connection, which is
// dropped rather than pooled, and becomes unsupported (ErrNoFailover,
// ErrNoCursors: each matches ErrNotSupported).
func (c *Client) callMaybeUnknown(ctx context.Context, op, topic string, req []byte, kind protocol.ReplyKind, unsupported error) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	cn, err := c.pool.get(ctx)
	if err != nil {
		return nil, c.wrap(op, topic, err)
	}
	body, err := cn.roundTrip(ctx, req, kind, c.opts.MaxReplyBytes, c.opts.RequestTimeout, topic)
	unknown := errors.Is(err, ErrNotSupported)
	c.pool.put(cn, err != nil && (!IsServerError(err) || unknown))
	if unknown {
		return nil, c.wrap(op, topic, unsupported)
	}
	if err != nil {
		return nil, c.wrap(op, topic, err)
	}
	return body, nil
}
