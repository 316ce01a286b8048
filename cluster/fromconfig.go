package cluster

import (
	"errors"
	"fmt"

	"github.com/smssmq/smss/config"
)

// ErrNoCluster is returned by FromConfig for a configuration without a
// cluster section.
var ErrNoCluster = errors.New("cluster: no cluster section (cluster.node and cluster.peers)")

// FromConfig turns a validated configuration into Options: the peers, the
// store under store.path/cluster, MinISR = replication.syncSlaves and the
// timings. The caller sets Prober, Logger and, for a TLS transport,
// ServerTLS and ClientTLS (built from the replication.* and tls.*
// credentials), then calls Open.
func FromConfig(c *config.Config) (Options, error) {
	k := c.Cluster
	if !k.Enabled() {
		return Options{}, ErrNoCluster
	}
	o := DefaultOptions()
	o.NodeID = k.Node
	for _, id := range k.PeerIDs() {
		p := k.Peers[id]
		o.Peers = append(o.Peers, Peer{ID: id, Raft: p.Raft, Addr: p.Addr})
	}
	o.Dir = c.ClusterDir()
	o.MinISR = c.Replication.SyncSlaves
	o.FailAfter = k.FailAfter()
	o.ProbeInterval = k.ProbeInterval()
	o.ProbeTimeout = k.ProbeTimeout()
	o.Lease = k.Lease()
	o.ISRLag = k.ISRLag()
	o.SwitchoverWait = k.SwitchoverWait()
	o.HeartbeatTimeout = k.Heartbeat()
	o.ElectionTimeout = k.Election()
	// Everything but what the caller supplies (the Prober).
	if err := o.checkSettings(); err != nil {
		return Options{}, fmt.Errorf("cluster: from config: %w", err)
	}
	return o, nil
}
