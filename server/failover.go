package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"

	"github.com/smssmq/smss/protocol"
)

// Roles as the status command reports them.
const (
	RoleMaster = protocol.RoleMaster
	RoleSlave  = protocol.RoleSlave
)

// NodeStatus is the body of a status (34) reply; the type lives in protocol
// so the client decodes exactly what the server encodes.
type NodeStatus = protocol.NodeStatus

// Control reports the node's replication state for the status command.
type Control interface {
	Status() NodeStatus
}

// lastEventIDer is the optional Backend method status uses without a
// Control.
type lastEventIDer interface{ LastEventID() int64 }

// nodeStatus is Control's report or, without one, what the Backend knows:
// its role and last eventId, epoch 0.
func (s *Server) nodeStatus() NodeStatus {
	if s.opts.Control != nil {
		return s.opts.Control.Status()
	}
	st := NodeStatus{Role: RoleMaster}
	if s.opts.Backend.IsSlave() {
		st.Role = RoleSlave
	}
	if l, ok := s.opts.Backend.(lastEventIDer); ok {
		st.LastEventID = l.LastEventID()
	}
	return st
}

// status serves a status request (34): any user that logged in may ask.
func (c *conn) status() error {
	body, err := json.Marshal(c.s.nodeStatus())
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	return c.appendJSON(body)
}

// Failover serves promote (35) and follow (36). Implementations serialize
// concurrent calls. Errors that are a *protocol.BizError (or wrap one)
// are sent as they are; any other error's text is sent too.
type Failover interface {
	// Promote turns this slave into a master and returns the new epoch;
	// on a master it returns protocol.ErrAlreadyMaster.
	Promote(ctx context.Context) (epoch uint64, err error)
	// Follow re-points this slave's replication to the master at addr
	// ("host:port", already validated).
	Follow(ctx context.Context, addr string) error
}

// promoteReply is the body of a promote (35) reply.
type promoteReply struct {
	Role  string `json:"role"`
	Epoch uint64 `json:"epoch"`
}

// promote serves a promote request (35): the admin role when auth is on.
func (c *conn) promote() error {
	f := c.s.opts.Failover
	if f == nil {
		return errNoFailover
	}
	epoch, err := f.Promote(c.s.ctx)
	if err != nil {
		return err
	}
	body, err := json.Marshal(promoteReply{Role: RoleMaster, Epoch: epoch})
	if err != nil {
		return fmt.Errorf("encode promote reply: %w", err)
	}
	return c.appendJSON(body)
}

// follow serves a follow request (36): the topic field names the master.
func (c *conn) follow() error {
	f := c.s.opts.Failover
	if f == nil {
		return errNoFailover
	}
	addr := string(c.req.Topic)
	if err := validateMasterAddr(addr); err != nil {
		return err
	}
	if err := f.Follow(c.s.ctx, addr); err != nil {
		return err
	}
	c.out = protocol.AppendReplyOK(c.out)
	return nil
}

// errNoFailover answers promote and follow on a server built without
// Failover (the request was read exactly: the connection stays usable).
var errNoFailover = protocol.NewBizError("promote and follow are not available on this server")

// validateMasterAddr checks a follow address: host:port with a non-empty
// host and a port in 1..65535. The error is a *protocol.BizError naming
// the address.
func validateMasterAddr(addr string) error {
	if addr == "" {
		return protocol.ErrFollowNeedsAddr
	}
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		err = fmt.Errorf("no host")
	}
	if err == nil {
		if p, perr := strconv.Atoi(port); perr != nil || p < 1 || p > 65535 {
			err = fmt.Errorf("port %q is not in 1..65535", port)
		}
	}
	if err != nil {
		return protocol.NewBizError(fmt.Sprintf("follow: invalid master address %q (want host:port): %v", addr, err))
	}
	return nil
}
