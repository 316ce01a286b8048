package layering

import (
	"strings"
	"testing"
)

// TestBridgeLinksNoServer: smss-bridge is a replica reader, not a node. It
// shares the wire units with the server through protocol (the replica
// frames, the confirmation records of its reader's hello, the status) and
// must not link the server's code: the replication package (whose master
// side registers confirming slaves), the server, the broker and the
// storage packages stay out of its import graph.
func TestBridgeLinksNoServer(t *testing.T) {
	forbidden := []string{"broker", "server", "replication", "segment", "topicblock", "meta", "cluster", "admin", "lifecycle", "delay"}
	for _, pkg := range []string{"bridge", "cmd/smss-bridge"} {
		for _, d := range goList(t, "-deps", module+pkg) {
			rel, ours := strings.CutPrefix(d, module)
			if !ours {
				continue
			}
			for _, f := range forbidden {
				if rel == f || strings.HasPrefix(rel, f+"/") {
					t.Errorf("%s depends on %s", pkg, rel)
				}
			}
		}
	}
}
