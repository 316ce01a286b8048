package protocol

import (
	"encoding/json"
	"fmt"
)

// Failover commands: an extension of docs/protocol.md §1.3 (§12.2, status,
// promote and follow). Each is the 20-byte header with
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

// NodeStatus is the JSON body of a status (34) reply (docs/protocol.md
// §12.2, status, promote and follow): the node's role, its promotion
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

	// The fields below are left out when zero, so a status reads as
	// before to a client that does not know them.

	// Replica is the replica stream version the node serves as a master
	// (ReplicaStreamV2: commit frames and epoch records, docs/protocol.md
	// §4.6); 0 is the stream of §4.3.
	Replica int `json:"replica,omitempty"`
	// CommitPoint is the highest eventId a failover keeps and subscribers
	// are served up to (read-committed delivery); 0 when not tracked.
	CommitPoint int64 `json:"commitPoint,omitempty"`
	// Instance is the data directory's instance id (12 hex digits), the
	// one a slave's hello carries.
	Instance string `json:"instance,omitempty"`
	// Cluster is the node's view of its cluster (smss -role auto).
	Cluster *ClusterView `json:"cluster,omitempty"`
	// Epochs is the node's epoch history (EpochStart): where each epoch
	// of the history it holds began, oldest first; left out when it kept
	// none. A consumer places the eventIds it takes with it (EpochStartOf)
	// and checks a position on another node with ResumePoint.
	Epochs []EpochStart `json:"epochs,omitempty"`
	// Stream is a slave's replication stream from its master; left out
	// on a master.
	Stream *SlaveStream `json:"stream,omitempty"`
	// QueueGroups is how many work-queue groups the node serves (a master;
	// docs/protocol.md §12.6).
	QueueGroups int `json:"queueGroups,omitempty"`
}

// SlaveStream is what a slave reports of its stream from its master
// (status on a slave): whether the master still sends blocks, so that an
// operator moving writes to this node sees when it has caught up.
type SlaveStream struct {
	// State is connecting, syncing, streaming or stopped.
	State string `json:"state"`
	// ConnectedSince is when the current stream opened (Unix ms); 0 when
	// not streaming.
	ConnectedSince int64 `json:"connectedSince,omitempty"`
	// LastBlockAt is when this process last applied a block from the
	// master (Unix ms); 0 before the first.
	LastBlockAt int64 `json:"lastBlockAt,omitempty"`
	// QuietMs is how long the stream has sent no block: since the last
	// block, or since it opened when none came on it; -1 when not
	// streaming.
	QuietMs int64 `json:"quietMs"`
	// QuietAfterMs is replication.promoteQuietMs: how long a stream must be
	// quiet to count as caught up (0: the check is off).
	QuietAfterMs int64 `json:"quietAfterMs"`
	// CaughtUp: streaming, and quiet for at least QuietAfterMs — the
	// master has taken no write this node lacks for that long.
	CaughtUp bool `json:"caughtUp"`
}

// ClusterView is what a node of a cluster reports in its status: what the
// cluster's controller needs to decide a failover and to keep the in-sync
// set, and what operators see (smssctl cluster status).
type ClusterView struct {
	Node   string `json:"node"`             // this node's id
	Leader string `json:"leader,omitempty"` // the consensus leader's id, if known
	// Epoch and Master are the cluster state this node applied.
	Epoch  uint64 `json:"epoch"`
	Master string `json:"master,omitempty"`
	// Fenced is why this node refuses writes although the cluster names it
	// master (a lost lease; an epoch it has not taken yet); empty otherwise.
	Fenced string `json:"fenced,omitempty"`
	// InSync is the cluster's in-sync set: the slaves every write waits
	// for; only an eligible member may be elected.
	InSync []InSyncMember `json:"inSync,omitempty"`
	// InSyncVersion is the version of the in-sync set a master applies.
	InSyncVersion uint64 `json:"inSyncVersion,omitempty"`
	// Slaves lists a master's confirming slaves.
	Slaves []SlaveConfirm `json:"slaves,omitempty"`
	// Transport is the consensus (raft) transport between the nodes:
	// "mutual-tls" or "tcp" (plain, unauthenticated).
	Transport string `json:"transport,omitempty"`

	// The fields below were added for operators (smssctl cluster
	// status, /api/cluster); all are left out when zero.

	// Version is the version of the cluster state this node applied (the
	// consensus log index of its last change).
	Version uint64 `json:"version,omitempty"`
	// LeaseValid: this node heard from a consensus majority within
	// cluster.leaseMs.
	LeaseValid bool `json:"leaseValid,omitempty"`
	// Peers are the configured members and their smss addresses.
	Peers []ClusterPeer `json:"peers,omitempty"`
	// Blocked and Probes are set only by the consensus leader: why its
	// controller does not act ("" when nothing is held back), and its
	// last probe of every node.
	Blocked string         `json:"blocked,omitempty"`
	Probes  []ClusterProbe `json:"probes,omitempty"`
}

// InSyncMember is one member of a cluster's in-sync set.
type InSyncMember struct {
	Node     string `json:"node"`
	Eligible bool   `json:"eligible"`
}

// SlaveConfirm is one confirming slave as its master sees it.
type SlaveConfirm struct {
	Instance  string `json:"instance"`
	Confirmed int64  `json:"confirmed"`
	LagMs     int64  `json:"lagMs"`
}

// ReplicaStreamV2 is NodeStatus.Replica of a master that serves commit
// frames and reads epoch records (docs/protocol.md §4.6).
const ReplicaStreamV2 = 2

// FencedPrefix starts the text of the 400 a fenced master answers a write
// with (a cluster master that lost its lease or learned a newer epoch):
// clients look for the master again on it.
const FencedPrefix = "fenced: "

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
