package config

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Cluster is the cluster.* section (issue 31): the members of an
// automatic-failover cluster and its timings. With no node and no peers
// (the default) there is no cluster: -role master/slave work as before.
type Cluster struct {
	// Node is this node's id, one of Peers.
	Node string `yaml:"node"`
	// Peers lists every voting member, this node included, by id.
	Peers map[string]ClusterPeer `yaml:"peers"`
	// FailAfterMs: the master unreachable this long is replaced; must
	// exceed LeaseMs.
	FailAfterMs int64 `yaml:"failAfterMs"`
	// ProbeIntervalMs and ProbeTimeoutMs: the consensus leader's probes of
	// every node.
	ProbeIntervalMs int64 `yaml:"probeIntervalMs"`
	ProbeTimeoutMs  int64 `yaml:"probeTimeoutMs"`
	// LeaseMs: a master answers writes only while it heard from a
	// consensus quorum this recently.
	LeaseMs int64 `yaml:"leaseMs"`
	// IsrLagMs: a slave disconnected, or with an unconfirmed write, this
	// long leaves the in-sync set.
	IsrLagMs int64 `yaml:"isrLagMs"`
	// SwitchoverWaitMs bounds a switchover's wait for its target.
	SwitchoverWaitMs int64 `yaml:"switchoverWaitMs"`
	// HeartbeatMs and ElectionMs are the consensus (raft) timeouts.
	HeartbeatMs int64 `yaml:"heartbeatMs"`
	ElectionMs  int64 `yaml:"electionMs"`
}

// ClusterPeer is one entry of cluster.peers.
type ClusterPeer struct {
	// Raft is the host:port of the node's consensus transport.
	Raft string `yaml:"raft"`
	// Addr is the node's smss address as other nodes and clients reach it.
	Addr string `yaml:"addr"`
}

// Enabled reports whether a cluster is configured (cluster.node or
// cluster.peers set); Validate then checks that it is usable.
func (c Cluster) Enabled() bool { return c.Node != "" || len(c.Peers) > 0 }

// PeerIDs returns the ids of cluster.peers, sorted.
func (c Cluster) PeerIDs() []string {
	ids := make([]string, 0, len(c.Peers))
	for id := range c.Peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// MinClusterVoters is the smallest cluster accepted: with fewer voters a
// single failure leaves no majority.
const MinClusterVoters = 3

func defaultCluster() Cluster {
	return Cluster{Peers: map[string]ClusterPeer{}, FailAfterMs: 2000, ProbeIntervalMs: 250, ProbeTimeoutMs: 500,
		LeaseMs: 1000, IsrLagMs: 1000, SwitchoverWaitMs: 10000, HeartbeatMs: 500, ElectionMs: 500}
}

// ClusterDir is the consensus store of the cluster: <store.path>/cluster.
func (c *Config) ClusterDir() string { return filepath.Join(c.Store.Path, "cluster") }

// Durations of the cluster section.
func (c Cluster) FailAfter() time.Duration      { return ms(c.FailAfterMs) }
func (c Cluster) ProbeInterval() time.Duration  { return ms(c.ProbeIntervalMs) }
func (c Cluster) ProbeTimeout() time.Duration   { return ms(c.ProbeTimeoutMs) }
func (c Cluster) Lease() time.Duration          { return ms(c.LeaseMs) }
func (c Cluster) ISRLag() time.Duration         { return ms(c.IsrLagMs) }
func (c Cluster) SwitchoverWait() time.Duration { return ms(c.SwitchoverWaitMs) }
func (c Cluster) Heartbeat() time.Duration      { return ms(c.HeartbeatMs) }
func (c Cluster) Election() time.Duration       { return ms(c.ElectionMs) }

func (c *Config) validateCluster(v *validator) {
	k := c.Cluster
	const hour = 3600000
	v.between("cluster.failAfterMs", k.FailAfterMs, 10, hour, "ms")
	v.between("cluster.probeIntervalMs", k.ProbeIntervalMs, 10, hour, "ms")
	v.between("cluster.probeTimeoutMs", k.ProbeTimeoutMs, 10, hour, "ms")
	v.between("cluster.leaseMs", k.LeaseMs, 10, hour, "ms")
	v.between("cluster.isrLagMs", k.IsrLagMs, 10, hour, "ms")
	v.between("cluster.switchoverWaitMs", k.SwitchoverWaitMs, 10, hour, "ms")
	v.between("cluster.heartbeatMs", k.HeartbeatMs, 10, hour, "ms")
	v.between("cluster.electionMs", k.ElectionMs, 10, hour, "ms")
	if k.FailAfterMs <= k.LeaseMs {
		v.add(fmt.Sprintf("cluster.failAfterMs must exceed cluster.leaseMs (%d) (got %d): an old master must have stopped acknowledging before another is elected",
			k.LeaseMs, k.FailAfterMs))
	} else if k.FailAfterMs <= k.LeaseMs+k.ProbeTimeoutMs {
		v.add(fmt.Sprintf("cluster.failAfterMs must exceed cluster.leaseMs + cluster.probeTimeoutMs (%d) (got %d): the master counts as unreachable from when the probe that failed was sent",
			k.LeaseMs+k.ProbeTimeoutMs, k.FailAfterMs))
	}
	if k.ElectionMs < k.HeartbeatMs {
		v.add(fmt.Sprintf("cluster.electionMs must be >= cluster.heartbeatMs (%d) (got %d)", k.HeartbeatMs, k.ElectionMs))
	}
	if !k.Enabled() {
		return
	}
	ids := k.PeerIDs()
	if len(ids) < MinClusterVoters {
		v.add(fmt.Sprintf("cluster.peers has %d node(s) (%s): a cluster needs at least %d voters to survive a failure; add a third node",
			len(ids), strings.Join(ids, ", "), MinClusterVoters))
	}
	if k.Node == "" {
		v.add("cluster.node must be set: this node's id, one of cluster.peers (" + strings.Join(ids, ", ") + ")")
	} else if _, ok := k.Peers[k.Node]; !ok {
		v.add(fmt.Sprintf("cluster.node %q is not one of cluster.peers (%s)", k.Node, strings.Join(ids, ", ")))
	}
	seen := map[string]string{} // address -> "id.raft"
	for _, id := range ids {
		p := k.Peers[id]
		key := "cluster.peers." + id
		if msg := checkPeerID(id); msg != "" {
			v.add(key + " " + msg)
		}
		for _, a := range []struct{ name, addr string }{{"raft", p.Raft}, {"addr", p.Addr}} {
			switch {
			case a.addr == "":
				v.add(fmt.Sprintf("%s.%s must be set (host:port)", key, a.name))
				continue
			case checkHostPort(a.addr) != "":
				v.add(key + "." + a.name + " " + checkHostPort(a.addr))
				continue
			case portOf(a.addr) == 0:
				v.add(fmt.Sprintf("%s.%s must name a port, not 0 (got %q): the other nodes dial it", key, a.name, a.addr))
			case a.name == "raft" && isUnspecified(hostOf(a.addr)):
				v.add(fmt.Sprintf("%s.raft must be an address the other nodes can dial, not %q", key, a.addr))
			}
			if other, dup := seen[a.addr]; dup {
				v.add(fmt.Sprintf("%s.%s %s is also %s", key, a.name, a.addr, other))
			}
			seen[a.addr] = key + "." + a.name
		}
	}
	r := c.Replication
	if r.SyncSlaves < 1 {
		v.add("replication.syncSlaves must be >= 1 in a cluster (got 0): every acknowledged write must be on a slave that can be elected")
	} else if len(ids) >= MinClusterVoters && r.SyncSlaves > len(ids)-1 {
		v.add(fmt.Sprintf("replication.syncSlaves must be <= %d, the slaves of a %d-node cluster (got %d)", len(ids)-1, len(ids), r.SyncSlaves))
	}
	if r.OnSyncTimeout == SyncDegrade {
		v.add(`replication.onSyncTimeout "degrade" is refused in a cluster: a partitioned master would acknowledge writes the next master lacks`)
	}
	if k.IsrLagMs >= r.SyncTimeoutMs {
		v.add(fmt.Sprintf("cluster.isrLagMs must be < replication.syncTimeoutMs (%d) (got %d): a slow slave must leave the in-sync set before writes time out waiting for it",
			r.SyncTimeoutMs, k.IsrLagMs))
	}
}

// checkPeerID: the ids the cluster package accepts (1 to 64 letters,
// digits, '-', '_', '.').
func checkPeerID(id string) string {
	if len(id) > 64 || strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) >= 0 {
		return "is not a valid node id (1 to 64 letters, digits, '-', '_' or '.')"
	}
	return ""
}

func isUnspecified(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}
