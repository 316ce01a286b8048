package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/smssmq/smss/protocol"
)

func TestRenderCluster(t *testing.T) {
	healthy := protocol.ClusterReport{Epoch: 3, Master: "a", Leader: "b", Version: 12, Nodes: []protocol.ClusterNode{
		{Node: "a", Addr: "h:1", Reachable: true, Role: "master", Epoch: 3, LastEventID: 40, Confirmed: 40, Master: true},
		{Node: "b", Addr: "h:2", Reachable: true, Role: "slave", Epoch: 3, LastEventID: 40, Confirmed: 39, InSync: true, Eligible: true, Leader: true},
		{Node: "c", Addr: "h:3", Reachable: true, Role: "slave", Epoch: 3, LastEventID: 12, Confirmed: -1, InSync: true},
	}}
	for _, tc := range []struct {
		name   string
		rep    protocol.ClusterReport
		has    []string
		hasNot []string
	}{
		{"healthy", healthy, []string{
			"cluster: epoch 3, master a, consensus leader b, state version 12\n",
			"NODE  ADDR  ROLE    EPOCH  LAST EVENTID  CONFIRMED  IN SYNC                LEADER  STATE\n",
			"a     h:1   master  3      40            40         (master)                       ok\n",
			"b     h:2   slave   3      40            39         yes, eligible          yes     ok\n",
			"c     h:3   slave   3      12            -          yes, not eligible yet          ok\n",
		}, []string{"controller blocked"}},
		{"nothing elected, a node down, blocked", protocol.ClusterReport{Leader: "", Blocked: "bootstrap: waiting for c", Nodes: []protocol.ClusterNode{
			{Node: "a", Addr: "h:1", Reachable: true, Role: "slave", Confirmed: -1},
			{Node: "c", Addr: "h:3", Error: "dial tcp h:3: connection refused", Confirmed: -1},
		}}, []string{
			"master none elected yet, consensus leader none known",
			"c     h:3   -      -      -             -          no       ",
			"unreachable: dial tcp h:3: connection refused",
			"controller blocked: bootstrap: waiting for c\n",
		}, nil},
		{"a probed node, a fenced master, a master not promoted yet", protocol.ClusterReport{Epoch: 4, Master: "b", Leader: "b", Nodes: []protocol.ClusterNode{
			{Node: "a", Addr: "h:1", Reachable: true, Role: "master", Epoch: 3, LastEventID: 50, Confirmed: 50, Fenced: "not the cluster's master"},
			{Node: "b", Addr: "h:2", Reachable: true, Role: "slave", Epoch: 3, LastEventID: 50, Master: true, Leader: true, Confirmed: -1},
			{Node: "c", Addr: "h:3", FromProbe: true, Error: "timeout", Role: "slave", Epoch: 3, LastEventID: 48, Confirmed: 47, InSync: true, Eligible: true},
		}}, []string{
			"fenced: not the cluster's master",
			"slave (elected master)",
			"unreachable (figures: the leader's last probe): timeout",
			"48",
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			renderCluster(&b, tc.rep)
			out := b.String()
			for _, s := range tc.has {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tc.hasNot {
				if strings.Contains(out, s) {
					t.Errorf("output has %q:\n%s", s, out)
				}
			}
		})
	}
}

// The cluster commands' argument errors, and their answers from a server
// that is not a cluster node.
func TestClusterCommandsArgs(t *testing.T) {
	addr := startServer(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"cluster"}, 2, "missing subcommand (status)"},
		{[]string{"cluster", "list"}, 2, `unknown subcommand "list" (want status)`},
		{[]string{"cluster", "status", "x"}, 2, `unexpected argument "x"`},
		{[]string{"cluster", "--help"}, 0, ""},
		{[]string{"cluster", "status"}, 1, "not one of a cluster (smss -role auto)"},
		{[]string{"cluster", "status", "--json"}, 1, `"exitCode":1`},
		{[]string{"switchover", "a", "b"}, 2, `unexpected argument "b"`},
		{[]string{"switchover", "a b"}, 2, "printable ASCII without spaces"},
		{[]string{"switchover", strings.Repeat("n", 65)}, 2, "longer than 64 bytes"},
		{[]string{"switchover", "--wait", "0s", "b"}, 2, "--wait must be positive"},
		{[]string{"switchover", "--wait", "soon"}, 2, "invalid"},
		{[]string{"switchover", "--help"}, 0, ""},
		{[]string{"switchover", "b"}, 1, "not one of a cluster (smss -role auto)"},
		{[]string{"promote", "--force"}, 1, "already a master"},
		{[]string{"promote", "--force", "x"}, 2, `unexpected argument "x"`},
		{[]string{"promote", "--help"}, 0, ""},
	} {
		r := ctl(t, addr, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%q: exit %d, stderr %q; want %d with %q", tc.args, r.code, r.stderr, tc.code, tc.stderr)
		}
	}
	if r := ctl(t, addr, "", "switchover", "--help"); !strings.Contains(r.stdout, "usage: smssctl switchover [NODE]") {
		t.Errorf("switchover --help: %q", r.stdout)
	}
	if r := ctl(t, addr, "", "promote", "--help"); !strings.Contains(r.stdout, "--force") {
		t.Errorf("promote --help: %q", r.stdout)
	}
}
