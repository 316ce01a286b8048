package server

import (
	"encoding/json"
	"fmt"
)

// Roles as the status command reports them.
const (
	RoleMaster = "master"
	RoleSlave  = "slave"
)

// NodeStatus is the body of a status (34) reply (README, "Protocol
// extension: status, promote and follow").
type NodeStatus struct {
	Role        string `json:"role"`
	Epoch       uint64 `json:"epoch"`
	LastEventID int64  `json:"lastEventId"`
	// Master is the address a slave follows; empty (and left out) on a
	// master.
	Master string `json:"master,omitempty"`
}

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
