package main

// -role auto: the node is one of a cluster (issue 31; the config's cluster
// section). The consensus (package cluster) decides who is master, the
// epoch and the in-sync set; this file makes the node act on it:
//
//   - Every node starts as a slave that follows nobody (a standby). The
//     agent (one goroutine, every event in one select) applies each cluster
//     state: the node named master is promoted to exactly the state's
//     epoch; every other node follows that master's smss address.
//   - A master that is no longer named (a newer epoch elected someone else)
//     steps down: the node runs again in place as a slave of the new master
//     with -rejoin's path, so a divergent tail goes to diverged/ (logged).
//   - A slave whose binlog diverged from the master's it follows does the
//     same instead of exiting, as -rejoin would.
//   - The master answers writes only while it is the state's master at the
//     state's epoch and its consensus lease holds (fence): every other
//     write is refused "fenced: …" and, being unconfirmed, never delivered
//     (read-committed). Writes wait for every member of the in-sync set
//     (replication.SyncTracker's in-sync rule), which the agent hands the
//     tracker from each state.
//   - The cluster's controller asks each node's status (the status
//     command) through Probe.
//
// The consensus node lives for the process; the smss node (broker, server)
// is rebuilt at each in-place restart, and the agent acts on the current
// one.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/cluster"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
)

// autoRetry is how often the agent applies the current state again when
// nothing changed: an action that failed (a master not reachable yet) is
// retried that often.
const autoRetry = 500 * time.Millisecond

type autoNode struct {
	cfg   *config.Config
	log   *slog.Logger
	self  string
	peers map[string]cluster.Peer
	dials map[string]client.DialFunc // per peer: the replication dialer
	cn    *cluster.Node
	// transport is the consensus transport (transportPlain or
	// transportMutual); raftTLS its material, nil for plain TCP.
	transport string
	raftTLS   *raftTLS

	cur  atomic.Pointer[node] // the node being served; nil between runs
	mu   sync.Mutex           // serializes act
	stop chan struct{}
	done chan struct{}
	// acted is the last state the agent acted on completely (its Version),
	// for logs only.
	acted atomic.Uint64
}

// startAuto opens the consensus and starts the agent.
func startAuto(cfg *config.Config, logger *slog.Logger) (*autoNode, error) {
	o, err := cluster.FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	transport, rt, err := setupRaftTLS(cfg, &o)
	if err != nil {
		return nil, err
	}
	a := &autoNode{cfg: cfg, log: logger.With("component", "cluster"), self: o.NodeID,
		peers: map[string]cluster.Peer{}, dials: map[string]client.DialFunc{},
		transport: transport, raftTLS: rt,
		stop: make(chan struct{}), done: make(chan struct{})}
	for _, p := range o.Peers {
		a.peers[p.ID] = p
		host, _, err := net.SplitHostPort(p.Addr)
		if err != nil {
			return nil, fmt.Errorf("cluster.peers.%s.addr: %w", p.ID, err)
		}
		link, err := masterDialer(cfg, host, logger)
		if err != nil {
			return nil, fmt.Errorf("cluster: the connection to %s: %w", p.ID, err)
		}
		dial := client.DialFunc((&net.Dialer{}).DialContext)
		if link != nil {
			dial = link.DialContext
		}
		a.dials[p.ID] = dial
	}
	o.Prober = a
	o.Logger = logger.With("component", "consensus")
	logRaftTransport(a.log, transport, a.peers[a.self].Raft)
	cn, err := cluster.Open(o)
	if err != nil {
		return nil, err
	}
	a.cn = cn
	go a.run()
	return a, nil
}

// close stops the agent, then the consensus.
func (a *autoNode) close() {
	close(a.stop)
	<-a.done
	if err := a.cn.Close(); err != nil {
		a.log.Warn("closing the consensus node", "err", err)
	}
}

// attach makes n the node the agent acts on (runNode, before serving);
// detach ends that (after serving).
func (a *autoNode) attach(n *node) {
	a.cur.Store(n)
	go a.kick()
}

func (a *autoNode) detach() { a.cur.Store(nil) }

func (a *autoNode) kick() { a.act(a.cn.State()) }

func (a *autoNode) run() {
	defer close(a.done)
	t := time.NewTicker(autoRetry)
	defer t.Stop()
	changes := a.cn.Changes()
	for {
		select {
		case st := <-changes:
			a.act(st)
		case <-t.C:
			a.act(a.cn.State())
		case <-a.stop:
			return
		}
	}
}

// act brings the current node in line with st.
func (a *autoNode) act(st cluster.State) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.cur.Load()
	if n == nil || st.Master == "" {
		return
	}
	if !a.cn.CaughtUp() {
		// A restarted node's consensus is replaying the past; the retry
		// tick acts on the current state once it has caught up.
		return
	}
	b := n.b
	if st.Epoch < b.Epoch() {
		// An older state than this node already took part in: the
		// consensus is replaying its log after a restart (every epoch
		// the cluster elects is above every epoch a node reports).
		// Following that state's master would follow a node that is no
		// master any more.
		a.log.Debug("ignoring an older cluster state", "epoch", st.Epoch, "nodeEpoch", b.Epoch(), "version", st.Version)
		return
	}
	n.sync.SetInSync(a.instances(st), st.Version)
	if st.Master == a.self {
		switch {
		case b.IsSlave():
			a.log.Warn("the cluster elected this node master: promoting", "epoch", st.Epoch, "lastEventId", b.LastEventID(), "reason", st.Reason)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := n.promote(ctx, st.Epoch); err != nil {
				a.log.Error("promotion to the cluster's epoch failed; retrying", "epoch", st.Epoch, "err", err)
				return
			}
		case b.Epoch() != st.Epoch:
			// A master of an older epoch elected again: it takes the new
			// epoch through a slave's promotion.
			a.requestRestart(n, &restartAs{role: roleSlave, why: fmt.Sprintf("this master's epoch %d is not the cluster's %d", b.Epoch(), st.Epoch)})
			return
		}
		a.acted.Store(st.Version)
		return
	}
	p, ok := a.peers[st.Master]
	if !ok {
		a.log.Error("the cluster names a master that is not among the peers of this node's configuration", "master", st.Master)
		return
	}
	host, portStr, _ := net.SplitHostPort(p.Addr)
	port, _ := strconv.Atoi(portStr)
	if !b.IsSlave() {
		a.requestRestart(n, &restartAs{role: roleSlave, masterHost: host, masterPort: port, rejoin: true,
			why: fmt.Sprintf("the cluster elected %s master at epoch %d (this node held epoch %d)", st.Master, st.Epoch, b.Epoch())})
		return
	}
	if r := n.runner.Load(); r != nil && r.addr == p.Addr {
		select {
		case <-r.done:
			// Replication stopped on that master (it refused to serve
			// it, e.g. while it was still a slave taking the epoch): a
			// cluster node follows its master again, once per retry.
			a.log.Warn("replication from the cluster's master stopped; following it again", "master", st.Master, "addr", p.Addr)
		default:
			a.acted.Store(st.Version)
			return
		}
	}
	if b.ReadOnly() != nil {
		return // it cannot apply blocks; status says why
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.follow(ctx, p.Addr); err != nil {
		a.log.Warn("cannot follow the cluster's master yet; retrying", "master", st.Master, "addr", p.Addr, "err", err)
		return
	}
	a.acted.Store(st.Version)
}

// requestRestart asks serve to run the node again (at most one request).
func (a *autoNode) requestRestart(n *node, r *restartAs) {
	select {
	case n.restart <- r:
		a.log.Warn("stepping down: this node runs again as a slave", "master", r.master(), "why", r.why)
	default:
	}
}

// instances are the in-sync members' instance ids, for the tracker.
func (a *autoNode) instances(st cluster.State) [][replication.InstanceIDLen]byte {
	out := make([][replication.InstanceIDLen]byte, 0, len(st.ISR))
	for _, m := range st.ISR {
		var id [replication.InstanceIDLen]byte
		if b, err := hex.DecodeString(m.Instance); err == nil && len(b) == len(id) {
			copy(id[:], b)
			out = append(out, id)
		} else {
			a.log.Error("an in-sync member's instance id is not 12 hex digits; writes wait for it until it leaves", "node", m.Node, "instance", m.Instance)
			out = append(out, id) // a zero id no slave has: writes wait
		}
	}
	return out
}

// errFenced builds the refusal of a write by a fenced master.
func errFenced(why string) error { return protocol.NewBizError(protocol.FencedPrefix + why) }

// fence refuses writes unless this node is the cluster's master at its
// epoch and holds the consensus lease (replication.SyncOptions.Fence).
func (a *autoNode) fence() error {
	why := a.fencedWhy(a.cur.Load())
	if why == "" {
		return nil
	}
	return errFenced(why)
}

func (a *autoNode) fencedWhy(n *node) string {
	master, epoch := a.cn.MasterEpoch()
	switch {
	case n == nil:
		return "this node is changing role"
	case master != a.self:
		return fmt.Sprintf("this node is not the cluster's master (epoch %d, master %q)", epoch, master)
	case n.b.IsSlave() || n.b.Epoch() != epoch:
		return fmt.Sprintf("this node has not taken the cluster's epoch %d yet (it holds %d)", epoch, n.b.Epoch())
	case !a.cn.LeaseValid():
		return "this node lost contact with the cluster's majority (its lease expired); a new master may be elected"
	case !a.cn.CaughtUp():
		return "this node's view of the cluster is catching up with the consensus"
	}
	return ""
}

// view is the cluster part of n's status.
func (a *autoNode) view(n *node) *protocol.ClusterView {
	cs := a.cn.Status()
	st := cs.State
	v := &protocol.ClusterView{Node: a.self, Epoch: st.Epoch, Master: st.Master, Leader: cs.Leader,
		Version: st.Version, LeaseValid: cs.LeaseValid, Transport: a.transport}
	for _, m := range st.ISR {
		v.InSync = append(v.InSync, protocol.InSyncMember{Node: m.Node, Eligible: m.Eligible})
	}
	for _, id := range a.peerIDs() {
		v.Peers = append(v.Peers, protocol.ClusterPeer{Node: id, Addr: a.peers[id].Addr})
	}
	if c := cs.Controller; c != nil {
		v.Blocked = c.Blocked
		for _, p := range c.Nodes {
			pr := protocol.ClusterProbe{Node: p.ID, OK: p.OK, Error: truncate(p.Err, maxProbeErr), AgeMs: -1}
			if p.Age >= 0 {
				r := p.Report
				pr.Role, pr.Epoch, pr.LastEventID, pr.CommitPoint, pr.Instance = r.Role, r.Epoch, r.LastEventID, r.CommitPoint, r.Instance
				pr.AgeMs = p.Age.Milliseconds()
			}
			v.Probes = append(v.Probes, pr)
		}
	}
	if !n.b.IsSlave() {
		v.Fenced = a.fencedWhy(n)
		v.InSyncVersion = n.sync.InSyncVersion()
		v.Slaves = n.sync.SlaveReports()
	}
	return v
}

// maxProbeErr caps a probe's error text in the status reply, which the
// controller reads within maxStatusReply.
const maxProbeErr = 256

// truncate cuts s to at most n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// peerIDs are the configured peers' ids, sorted.
func (a *autoNode) peerIDs() []string {
	ids := make([]string, 0, len(a.peers))
	for id := range a.peers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// switchover hands the master role to target ("": the eligible in-sync
// member with the highest last eventId the controller probed, then the
// lowest id) through the consensus, once target caught up with the master
// (cluster.switchoverWaitMs at most). Only the consensus leader serves
// it; another node refuses naming the leader (protocol.FormatNotLeader),
// where the client asks again.
func (a *autoNode) switchover(ctx context.Context, target string) (string, uint64, error) {
	if target != "" {
		if _, ok := a.peers[target]; !ok {
			return "", 0, protocol.NewBizError(fmt.Sprintf("switchover: no node %q in this cluster (its nodes: %s)", target, strings.Join(a.peerIDs(), ", ")))
		}
	}
	cs := a.cn.Status()
	if target == "" && cs.Controller != nil {
		target = pickSwitchoverTarget(cs.State, cs.Controller.Nodes)
		if target == "" {
			return "", 0, protocol.NewBizError(fmt.Sprintf("switchover: no eligible member of the in-sync set of epoch %d to hand the master role to (%s)",
				cs.State.Epoch, describeISR(cs.State)))
		}
	}
	a.log.Warn("switchover requested", "target", target, "master", cs.State.Master, "epoch", cs.State.Epoch)
	err := a.cn.Switchover(ctx, target)
	var nl *cluster.NotLeaderError
	if errors.As(err, &nl) {
		addr := ""
		if p, ok := a.peers[nl.Leader]; ok {
			addr = p.Addr
		}
		if addr == "" {
			nl.Leader = ""
		}
		return "", 0, protocol.NewBizError(protocol.FormatNotLeader(nl.Leader, addr))
	}
	if err != nil {
		a.log.Warn("switchover failed", "target", target, "err", err)
		return "", 0, protocol.NewBizError(err.Error())
	}
	st := a.cn.State()
	a.log.Warn("switchover done", "master", st.Master, "epoch", st.Epoch)
	return st.Master, st.Epoch, nil
}

// pickSwitchoverTarget is the eligible in-sync member with the highest
// last eventId in the controller's probes, then the lowest id; "" if none.
func pickSwitchoverTarget(st cluster.State, probes []cluster.NodeProbe) string {
	last := map[string]int64{}
	for _, p := range probes {
		if p.OK && p.Age >= 0 {
			last[p.ID] = p.Report.LastEventID
		}
	}
	best := ""
	for _, m := range st.ISR { // sorted by node id
		if !m.Eligible || m.Node == st.Master {
			continue
		}
		if best == "" || last[m.Node] > last[best] {
			best = m.Node
		}
	}
	return best
}

// describeISR is the in-sync set for an error text.
func describeISR(st cluster.State) string {
	if len(st.ISR) == 0 {
		return "the in-sync set is empty"
	}
	parts := make([]string, 0, len(st.ISR))
	for _, m := range st.ISR {
		e := "not eligible yet"
		if m.Eligible {
			e = "eligible"
		}
		parts = append(parts, m.Node+" "+e)
	}
	return "in-sync set: " + strings.Join(parts, ", ")
}

// Probe implements cluster.Prober: the peer's status, asked like a slave
// asks its master's.
func (a *autoNode) Probe(ctx context.Context, p cluster.Peer) (cluster.Report, error) {
	dial := a.dials[p.ID]
	if dial == nil {
		return cluster.Report{}, fmt.Errorf("cluster: no peer %q", p.ID)
	}
	st, err := queryStatus(ctx, dial, p.Addr)
	if err != nil {
		return cluster.Report{}, err
	}
	if st.Cluster == nil {
		return cluster.Report{}, errors.New("the node at " + p.Addr + " is not a cluster node (-role auto)")
	}
	r := cluster.Report{Role: st.Role, Epoch: st.Epoch, LastEventID: st.LastEventID, Instance: st.Instance}
	if st.IsMaster() {
		r.CommitPoint, r.AdoptedVersion = st.CommitPoint, st.Cluster.InSyncVersion
		r.Fenced = st.Cluster.Fenced
		for _, s := range st.Cluster.Slaves {
			r.Slaves = append(r.Slaves, cluster.SlaveReport{Instance: s.Instance, Connected: true, Confirmed: s.Confirmed, LagMs: s.LagMs})
		}
	}
	return r, nil
}

// reportTimeout bounds the status requests of a cluster report (the
// admin endpoint's /api/cluster).
const reportTimeout = 2 * time.Second

// report asks every node's status (this one's locally) and combines them
// (protocol.BuildClusterReport).
func (a *autoNode) report(ctx context.Context) protocol.ClusterReport {
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		answers = map[string]*protocol.NodeStatus{}
		errs    = map[string]string{}
		peers   []protocol.ClusterPeer
	)
	for _, id := range a.peerIDs() {
		p := a.peers[id]
		peers = append(peers, protocol.ClusterPeer{Node: id, Addr: p.Addr})
		if id == a.self {
			if n := a.cur.Load(); n != nil {
				st := n.Status()
				answers[id] = &st
			} else {
				errs[id] = "this node is changing role"
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := queryStatus(ctx, a.dials[id], p.Addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[id] = err.Error()
			} else {
				answers[id] = st
			}
		}()
	}
	wg.Wait()
	return protocol.BuildClusterReport(peers, answers, errs)
}

// metrics is this node's view for the cluster gauges.
func (a *autoNode) metrics() metrics.ClusterInfo {
	cs := a.cn.Status()
	st := cs.State
	c := metrics.ClusterInfo{Node: a.self, Epoch: st.Epoch, Version: st.Version, IsMaster: st.Master == a.self,
		IsLeader: cs.Leader == a.self, LeaseValid: cs.LeaseValid, InSync: len(st.ISR)}
	if n := a.cur.Load(); n != nil && !n.b.IsSlave() {
		c.Fenced = a.fencedWhy(n) != ""
	}
	if cs.Controller != nil {
		c.Blocked = cs.Controller.Blocked != ""
	}
	return c
}
