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

// CheckedPromoter is implemented by a Failover whose promotion first
// checks that the node holds every write its master acknowledged; force
// promotes anyway and the result's Warning says what may be lost. The
// server calls it instead of Promote when present.
type CheckedPromoter interface {
	PromoteChecked(ctx context.Context, force bool) (epoch uint64, warning string, err error)
}

// Switchoverer is implemented by a Failover of a cluster node (smss -role
// auto): a planned switchover to the node target ("": any eligible
// in-sync member), through the consensus. It returns the elected master
// and its epoch.
type Switchoverer interface {
	Switchover(ctx context.Context, target string) (master string, epoch uint64, err error)
}

// promote serves a promote request (35): the admin role when auth is on.
// The topic field is empty or protocol.PromoteForce.
func (c *conn) promote() error {
	f := c.s.opts.Failover
	if f == nil {
		return errNoFailover
	}
	var force bool
	switch opt := string(c.req.Topic); opt {
	case "":
	case protocol.PromoteForce:
		force = true
	default:
		return protocol.NewBizError(fmt.Sprintf("promote: unknown option %q in the topic field (only %q)", opt, protocol.PromoteForce))
	}
	var (
		epoch   uint64
		warning string
		err     error
	)
	if cp, ok := f.(CheckedPromoter); ok {
		epoch, warning, err = cp.PromoteChecked(c.s.ctx, force)
	} else {
		epoch, err = f.Promote(c.s.ctx)
	}
	if err != nil {
		return err
	}
	body, err := json.Marshal(protocol.PromoteReply{Role: RoleMaster, Epoch: epoch, Warning: warning})
	if err != nil {
		return fmt.Errorf("encode promote reply: %w", err)
	}
	return c.appendJSON(body)
}

// switchover serves a switchover request (40): the topic field names the
// target node (or is empty); the admin role when auth is on.
func (c *conn) switchover() error {
	sw, ok := c.s.opts.Failover.(Switchoverer)
	if !ok {
		return errNoSwitchover
	}
	target := string(c.req.Topic)
	if err := validateNodeID(target); err != nil {
		return err
	}
	master, epoch, err := sw.Switchover(c.s.ctx, target)
	if err != nil {
		return err
	}
	body, err := json.Marshal(protocol.SwitchoverReply{Master: master, Epoch: epoch})
	if err != nil {
		return fmt.Errorf("encode switchover reply: %w", err)
	}
	return c.appendJSON(body)
}

// errNoSwitchover answers switchover on a server without a cluster.
var errNoSwitchover = protocol.NewBizError("switchover is not available on this server: it is not one of a cluster (smss -role auto)")

// validateNodeID checks a switchover target: empty, or printable ASCII
// without spaces (the cluster's peer ids), at most 64 bytes.
func validateNodeID(id string) error {
	bad := len(id) > 64
	for i := 0; i < len(id) && !bad; i++ {
		bad = id[i] <= ' ' || id[i] > '~'
	}
	if bad {
		return protocol.NewBizError(fmt.Sprintf("switchover: invalid node id %q (printable ASCII without spaces, at most 64 bytes)", id))
	}
	return nil
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
