package cluster

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// The consensus transport under mutual TLS (issue 31): three -role auto
// nodes with a TLS listener and replication.useTLS (a CA, the nodes'
// server certificate as tls.cert, a client certificate as
// replication.cert) elect a master over raft-over-TLS and it acknowledges
// a write, which waits for an in-sync slave replicating over TLS too. A
// TLS client without a certificate and a raw TCP client that writes to a
// raft port are closed during the handshake; every node logs the refusal,
// and raft itself never reads from them (no "failed to decode incoming
// command": before the handshake moved out of raft's reads, that is what a
// refused peer caused).

// tlsClusterNode is a kit.ClusterNode with its TLS listener's port (its
// cluster addr).
type tlsClusterNode struct {
	*kit.ClusterNode
	tlsPort int
}

func (n *tlsClusterNode) raftAddr() string { return "127.0.0.1:" + strconv.Itoa(n.Raft) }

// startTLSClusterNodes starts three -role auto nodes whose consensus and
// replication use pki's certificates; extra is added to each config.
func startTLSClusterNodes(t *testing.T, pki *authtest.PKI, extra string) []*tlsClusterNode {
	t.Helper()
	nodes := make([]*tlsClusterNode, 3)
	for i := range nodes {
		id := string(rune('a' + i))
		nodes[i] = &tlsClusterNode{ClusterNode: &kit.ClusterNode{Fnode: kit.Fnode{Name: id, Dir: t.TempDir(), Port: kit.FreePort(t)},
			ID: id, Raft: kit.FreePort(t)}, tlsPort: kit.FreePort(t)}
	}
	var peers strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&peers, "    %s: {raft: \"127.0.0.1:%d\", addr: \"127.0.0.1:%d\"}\n", n.ID, n.Raft, n.tlsPort)
	}
	for _, n := range nodes {
		kit.ReplConfig(t, n.Dir, n.Port, fmt.Sprintf("tls:\n  listen: 127.0.0.1:%d\n  cert: %s\n  key: %s\n"+
			"replication:\n  syncSlaves: 1\n  syncTimeoutMs: 2000\n  onSyncTimeout: fail\n"+
			"  useTLS: true\n  ca: %s\n  cert: %s\n  key: %s\n%s"+
			"cluster:\n  node: %s\n  peers:\n%s",
			n.tlsPort, pki.ServerCert, pki.ServerKey, pki.CAFile, pki.ClientCert, pki.ClientKey, extra, n.ID, peers.String()))
	}
	for _, n := range nodes {
		n.P = kit.StartArgs(t, n.Dir, "-role", "auto")
	}
	return nodes
}

// clusterTransportOf is the status's cluster.transport of addr ("" when it
// does not answer).
func clusterTransportOf(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(kit.Must(protocol.AppendStatus(nil, nil))); err != nil {
		return ""
	}
	body, err := protocol.ReadReply(bufio.NewReader(c), protocol.ReplyJSON, 1<<20)
	var st struct {
		Cluster *struct {
			Transport string `json:"transport"`
		} `json:"cluster"`
	}
	if err != nil || json.Unmarshal(body, &st) != nil || st.Cluster == nil {
		return ""
	}
	return st.Cluster.Transport
}

// refusedByRaft checks that c (a connection to a raft port that has sent
// what it had to) is closed by the node within 10 s, not left open.
func refusedByRaft(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue // an alert record, for a raw client
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: the raft port left the connection open: %v", what, err)
		}
		return
	}
}

func TestClusterTLS(t *testing.T) {
	pki := authtest.NewPKI(t)
	nodes := startTLSClusterNodes(t, pki, "")
	all := make([]*kit.ClusterNode, len(nodes))
	for i, n := range nodes {
		all[i] = n.ClusterNode
		n.P.WaitLog(t, "the consensus (raft) transport is mutual TLS", 1)
	}
	master, _ := kit.WaitClusterMaster(t, all, 0, 60*time.Second)
	for _, n := range nodes {
		if got := clusterTransportOf(n.Addr()); got != "mutual-tls" {
			t.Fatalf("%s: status cluster.transport %q, want mutual-tls", n.ID, got)
		}
	}
	// A write: refused until a slave (replicating over TLS) is in sync.
	write := func(topic string) {
		t.Helper()
		if !smsstest.Poll(60*time.Second, func() bool {
			nc, err := net.DialTimeout("tcp", master.Addr(), time.Second)
			if err != nil {
				return false
			}
			defer nc.Close()
			c := &kit.Client{C: nc, R: bufio.NewReader(nc)}
			if err := c.Create(topic, 0); err != nil && !strings.Contains(err.Error(), "topic exist") {
				return false
			}
			return c.Pub(topic, kit.Record(nil, "over tls")) == nil
		}) {
			t.Fatalf("the cluster's master %s never acknowledged a write to %s\n%s", master.ID, topic, kit.Tail(master.P.Out.String(), 4000))
		}
	}
	write("tls0")

	// Intruders at every raft port: a TLS client that trusts the CA but
	// has no certificate, and a raw TCP client writing raft-like bytes.
	var intruders []string
	for _, n := range nodes {
		raw, err := net.DialTimeout("tcp", n.raftAddr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		intruders = append(intruders, raw.LocalAddr().String())
		anon := tls.Client(raw, &tls.Config{RootCAs: pki.ClientConfig(t, false).RootCAs, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		anon.SetDeadline(time.Now().Add(10 * time.Second))
		if err := anon.Handshake(); err == nil {
			// TLS 1.3: the client finishes before the server verified it;
			// a request then meets the server's refusal.
			anon.Write([]byte{0, 0x80})
			refusedByRaft(t, anon, n.ID+": TLS without a client certificate")
		}
		anon.Close()

		plain, err := net.DialTimeout("tcp", n.raftAddr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		intruders = append(intruders, plain.LocalAddr().String())
		// rpcAppendEntries (0) and a msgpack map header.
		if _, err := plain.Write([]byte{0, 0x85, 0xa4, 'T', 'e', 'r', 'm', 0x7f}); err != nil {
			t.Fatal(err)
		}
		refusedByRaft(t, plain, n.ID+": raw TCP")
		plain.Close()
	}
	for i, n := range nodes {
		anon, plain := intruders[2*i], intruders[2*i+1]
		for _, who := range []string{anon, plain} {
			if !smsstest.Poll(10*time.Second, func() bool {
				for _, l := range strings.Split(n.P.Out.String(), "\n") {
					if strings.Contains(l, "refused a connection to the raft port") && strings.Contains(l, who) {
						return true
					}
				}
				return false
			}) {
				t.Fatalf("%s: the refusal of %s is not logged\n%s", n.ID, who, kit.Tail(n.P.Out.String(), 4000))
			}
		}
		for _, l := range strings.Split(n.P.Out.String(), "\n") {
			if strings.Contains(l, "failed to decode incoming command") ||
				(!strings.Contains(l, "refused a connection to the raft port") && (strings.Contains(l, anon) || strings.Contains(l, plain))) {
				t.Fatalf("%s: raft read from an intruder: %s", n.ID, l)
			}
		}
	}
	// The cluster is unaffected.
	write("tls1")
}

// A cluster node whose TLS keys are inconsistent is refused at start
// (exit 2), the one line naming the keys.
func TestClusterTLSRefused(t *testing.T) {
	pki := authtest.NewPKI(t)
	for _, tc := range []struct {
		name, extra string
		keys        []string
	}{
		{"listener only", fmt.Sprintf("tls:\n  listen: 127.0.0.1:%d\n  cert: %s\n  key: %s\n", kit.FreePort(t), pki.ServerCert, pki.ServerKey),
			[]string{"tls.listen", "replication.useTLS"}},
		{"replication only", fmt.Sprintf("replication:\n  syncSlaves: 1\n  onSyncTimeout: fail\n  useTLS: true\n  ca: %s\n  cert: %s\n  key: %s\n",
			pki.CAFile, pki.ClientCert, pki.ClientKey), []string{"replication.useTLS", "tls.listen"}},
		{"no client certificate", fmt.Sprintf("tls:\n  listen: 127.0.0.1:%d\n  cert: %s\n  key: %s\n"+
			"replication:\n  syncSlaves: 1\n  onSyncTimeout: fail\n  useTLS: true\n  ca: %s\n",
			kit.FreePort(t), pki.ServerCert, pki.ServerKey, pki.CAFile), []string{"replication.cert", "replication.key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			extra := tc.extra
			if !strings.Contains(extra, "replication:") {
				extra += "replication:\n  syncSlaves: 1\n  onSyncTimeout: fail\n"
			}
			kit.ReplConfig(t, dir, kit.FreePort(t), extra+fmt.Sprintf("cluster:\n  node: a\n  peers:\n"+
				"    a: {raft: \"127.0.0.1:%d\", addr: \"127.0.0.1:1\"}\n"+
				"    b: {raft: \"127.0.0.1:%d\", addr: \"127.0.0.1:2\"}\n"+
				"    c: {raft: \"127.0.0.1:%d\", addr: \"127.0.0.1:3\"}\n", kit.FreePort(t), kit.FreePort(t), kit.FreePort(t)))
			cmd := smsstest.SmssCommand(t, dir, "-role", "auto")
			var out smsstest.SyncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("smss did not refuse the configuration:\n%s", out.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit %v, want 2\n%s", err, out.String())
			}
			var line string
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.Contains(l, "cannot start the cluster node") {
					line = l
				}
			}
			for _, k := range tc.keys {
				if !strings.Contains(line, k) {
					t.Errorf("the refusal does not name %s: %q\n%s", k, line, out.String())
				}
			}
			if strings.Contains(out.String(), "smss listening") {
				t.Errorf("smss listened before refusing:\n%s", out.String())
			}
		})
	}
}
