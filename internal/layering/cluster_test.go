package layering

import (
	"strings"
	"testing"
)

// TestClusterStandsApart: the consensus and controller of package cluster
// reach the data node only through interfaces (Prober, Node's state); they
// must not depend on the broker, the server or replication, so that the
// wiring stays in cmd/smss and the metadata logic stays testable alone.
func TestClusterStandsApart(t *testing.T) {
	forbidden := []string{"broker", "server", "replication", "binlog", "segment", "topicblock", "meta", "client", "admin"}
	for _, d := range goList(t, "-deps", module+"cluster") {
		rel, ours := strings.CutPrefix(d, module)
		if !ours {
			continue
		}
		for _, f := range forbidden {
			if rel == f || strings.HasPrefix(rel, f+"/") {
				t.Errorf("cluster depends on %s", rel)
			}
		}
	}
}
