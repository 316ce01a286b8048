package client

import (
	"context"
	"fmt"

	"github.com/smssmq/smss/protocol"
)

// Roles a NodeStatus reports.
const (
	RoleMaster = protocol.RoleMaster
	RoleSlave  = protocol.RoleSlave
)

// NodeStatus is a server's answer to the status command (34): its role,
// promotion epoch (which grows with every promotion, so of two masters the
// one with the higher epoch is the newer), last eventId and, on a slave,
// the master it follows ("host:port"). It is protocol's type, the one the
// server encodes.
type NodeStatus = protocol.NodeStatus

// ErrNoStatus is returned by Status when the server does not know the
// status command (an original smss answers "don't support action" and
// closes the connection). It wraps ErrNotSupported.
var ErrNoStatus = fmt.Errorf("smss client: server has no status command: %w", ErrNotSupported)

// ParseNodeStatus decodes the body of a status reply. It requires a role
// of "master" or "slave".
func ParseNodeStatus(body []byte) (*NodeStatus, error) {
	st, err := protocol.DecodeNodeStatus(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return st, nil
}

// Status asks the server for its role, promotion epoch, last eventId and
// followed master. Against a server without the command it returns an
// error matching ErrNoStatus (and ErrNotSupported).
func (c *Client) Status(ctx context.Context) (*NodeStatus, error) {
	req, err := protocol.AppendStatus(nil, traceID(ctx))
	if err != nil {
		return nil, c.encodeErr("status", "", err)
	}
	body, err := c.callMaybeUnknown(ctx, "status", "", req, protocol.ReplyJSON, ErrNoStatus)
	if err != nil {
		return nil, err
	}
	st, err := ParseNodeStatus(body)
	if err != nil {
		return nil, c.wrap("status", "", err)
	}
	return st, nil
}
