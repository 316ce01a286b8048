package protocol

import (
	"encoding/json"
	"fmt"
)

// Failover commands: an extension of docs/protocol.md §1.3 (README, "Protocol
// extension: status, promote and follow"). Each is the 20-byte header with
// header bytes 3..18 zero, then the topic field and the traceId, and no
// body, like delete (3). An original server answers them with 400 "don't
// support action" and closes the connection; clients must read that as "no
// status available".
const (
	// CmdStatus asks for the node's role, promotion epoch, last eventId and,
	// on a slave, the master it follows. No topic.
	CmdStatus Command = 34
	// CmdPromote turns a running slave into a master. No topic.
	CmdPromote Command = 35
	// CmdFollow re-points a running slave to the master whose "host:port"
	// is in the topic field.
	CmdFollow Command = 36
)

// Texts of the failover commands' 400 replies.
var (
	ErrAlreadyMaster   = NewBizError("already a master")
	ErrFollowNeedsAddr = NewBizError("follow needs the master's host:port in the topic field")
)

// AppendStatus appends a status request.
func AppendStatus(dst, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdStatus, [16]byte{}, nil, traceID)
}

// AppendPromote appends a promote request.
func AppendPromote(dst, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdPromote, [16]byte{}, nil, traceID)
}

// AppendFollow appends a follow request for the master at addr
// ("host:port").
func AppendFollow(dst []byte, addr string, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdFollow, [16]byte{}, []byte(addr), traceID)
}

// Roles a status reply reports.
const (
	RoleMaster = "master"
	RoleSlave  = "slave"
)

// NodeStatus is the JSON body of a status (34) reply (README, "Protocol
// extension: status, promote and follow"): the node's role, its promotion
// epoch (which grows with every promotion, so of two masters the one with
// the higher epoch is the newer), its last eventId and, on a slave, the
// master it follows ("host:port"). Server and client share this one type so
// the two sides cannot drift apart.
type NodeStatus struct {
	Role        string `json:"role"`
	Epoch       uint64 `json:"epoch"`
	LastEventID int64  `json:"lastEventId"`
	// Master is the address a slave follows; empty (and left out) on a
	// master.
	Master string `json:"master,omitempty"`
}

// IsMaster reports whether the node said it is a master.
func (s *NodeStatus) IsMaster() bool { return s.Role == RoleMaster }

// DecodeNodeStatus decodes the body of a status reply. It requires a role
// of "master" or "slave": anything else is not a status this protocol
// defines.
func DecodeNodeStatus(body []byte) (*NodeStatus, error) {
	var st NodeStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("decode status: %w", err)
	}
	if st.Role != RoleMaster && st.Role != RoleSlave {
		return nil, fmt.Errorf("status with role %q", st.Role)
	}
	return &st, nil
}
