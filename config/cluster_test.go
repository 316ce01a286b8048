package config

import (
	"strings"
	"testing"
)

const threeNodes = `
replication:
  syncSlaves: 1
cluster:
  node: a
  peers:
    a: {raft: "127.0.0.1:12401", addr: "127.0.0.1:12301"}
    b: {raft: "127.0.0.1:12402", addr: "127.0.0.1:12302"}
    c: {raft: "127.0.0.1:12403", addr: "127.0.0.1:12303"}
`

func TestClusterSection(t *testing.T) {
	if Default().Cluster.Enabled() {
		t.Fatal("the default configuration has a cluster")
	}
	c, err := Parse([]byte(threeNodes))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid cluster refused: %v", err)
	}
	k := c.Cluster
	if !k.Enabled() || k.Node != "a" || len(k.Peers) != 3 || k.Peers["b"].Addr != "127.0.0.1:12302" ||
		k.FailAfterMs != 2000 || k.Lease().Milliseconds() != 1000 {
		t.Fatalf("parsed %+v", k)
	}
	if got := strings.Join(k.PeerIDs(), ","); got != "a,b,c" {
		t.Fatalf("PeerIDs %s", got)
	}
}

func TestClusterParseErrors(t *testing.T) {
	for name, tt := range map[string]struct{ yaml, want string }{
		"unknown peer key": {"cluster:\n  peers:\n    a: {raft: \"h:1\", adr: \"h:2\"}\n", `unknown key "cluster.peers.a.adr"`},
		"peer twice":       {"cluster:\n  peers:\n    a: {raft: \"h:1\"}\n    a: {raft: \"h:2\"}\n", "cluster.peers.a set twice"},
		"peers a list":     {"cluster:\n  peers: [a, b]\n", "cluster.peers must be a mapping"},
		"peer not section": {"cluster:\n  peers:\n    a: 1\n", "cluster.peers.a must be a section"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
		})
	}
}

func TestClusterValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string // "" = valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no cluster, no checks", func(c *Config) { c.Cluster = defaultCluster(); c.Replication.SyncSlaves = 0 }, ""},
		{"unknown node", func(c *Config) { c.Cluster.Node = "d" }, `cluster.node "d" is not one of cluster.peers (a, b, c)`},
		{"node unset", func(c *Config) { c.Cluster.Node = "" }, "cluster.node must be set"},
		{"peers unset", func(c *Config) { c.Cluster.Peers = map[string]ClusterPeer{} }, "cluster.peers has 0 node(s)"},
		{"two nodes", func(c *Config) { delete(c.Cluster.Peers, "c") },
			"cluster.peers has 2 node(s) (a, b): a cluster needs at least 3 voters to survive a failure; add a third node"},
		{"duplicate raft", func(c *Config) { p := c.Cluster.Peers["b"]; p.Raft = "127.0.0.1:12401"; c.Cluster.Peers["b"] = p },
			"cluster.peers.b.raft 127.0.0.1:12401 is also cluster.peers.a.raft"},
		{"raft is another's addr", func(c *Config) { p := c.Cluster.Peers["c"]; p.Raft = "127.0.0.1:12302"; c.Cluster.Peers["c"] = p },
			"cluster.peers.c.raft 127.0.0.1:12302 is also cluster.peers.b.addr"},
		{"addr missing", func(c *Config) { p := c.Cluster.Peers["b"]; p.Addr = ""; c.Cluster.Peers["b"] = p },
			"cluster.peers.b.addr must be set"},
		{"addr malformed", func(c *Config) { p := c.Cluster.Peers["b"]; p.Addr = "nohost"; c.Cluster.Peers["b"] = p },
			"cluster.peers.b.addr must be host:port"},
		{"raft unspecified", func(c *Config) { p := c.Cluster.Peers["b"]; p.Raft = "0.0.0.0:12402"; c.Cluster.Peers["b"] = p },
			"cluster.peers.b.raft must be an address the other nodes can dial"},
		{"port 0", func(c *Config) { p := c.Cluster.Peers["b"]; p.Raft = "127.0.0.1:0"; c.Cluster.Peers["b"] = p },
			"cluster.peers.b.raft must name a port, not 0"},
		{"bad id", func(c *Config) { c.Cluster.Peers["x y"] = ClusterPeer{Raft: "h:1", Addr: "h:2"} },
			"cluster.peers.x y is not a valid node id"},
		{"failAfter <= lease", func(c *Config) { c.Cluster.FailAfterMs = 1000 },
			"cluster.failAfterMs must exceed cluster.leaseMs (1000) (got 1000)"},
		{"failAfter <= lease + probeTimeout", func(c *Config) { c.Cluster.FailAfterMs = 1500 },
			"cluster.failAfterMs must exceed cluster.leaseMs + cluster.probeTimeoutMs (1500) (got 1500)"},
		{"failAfter even without peers", func(c *Config) { c.Cluster = defaultCluster(); c.Cluster.FailAfterMs = 500 },
			"cluster.failAfterMs must exceed cluster.leaseMs"},
		{"election < heartbeat", func(c *Config) { c.Cluster.ElectionMs = 100 }, "cluster.electionMs must be >= cluster.heartbeatMs (500) (got 100)"},
		{"probe interval range", func(c *Config) { c.Cluster.ProbeIntervalMs = 0 }, "cluster.probeIntervalMs must be between 10 and 3600000 (got 0)"},
		{"syncSlaves 0", func(c *Config) { c.Replication.SyncSlaves = 0 }, "replication.syncSlaves must be >= 1 in a cluster"},
		{"syncSlaves too many", func(c *Config) { c.Replication.SyncSlaves = 3 }, "replication.syncSlaves must be <= 2, the slaves of a 3-node cluster (got 3)"},
		{"degrade", func(c *Config) { c.Replication.OnSyncTimeout = SyncDegrade }, `replication.onSyncTimeout "degrade" is refused in a cluster`},
		{"isrLag >= syncTimeout", func(c *Config) { c.Cluster.IsrLagMs = 2000 }, "cluster.isrLagMs must be < replication.syncTimeoutMs (2000) (got 2000)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(threeNodes))
			if err != nil {
				t.Fatal(err)
			}
			tt.edit(c)
			err = c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "config: ") {
					t.Fatalf("not one line per problem: %q", err)
				}
			}
		})
	}
}
