package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// natsModule is the nats-server the JetStream peer is built from; go.mod
// pins its version.
const natsModule = "github.com/nats-io/nats-server/v2"

// buildNats compiles nats-server into the temp root, like buildSmss: from
// the version go.mod requires, inside the smss module.
func (e *env) buildNats(ctx context.Context) (string, error) {
	bin := filepath.Join(e.root, "nats-server")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, natsModule)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build nats-server (run inside the smss module or pass --nats-bin): %w\n%s", err, out)
	}
	return bin, nil
}

// natsNode is one nats-server of a run and the ports it listens on.
type natsNode struct {
	name        string
	port, route int
}

// natsConfig is a node's config file: JetStream with file storage in dir,
// sync_interval always when syncAlways, and routes to every node of a
// cluster (none for one node).
func natsConfig(n natsNode, nodes []natsNode, dir string, syncAlways bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\nlog_file: %q\n", n.name, n.port, filepath.Join(dir, "nats.log"))
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", filepath.Join(dir, "data"))
	if syncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	if len(nodes) > 1 {
		fmt.Fprintf(&b, "cluster {\n  name: bench\n  listen: 127.0.0.1:%d\n  routes: [\n", n.route)
		for _, o := range nodes {
			fmt.Fprintf(&b, "    nats-route://127.0.0.1:%d\n", o.route)
		}
		b.WriteString("  ]\n}\n")
	}
	return b.String()
}

// startNats starts size nats-servers with JetStream (a cluster when size >
// 1) and waits until JetStream answers on each. Free ports are picked
// first; if one was taken meanwhile, the whole set is started again.
func (e *env) startNats(ctx context.Context, bin string, size int, syncAlways bool) ([]*server, error) {
	return startAgain(ctx, func() ([]*server, error) { return e.tryStartNats(ctx, bin, size, syncAlways) })
}

func (e *env) tryStartNats(ctx context.Context, bin string, size int, syncAlways bool) ([]*server, error) {
	nodes := make([]natsNode, size)
	for i := range nodes {
		var err error
		nodes[i].name = fmt.Sprintf("n%d", i+1)
		if nodes[i].port, err = freePort(); err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		if size > 1 {
			if nodes[i].route, err = freePort(); err != nil {
				return nil, fmt.Errorf("find a free port: %w", err)
			}
		}
	}
	var srvs []*server
	stopAll := func() {
		for _, s := range srvs {
			e.stop(s)
		}
	}
	for _, n := range nodes {
		dir, err := e.dir("nats-" + n.name)
		if err != nil {
			stopAll()
			return nil, err
		}
		cfg := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(cfg, []byte(natsConfig(n, nodes, dir, syncAlways)), 0o644); err != nil {
			stopAll()
			return nil, fmt.Errorf("write nats config: %w", err)
		}
		s := &server{name: "nats-server " + n.name, dir: dir, dataDir: filepath.Join(dir, "data"),
			logPath: filepath.Join(dir, "nats.log"), addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))}
		s.cmd = exec.Command(bin, "-c", cfg)
		s.cmd.Dir = dir
		if err := e.start(s); err != nil {
			stopAll()
			return nil, err
		}
		srvs = append(srvs, s)
	}
	deadline := time.Now().Add(startTimeout)
	for _, s := range srvs {
		if err := waitJetStream(ctx, s, deadline); err != nil {
			stopAll()
			return nil, err
		}
	}
	return srvs, nil
}

// waitJetStream polls a nats-server until its JetStream answers an
// account info request (in a cluster: once a meta leader is elected).
func waitJetStream(ctx context.Context, s *server, deadline time.Time) error {
	for {
		err := func() error {
			nc, js, err := jsConnect("nats://" + s.addr)
			if err != nil {
				return err
			}
			defer nc.Close()
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err = js.AccountInfo(cctx)
			return err
		}()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited during start-up (%v):\n%s", s.name, s.err, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: JetStream not ready within %s: %v\n%s", s.name, startTimeout, err, s.logTail())
		}
		time.Sleep(20 * time.Millisecond) // nothing to wait on in another process but its answer
	}
}

// streamLeader returns the address of the server leading the stream, so
// that the clients talk to it directly as smss clients talk to the master.
func streamLeader(srvs []*server, stream string) (string, error) {
	names := map[string]string{}
	for i, s := range srvs {
		names[fmt.Sprintf("n%d", i+1)] = s.addr
	}
	nc, js, err := jsConnect("nats://" + srvs[0].addr)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), jsAPITimeout)
		st, err := js.Stream(ctx, stream)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = st.Info(ctx)
		}
		cancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			addr, ok := names[info.Cluster.Leader]
			if !ok {
				return "", fmt.Errorf("stream %s led by unknown server %q", stream, info.Cluster.Leader)
			}
			ok = len(info.Cluster.Replicas) == len(srvs)-1
			for _, r := range info.Cluster.Replicas {
				ok = ok && r.Current
			}
			if ok {
				return addr, nil
			}
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("no leader with current replicas")
			}
			return "", fmt.Errorf("stream %s: %w", stream, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the cluster's view
	}
}
