package protocol

import (
	"fmt"
	"sort"
	"strings"
)

// Cluster operations (smss -role auto): an extension of docs/protocol.md
// §1.3 with the layout of promote (35): the 20-byte header with bytes 3..18
// zero, the topic field, the traceId and no body.
const (
	// CmdSwitchover asks the cluster to hand its master role to the node
	// whose id is in the topic field (empty: the cluster picks an eligible
	// in-sync member), once that node caught up with the master. Served
	// by the consensus leader (docs/protocol.md §4.8).
	CmdSwitchover Command = 40
)

// PromoteForce is the topic field of a promote (35) request that promotes
// although the node is not known to hold every acknowledged write.
const PromoteForce = "force"

// AppendSwitchover appends a switchover request to the node target ("":
// any eligible in-sync member).
func AppendSwitchover(dst []byte, target string, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdSwitchover, [16]byte{}, []byte(target), traceID)
}

// AppendPromoteForce appends a promote request with the force option.
func AppendPromoteForce(dst, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdPromote, [16]byte{}, []byte(PromoteForce), traceID)
}

// PromoteReply is the JSON body of a promote (35) reply. Warning, set only
// by a forced promotion, says which acknowledged writes may be lost.
type PromoteReply struct {
	Role    string `json:"role"`
	Epoch   uint64 `json:"epoch"`
	Warning string `json:"warning,omitempty"`
}

// SwitchoverReply is the JSON body of a switchover (40) reply: the master
// the consensus elected and its epoch.
type SwitchoverReply struct {
	Master string `json:"master"`
	Epoch  uint64 `json:"epoch"`
}

// NotLeaderPrefix starts the text of the 400 a node answers a switchover
// with when it is not the consensus leader; FormatNotLeader and
// ParseNotLeader build and read the rest, which names the leader.
const NotLeaderPrefix = "not the cluster's consensus leader"

// FormatNotLeader is the refusal text naming the leader id and its smss
// address ("" when no leader is known).
func FormatNotLeader(id, addr string) string {
	if id == "" {
		return NotLeaderPrefix + "; no leader is known (an election is under way?): retry later"
	}
	return fmt.Sprintf("%s; retry at the leader %s %s", NotLeaderPrefix, id, addr)
}

// ParseNotLeader reads a FormatNotLeader text: the leader's id and address,
// ok false when the text is not one or names no leader.
func ParseNotLeader(text string) (id, addr string, ok bool) {
	rest, found := strings.CutPrefix(text, NotLeaderPrefix+"; retry at the leader ")
	if !found {
		return "", "", false
	}
	id, addr, found = strings.Cut(rest, " ")
	if !found || id == "" || addr == "" || strings.Contains(addr, " ") {
		return "", "", false
	}
	return id, addr, true
}

// ClusterPeer is one configured member of a cluster: its id and its smss
// address.
type ClusterPeer struct {
	Node string `json:"node"`
	Addr string `json:"addr"`
}

// ClusterProbe is the consensus leader's controller's last knowledge of a
// node (its probes of the node's status).
type ClusterProbe struct {
	Node string `json:"node"`
	// OK: the latest probe answered; Error is the latest failure.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// The last good report: role, epoch, last eventId and, of a master,
	// its commit point; AgeMs is its age (-1: none yet).
	Role        string `json:"role,omitempty"`
	Epoch       uint64 `json:"epoch"`
	LastEventID int64  `json:"lastEventId"`
	CommitPoint int64  `json:"commitPoint,omitempty"`
	Instance    string `json:"instance,omitempty"`
	AgeMs       int64  `json:"ageMs"`
}

// ClusterNode is one row of a cluster report (smssctl cluster status,
// /api/cluster): what the node itself answered or, when it did not, what
// the consensus leader last probed.
type ClusterNode struct {
	Node string `json:"node"`
	Addr string `json:"addr"`
	// Reachable: the node answered a status request now; otherwise Error
	// says why, and the figures come from the leader's last probe
	// (FromProbe), if any.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	FromProbe bool   `json:"fromProbe,omitempty"`
	Role      string `json:"role,omitempty"`
	Epoch     uint64 `json:"epoch"`
	// LastEventID is the node's last eventId; Confirmed, on the master, its
	// commit point and, on a slave, the last eventId the master says it
	// confirmed (-1: not known).
	LastEventID int64 `json:"lastEventId"`
	Confirmed   int64 `json:"confirmed"`
	// Master: the cluster names it master; InSync, Eligible: its place
	// in the in-sync set; Leader: it is the consensus (raft) leader.
	Master   bool   `json:"master"`
	InSync   bool   `json:"inSync"`
	Eligible bool   `json:"eligible"`
	Leader   bool   `json:"leader"`
	Fenced   string `json:"fenced,omitempty"`
	Instance string `json:"instance,omitempty"`
}

// ClusterReport is a whole cluster's state as one node (or an operator
// asking every node) sees it.
type ClusterReport struct {
	Epoch   uint64 `json:"epoch"`
	Master  string `json:"master"`
	Leader  string `json:"leader"`
	Version uint64 `json:"version"`
	// Blocked is the consensus leader's controller's reason for not acting
	// ("" when nothing is held back or the leader was not reached).
	Blocked string        `json:"blocked,omitempty"`
	Nodes   []ClusterNode `json:"nodes"`
}

// BuildClusterReport combines the status answers of a cluster's nodes
// (by node id; a node that did not answer is in errs) into one report.
// peers are the configured members; nodes answering with other peers are
// added. The cluster state (epoch, master, in-sync set) is the one of the
// consensus leader's answer, else the answer of highest version; the
// leader's probes fill the rows of nodes that did not answer.
func BuildClusterReport(peers []ClusterPeer, answers map[string]*NodeStatus, errs map[string]string) ClusterReport {
	addrs := map[string]string{}
	for _, p := range peers {
		addrs[p.Node] = p.Addr
	}
	var view *ClusterView
	for _, st := range answers {
		v := st.Cluster
		if v == nil {
			continue
		}
		for _, p := range v.Peers {
			if _, ok := addrs[p.Node]; !ok {
				addrs[p.Node] = p.Addr
			}
		}
		switch {
		case view == nil,
			v.Leader == v.Node && view.Leader != view.Node,
			(v.Leader == v.Node) == (view.Leader == view.Node) && v.Version > view.Version:
			view = v
		}
	}
	for id := range errs {
		if _, ok := addrs[id]; !ok {
			addrs[id] = ""
		}
	}
	for id := range answers {
		if _, ok := addrs[id]; !ok {
			addrs[id] = ""
		}
	}
	var r ClusterReport
	if view != nil {
		r.Epoch, r.Master, r.Leader, r.Version, r.Blocked = view.Epoch, view.Master, view.Leader, view.Version, view.Blocked
	}
	// The leader's own answer carries the probes and the blocked reason.
	var leaderView *ClusterView
	if st := answers[r.Leader]; st != nil && st.Cluster != nil {
		leaderView = st.Cluster
		r.Blocked = leaderView.Blocked
	}
	probes := map[string]ClusterProbe{}
	if leaderView != nil {
		for _, p := range leaderView.Probes {
			probes[p.Node] = p
		}
	}
	// What the master says its slaves confirmed, by instance.
	confirmed := map[string]int64{}
	if st := answers[r.Master]; st != nil && st.Cluster != nil {
		for _, s := range st.Cluster.Slaves {
			confirmed[s.Instance] = s.Confirmed
		}
	}
	ids := make([]string, 0, len(addrs))
	for id := range addrs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		n := ClusterNode{Node: id, Addr: addrs[id], Confirmed: -1, Master: id == r.Master, Leader: id == r.Leader}
		if view != nil {
			for _, m := range view.InSync {
				if m.Node == id {
					n.InSync, n.Eligible = true, m.Eligible
				}
			}
		}
		if st := answers[id]; st != nil {
			n.Reachable, n.Role, n.Epoch, n.LastEventID, n.Instance = true, st.Role, st.Epoch, st.LastEventID, st.Instance
			if st.Cluster != nil {
				n.Fenced = st.Cluster.Fenced
			}
		} else {
			n.Error = errs[id]
			if p, ok := probes[id]; ok && p.AgeMs >= 0 {
				n.FromProbe, n.Role, n.Epoch, n.LastEventID, n.Instance = true, p.Role, p.Epoch, p.LastEventID, p.Instance
			}
		}
		switch c, ok := confirmed[n.Instance]; {
		case n.Master && answers[id] != nil:
			n.Confirmed = answers[id].CommitPoint
		case ok && n.Instance != "":
			n.Confirmed = c
		}
		r.Nodes = append(r.Nodes, n)
	}
	return r
}
