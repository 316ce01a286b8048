package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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

// PromoteResult is the answer to a promotion: the new epoch and, for a
// forced one, what acknowledged writes may be lost.
type PromoteResult struct {
	Epoch   uint64
	Warning string
}

// PromoteForce promotes like Promote; with force it promotes even when the
// server is not known to hold every write its master acknowledged (a
// server of this version refuses otherwise, naming what would be lost),
// and the result's Warning says what may be lost.
func (c *Client) PromoteForce(ctx context.Context, force bool) (PromoteResult, error) {
	var req []byte
	var err error
	if force {
		req, err = protocol.AppendPromoteForce(nil, traceID(ctx))
	} else {
		req, err = protocol.AppendPromote(nil, traceID(ctx))
	}
	if err != nil {
		return PromoteResult{}, c.encodeErr("promote", "", err)
	}
	body, err := c.callMaybeUnknown(ctx, "promote", "", req, protocol.ReplyJSON, ErrNoFailover)
	if err != nil {
		return PromoteResult{}, err
	}
	var rep protocol.PromoteReply
	if err := json.Unmarshal(body, &rep); err != nil {
		return PromoteResult{}, c.wrap("promote", "", fmt.Errorf("%w: decode promote reply: %w", ErrProtocol, err))
	}
	if rep.Role != RoleMaster {
		return PromoteResult{}, c.wrap("promote", "", fmt.Errorf("%w: promote answered role %q", ErrProtocol, rep.Role))
	}
	return PromoteResult{Epoch: rep.Epoch, Warning: rep.Warning}, nil
}

// ErrNoSwitchover is returned by Switchover when the server does not know
// the command (an original smss or an older version). It wraps
// ErrNotSupported.
var ErrNoSwitchover = fmt.Errorf("smss client: server has no switchover command: %w", ErrNotSupported)

// NotLeaderError is Switchover's error from a cluster node that is not the
// consensus leader: ask again at Addr (the leader Leader's smss address;
// both empty when no leader is known).
type NotLeaderError struct {
	Leader, Addr string
	Err          error // the server's refusal
}

func (e *NotLeaderError) Error() string { return e.Err.Error() }
func (e *NotLeaderError) Unwrap() error { return e.Err }

// Switchover asks a cluster (smss -role auto) to hand its master role to
// the node target ("": any eligible in-sync member) once it caught up with
// the master; it returns the elected master and its epoch. Only the
// consensus leader serves it: another node's refusal is a *NotLeaderError
// naming the leader. It needs the admin role when authentication is on;
// give ctx a deadline above the cluster's switchoverWaitMs.
func (c *Client) Switchover(ctx context.Context, target string) (master string, epoch uint64, err error) {
	req, err := protocol.AppendSwitchover(nil, target, traceID(ctx))
	if err != nil {
		return "", 0, c.encodeErr("switchover", target, err)
	}
	body, err := c.callMaybeUnknown(ctx, "switchover", target, req, protocol.ReplyJSON, ErrNoSwitchover)
	if err != nil {
		var se *ServerError
		if errors.As(err, &se) && strings.HasPrefix(se.Msg, protocol.NotLeaderPrefix) {
			id, addr, _ := protocol.ParseNotLeader(se.Msg)
			return "", 0, &NotLeaderError{Leader: id, Addr: addr, Err: err}
		}
		return "", 0, err
	}
	var rep protocol.SwitchoverReply
	if err := json.Unmarshal(body, &rep); err != nil || rep.Master == "" {
		return "", 0, c.wrap("switchover", target, fmt.Errorf("%w: switchover reply %q", ErrProtocol, body))
	}
	return rep.Master, rep.Epoch, nil
}
