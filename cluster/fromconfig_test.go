package cluster

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/smssmq/smss/config"
)

func TestFromConfig(t *testing.T) {
	if _, err := FromConfig(config.Default()); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("default config: %v", err)
	}
	c, err := config.Parse([]byte(`
store: {path: /var/smss}
replication: {syncSlaves: 2}
cluster:
  node: b
  failAfterMs: 3000
  peers:
    c: {raft: "127.0.0.1:12403", addr: "127.0.0.1:12303"}
    a: {raft: "127.0.0.1:12401", addr: "127.0.0.1:12301"}
    b: {raft: "127.0.0.1:12402", addr: "127.0.0.1:12302"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	o, err := FromConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if o.NodeID != "b" || len(o.Peers) != 3 || o.Peers[0].ID != "a" || o.Peers[2].Addr != "127.0.0.1:12303" ||
		o.Dir != filepath.Join("/var/smss", "cluster") || o.MinISR != 2 || o.FailAfter != 3*time.Second ||
		o.Lease != DefaultLease || o.HeartbeatTimeout != DefaultHeartbeatTimeout || o.Prober != nil {
		t.Fatalf("options %+v", o)
	}
}
