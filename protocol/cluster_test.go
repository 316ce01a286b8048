package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestNotLeaderText(t *testing.T) {
	for _, tc := range []struct {
		text     string
		id, addr string
		ok       bool
	}{
		{FormatNotLeader("b", "10.0.0.2:12301"), "b", "10.0.0.2:12301", true},
		{FormatNotLeader("node-1", "[::1]:5"), "node-1", "[::1]:5", true},
		{FormatNotLeader("", ""), "", "", false},
		{NotLeaderPrefix + "; retry at the leader b", "", "", false},
		{NotLeaderPrefix + "; retry at the leader b h:1 extra", "", "", false},
		{"fenced: something", "", "", false},
	} {
		id, addr, ok := ParseNotLeader(tc.text)
		if id != tc.id || addr != tc.addr || ok != tc.ok {
			t.Errorf("ParseNotLeader(%q) = %q %q %v; want %q %q %v", tc.text, id, addr, ok, tc.id, tc.addr, tc.ok)
		}
	}
}

func TestSwitchoverRequestBytes(t *testing.T) {
	got, err := AppendSwitchover(nil, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte{40, 1, 0}, make([]byte, 17)...)
	want = append(want, 'b')
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("switchover b: % x, want % x", got, want)
	}
	got, _ = AppendPromoteForce(nil, nil)
	if got[0] != byte(CmdPromote) || got[1] != 5 || string(got[HeaderSize:]) != "force" {
		t.Fatalf("promote force: % x", got)
	}
}

// A status JSON as a cluster node sends it, new fields included, decodes
// as a NodeStatus; the new fields are left out when zero.
func TestClusterViewOmitsZero(t *testing.T) {
	b, err := json.Marshal(ClusterView{Node: "a", Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"node":"a","epoch":1}` {
		t.Fatalf("zero view: %s", b)
	}
}

func st(role string, epoch uint64, last int64, v *ClusterView) *NodeStatus {
	return &NodeStatus{Role: role, Epoch: epoch, LastEventID: last, Cluster: v, Instance: "i-" + v.Node}
}

func TestBuildClusterReport(t *testing.T) {
	peers := []ClusterPeer{{"a", "h:1"}, {"b", "h:2"}, {"c", "h:3"}}
	isr := []InSyncMember{{"b", true}, {"c", false}}
	leaderA := func() *ClusterView {
		return &ClusterView{Node: "a", Leader: "a", Epoch: 3, Master: "a", Version: 9, InSync: isr, Blocked: "held back",
			Slaves: []SlaveConfirm{{Instance: "i-b", Confirmed: 40}, {Instance: "i-c", Confirmed: 35}},
			Probes: []ClusterProbe{{Node: "c", OK: false, Error: "refused", Role: "slave", Epoch: 3, LastEventID: 33, Instance: "i-c", AgeMs: 800}}}
	}
	for _, tc := range []struct {
		name    string
		answers map[string]*NodeStatus
		errs    map[string]string
		want    ClusterReport
	}{
		{
			name: "all answer",
			answers: map[string]*NodeStatus{
				"a": {Role: "master", Epoch: 3, LastEventID: 40, CommitPoint: 40, Instance: "i-a", Cluster: leaderA()},
				"b": st("slave", 3, 40, &ClusterView{Node: "b", Leader: "a", Epoch: 3, Master: "a", Version: 9, InSync: isr}),
				"c": st("slave", 3, 36, &ClusterView{Node: "c", Leader: "a", Epoch: 3, Master: "a", Version: 8}),
			},
			want: ClusterReport{Epoch: 3, Master: "a", Leader: "a", Version: 9, Blocked: "held back", Nodes: []ClusterNode{
				{Node: "a", Addr: "h:1", Reachable: true, Role: "master", Epoch: 3, LastEventID: 40, Confirmed: 40, Master: true, Leader: true, Instance: "i-a"},
				{Node: "b", Addr: "h:2", Reachable: true, Role: "slave", Epoch: 3, LastEventID: 40, Confirmed: 40, InSync: true, Eligible: true, Instance: "i-b"},
				{Node: "c", Addr: "h:3", Reachable: true, Role: "slave", Epoch: 3, LastEventID: 36, Confirmed: 35, InSync: true, Instance: "i-c"},
			}},
		},
		{
			name: "a node down: the leader's probe fills its row",
			answers: map[string]*NodeStatus{
				"a": {Role: "master", Epoch: 3, LastEventID: 40, CommitPoint: 38, Instance: "i-a", Cluster: leaderA()},
			},
			errs: map[string]string{"b": "dial: refused", "c": "timeout"},
			want: ClusterReport{Epoch: 3, Master: "a", Leader: "a", Version: 9, Blocked: "held back", Nodes: []ClusterNode{
				{Node: "a", Addr: "h:1", Reachable: true, Role: "master", Epoch: 3, LastEventID: 40, Confirmed: 38, Master: true, Leader: true, Instance: "i-a"},
				{Node: "b", Addr: "h:2", Error: "dial: refused", Confirmed: -1, InSync: true, Eligible: true},
				{Node: "c", Addr: "h:3", Error: "timeout", FromProbe: true, Role: "slave", Epoch: 3, LastEventID: 33, Confirmed: 35, InSync: true, Instance: "i-c"},
			}},
		},
		{
			name: "the leader not reached: the newest state, no blocked reason",
			answers: map[string]*NodeStatus{
				"b": st("slave", 3, 40, &ClusterView{Node: "b", Leader: "a", Epoch: 3, Master: "a", Version: 9, InSync: isr, Peers: peers}),
				"c": st("slave", 2, 30, &ClusterView{Node: "c", Leader: "a", Epoch: 2, Master: "b", Version: 5, Fenced: ""}),
			},
			errs: map[string]string{"a": "refused"},
			want: ClusterReport{Epoch: 3, Master: "a", Leader: "a", Version: 9, Nodes: []ClusterNode{
				{Node: "a", Addr: "h:1", Error: "refused", Confirmed: -1, Master: true, Leader: true},
				{Node: "b", Addr: "h:2", Reachable: true, Role: "slave", Epoch: 3, LastEventID: 40, Confirmed: -1, InSync: true, Eligible: true, Instance: "i-b"},
				{Node: "c", Addr: "h:3", Reachable: true, Role: "slave", Epoch: 2, LastEventID: 30, Confirmed: -1, InSync: true, Instance: "i-c"},
			}},
		},
		{
			name: "a fenced master, an unknown extra node",
			answers: map[string]*NodeStatus{
				"a": {Role: "master", Epoch: 3, LastEventID: 40, Instance: "i-a",
					Cluster: &ClusterView{Node: "a", Epoch: 3, Master: "a", Version: 2, Fenced: "lease expired", Peers: []ClusterPeer{{"z", "h:26"}}}},
			},
			want: ClusterReport{Epoch: 3, Master: "a", Version: 2, Nodes: []ClusterNode{
				{Node: "a", Addr: "h:1", Reachable: true, Role: "master", Epoch: 3, LastEventID: 40, Confirmed: 0, Master: true, Fenced: "lease expired", Instance: "i-a"},
				{Node: "b", Addr: "h:2", Confirmed: -1},
				{Node: "c", Addr: "h:3", Confirmed: -1},
				{Node: "z", Addr: "h:26", Confirmed: -1},
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BuildClusterReport(peers, tc.answers, tc.errs)
			if !reflect.DeepEqual(got, tc.want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(tc.want, "", " ")
				t.Fatalf("got\n%s\nwant\n%s", g, w)
			}
		})
	}
}
