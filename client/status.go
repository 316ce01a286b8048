package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/smssmq/smss/protocol"
)

// Roles a NodeStatus reports.
const (
	RoleMaster = "master"
	RoleSlave  = "slave"
)

// NodeStatus is a server's answer to the status command (34): its role,
// promotion epoch (which grows with every promotion, so of two masters the
// one with the higher epoch is the newer), last eventId and, on a slave,
// the master it follows ("host:port").
type NodeStatus struct {
	Role        string `json:"role"`
	Epoch       uint64 `json:"epoch"`
	LastEventID int64  `json:"lastEventId"`
	Master      string `json:"master,omitempty"`
}

// IsMaster reports whether the node said it is a master.
func (s *NodeStatus) IsMaster() bool { return s.Role == RoleMaster }

// ErrNoStatus is returned by Status when the server does not know the
// status command (an original smss answers "don't support action" and
// closes the connection). It wraps ErrNotSupported.
var ErrNoStatus = fmt.Errorf("smss client: server has no status command: %w", ErrNotSupported)

// ParseNodeStatus decodes the body of a status reply. It requires a role
// of "master" or "slave".
func ParseNodeStatus(body []byte) (*NodeStatus, error) {
	var st NodeStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("%w: decode status: %w", ErrProtocol, err)
	}
	if st.Role != RoleMaster && st.Role != RoleSlave {
		return nil, fmt.Errorf("%w: status with role %q", ErrProtocol, st.Role)
	}
	return &st, nil
}

// Status asks the server for its role, promotion epoch, last eventId and
// followed master. Against a server without the command it returns an
// error matching ErrNoStatus (and ErrNotSupported).
func (c *Client) Status(ctx context.Context) (*NodeStatus, error) {
	req, err := protocol.AppendStatus(nil, traceID(ctx))
	if err != nil {
		return nil, c.encodeErr("status", "", err)
	}
	body, err := c.callClosing(ctx, "status", req)
	if errors.Is(err, ErrNotSupported) {
		return nil, c.wrap("status", "", ErrNoStatus)
	}
	if err != nil {
		return nil, err
	}
	st, err := ParseNodeStatus(body)
	if err != nil {
		return nil, c.wrap("status", "", err)
	}
	return st, nil
}

// callClosing is call for the commands an original server does not know:
// its "don't support action" reply comes with a closed connection, which
// must not go back to the pool.
func (c *Client) callClosing(ctx context.Context, op string, req []byte) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	cn, err := c.pool.get(ctx)
	if err != nil {
		return nil, c.wrap(op, "", err)
	}
	body, err := cn.roundTrip(ctx, req, protocol.ReplyJSON, c.opts.MaxReplyBytes, c.opts.RequestTimeout, "")
	c.pool.put(cn, err != nil && (!IsServerError(err) || errors.Is(err, ErrNotSupported)))
	if err != nil {
		return nil, c.wrap(op, "", err)
	}
	return body, nil
}
