package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// clusterSize is the number of nodes of the smss cluster a run starts
// (--cluster), as in the README's "Cluster: automatic failover".
const clusterSize = 3

// clusterConfig is one node's config file: the benchmark's usual server
// config on a fixed port, replication.syncSlaves 1 (a cluster needs it)
// and the cluster section naming every node's raft and smss addresses.
func clusterConfig(dataDir string, flush int, node string, ports, rafts []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "host: 127.0.0.1\nport: %d\nlog:\n  path: stdout\n  sample: 0\nstore:\n  path: %s\n  flushLevel: %d\n",
		ports[strings.IndexByte(clusterNodes, node[0])], dataDir, flush)
	b.WriteString("replication:\n  syncSlaves: 1\ncluster:\n  node: " + node + "\n  peers:\n")
	for i := range ports {
		fmt.Fprintf(&b, "    %c: {raft: \"127.0.0.1:%d\", addr: \"127.0.0.1:%d\"}\n", clusterNodes[i], rafts[i], ports[i])
	}
	return b.String()
}

// clusterNodes names the nodes.
const clusterNodes = "abc"

// startSmssCluster starts three `-role auto` nodes and waits until one of
// them is master and answers a create 200 (its in-sync slaves confirmed
// it). It returns the master first. Ports are picked free beforehand; if
// one was taken meanwhile, the whole cluster is started again.
func (e *env) startSmssCluster(ctx context.Context, bin string, flush int) ([]*server, error) {
	return startAgain(ctx, func() ([]*server, error) { return e.tryStartSmssCluster(ctx, bin, flush) })
}

// startAgain runs try, a start of several servers on ports picked free
// beforehand, up to three times: another process may take a port between
// the pick and the bind.
func startAgain(ctx context.Context, try func() ([]*server, error)) ([]*server, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		srvs, err := try()
		if err == nil {
			return srvs, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func (e *env) tryStartSmssCluster(ctx context.Context, bin string, flush int) ([]*server, error) {
	ports, rafts := make([]int, clusterSize), make([]int, clusterSize)
	for i := range ports {
		var err error
		if ports[i], err = freePort(); err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		if rafts[i], err = freePort(); err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
	}
	var srvs []*server
	stopAll := func() {
		for _, s := range srvs {
			e.stop(s)
		}
	}
	for i := 0; i < clusterSize; i++ {
		node := clusterNodes[i : i+1]
		dir, err := e.dir("smss-node-" + node)
		if err != nil {
			stopAll()
			return nil, err
		}
		cfgPath := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(cfgPath, []byte(clusterConfig(filepath.Join(dir, "data"), flush, node, ports, rafts)), 0o644); err != nil {
			stopAll()
			return nil, fmt.Errorf("write smss config: %w", err)
		}
		s, err := e.runSmss(ctx, bin, "smss node "+node, dir, []string{"-config", cfgPath, "-role", "auto"})
		if err != nil {
			stopAll()
			return nil, err
		}
		srvs = append(srvs, s)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		for i, s := range srvs {
			select {
			case <-s.exited:
				stopAll()
				return nil, fmt.Errorf("%s exited (%v):\n%s", s.name, s.err, s.logTail())
			default:
			}
			// A create answered 200 went through the master's in-sync
			// set; a slave refuses it.
			if createTopicConfirmed(s.addr, "bench-ready") == nil {
				srvs[0], srvs[i] = srvs[i], srvs[0]
				return srvs, nil
			}
		}
		if time.Now().After(deadline) {
			stopAll()
			return nil, fmt.Errorf("no smss cluster master accepting writes within %s:\n%s", startTimeout, srvs[0].logTail())
		}
		select {
		case <-ctx.Done():
			stopAll()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond): // the election runs in other processes
		}
	}
}
