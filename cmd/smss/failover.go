package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
	"github.com/smssmq/smss/server"
)

// node is the process's role at run time: the broker's role, a slave's
// replication runner and the master-only background jobs, and the two
// operations that change them without a restart, promote and follow. It
// is the server's Control (status, 34) and Failover (promote 35, follow
// 36).
type node struct {
	cfg   *config.Config
	b     *broker.Broker
	bg    *background
	adm   *adminEndpoint
	log   *slog.Logger
	event int64 // -event: where a slave with an empty binlog starts

	// mu serializes promote, follow and stop: each stops and starts the
	// replication runner.
	mu      sync.Mutex
	stopped bool
	runner  atomic.Pointer[replicaRunner] // nil on a master

	// diverged receives the error of a runner that stopped because this
	// node's binlog is not a prefix of its master's: serve then ends the
	// process rather than serve a tail the master never had.
	diverged chan error

	// auto is the cluster this node belongs to (-role auto), nil
	// otherwise.
	auto *autoNode

	// restart makes serve return to run the node again with another
	// role (a cluster's master stepping down); buffered, one request.
	restart chan *restartAs

	// sync is the semi-synchronous tracker (set before serving): the
	// commit point and the replica stream version of status.
	sync *replication.SyncTracker
	// newerEpoch is the highest epoch a slave reported above this node's
	// own (a newer master exists), 0 when none; warned once per value.
	newerEpoch atomic.Uint64
}

// knownEpoch is the highest epoch this node knows: its own (the masters it
// followed) and, in a cluster, the cluster's. A slave asks it at every
// commit frame (one per write): it reads the epoch without copying the
// cluster state.
func (n *node) knownEpoch() uint64 {
	e := n.b.Epoch()
	if n.auto != nil {
		_, ce := n.auto.cn.MasterEpoch()
		e = max(e, ce)
	}
	return e
}

// slaveEpoch receives the epoch a version 2 slave knows (an epoch record
// on its replica stream). One above this master's own means that another
// node was promoted: this one is an old master, and its slaves are
// leaving it (they refuse to confirm for a lower epoch). Outside a
// cluster only an operator can act on it: it is logged.
func (n *node) slaveEpoch(epoch uint64) {
	own := n.b.Epoch()
	if epoch <= own || n.newerEpoch.Load() >= epoch {
		return
	}
	n.newerEpoch.Store(epoch)
	n.log.Error("A SLAVE KNOWS A NEWER PROMOTION EPOCH: another node was promoted master after this one; "+
		"its slaves no longer confirm writes for it. Stop it and bring it back as a slave with -rejoin",
		"ownEpoch", own, "slaveEpoch", epoch)
}

var (
	_ server.Control  = (*node)(nil)
	_ server.Failover = (*node)(nil)
)

// errFollowOnMaster refuses follow on a master: its binlog may hold blocks
// the other master lacks, so it must come back as a slave through a
// restart with -rejoin, which checks for that.
var errFollowOnMaster = protocol.NewBizError("this node is a master and cannot follow another one while running; " +
	"restart it as a slave with -rejoin (smss -role slave -host H -port P -rejoin)")

// errShuttingDown refuses promote and follow once the process is stopping.
var errShuttingDown = protocol.NewBizError("the server is shutting down")

// startFollowing starts a slave's replication from masterHost:masterPort.
func (n *node) startFollowing(masterHost string, masterPort int) error {
	r, err := startReplication(n.cfg, masterHost, masterPort, n.event, n.b, n.knownEpoch, n.log, n.diverged)
	if err != nil {
		return err
	}
	n.setRunner(r)
	return nil
}

func (n *node) setRunner(r *replicaRunner) {
	n.runner.Store(r)
	n.adm.setReplication(r)
}

// link is the current runner's master link, for SIGHUP.
func (n *node) link() *masterLink {
	if r := n.runner.Load(); r != nil {
		return r.link
	}
	return nil
}

// stop ends replication (at shutdown); promote and follow are refused
// from then on.
func (n *node) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopped = true
	if r := n.runner.Load(); r != nil {
		r.Stop()
	}
}

// Status implements server.Control.
func (n *node) Status() server.NodeStatus {
	st := server.NodeStatus{Role: server.RoleMaster, Epoch: n.b.Epoch(), LastEventID: n.b.LastEventID(), Epochs: n.b.EpochStarts()}
	if n.sync.Enabled() {
		// It tracks confirmations, so it can send commit frames.
		st.Replica = protocol.ReplicaStreamV2
		st.CommitPoint = n.sync.CommitPoint()
	}
	if n.b.ReadCommitted() {
		st.CommitPoint = n.b.CommitPoint()
	}
	if n.b.IsSlave() {
		st.Role = server.RoleSlave
		if r := n.runner.Load(); r != nil {
			st.Master = r.addr
			st.Stream = slaveStream(r.Status(), n.quietAfter(), time.Now())
		}
	}
	if n.auto != nil {
		if id, err := n.b.InstanceID(); err == nil {
			st.Instance = hex.EncodeToString(id[:])
		}
		st.Cluster = n.auto.view(n)
	}
	if n.bg != nil {
		st.QueueGroups = n.bg.queueGroups()
	}
	return st
}

// Promote implements server.Failover: the same outcome as stopping the
// slave and restarting it as a master. Replication stops first (after the
// block being applied), then the broker switches to master, recording the
// role and the new epoch durably, then the master's jobs start: the delay
// scheduler (delays that came due while this was a slave fire now), the
// expiry reaper and their hooks. Retention runs on both roles and goes on;
// replica requests are served from then on (the server asks the broker's
// role at each request).
func (n *node) Promote(ctx context.Context) (uint64, error) {
	if n.auto != nil {
		return 0, errPromoteInCluster
	}
	return n.promote(ctx, 0)
}

// errPromoteInCluster refuses a manual promotion of a cluster node.
var errPromoteInCluster = protocol.NewBizError("this node is one of a cluster (-role auto): the cluster elects its master; " +
	"use smssctl switchover to move the master role")

var (
	_ server.CheckedPromoter = (*node)(nil)
	_ server.Switchoverer    = (*node)(nil)
)

// PromoteChecked implements server.CheckedPromoter: the promotion of
// promote (35), refused when this slave is not known to hold every write
// its master acknowledged (promoteRisk) unless force; a forced one returns
// what may be lost.
func (n *node) PromoteChecked(ctx context.Context, force bool) (uint64, string, error) {
	if n.auto != nil {
		return 0, "", errPromoteInCluster
	}
	var risk string
	if r := n.runner.Load(); r != nil && n.b.IsSlave() {
		st := r.Status()
		risk = promoteRisk(n.b.LastEventID(), st.CommitPoint,
			r.masterReplica.Load() >= protocol.ReplicaStreamV2, r.commitSeen.Load())
		if still := stillStreaming(slaveStream(st, n.quietAfter(), time.Now())); still != "" {
			risk = strings.TrimPrefix(risk+"; "+still, "; ")
		}
		if risk != "" {
			risk += fmt.Sprintf(" (replication from %s: %s, %d reconnects, %d blocks applied)", st.MasterAddr, st.State, st.Reconnects, st.Blocks)
		}
	}
	if risk != "" && !force {
		n.log.Warn("promotion refused", "why", risk)
		return 0, "", protocol.NewBizError("promote refused: " + risk + "; smssctl promote --force promotes anyway")
	}
	epoch, err := n.promote(ctx, 0)
	if err != nil {
		return 0, "", err
	}
	if risk != "" {
		n.log.Error("FORCED PROMOTION: acknowledged writes may be lost", "why", risk, "epoch", epoch)
	}
	return epoch, risk, nil
}

// quietAfter is replication.promoteQuietMs.
func (n *node) quietAfter() time.Duration {
	return time.Duration(n.cfg.Replication.PromoteQuietMs) * time.Millisecond
}

// slaveStream is the status view of a slave's stream st at now, caught up
// once quiet for quietAfter.
func slaveStream(st replication.Status, quietAfter time.Duration, now time.Time) *protocol.SlaveStream {
	v := &protocol.SlaveStream{State: string(st.State), QuietMs: -1, QuietAfterMs: quietAfter.Milliseconds()}
	if !st.LastBlockAt.IsZero() {
		v.LastBlockAt = st.LastBlockAt.UnixMilli()
	}
	if st.State != replication.StateStreaming || st.ConnectedSince.IsZero() {
		return v
	}
	v.ConnectedSince = st.ConnectedSince.UnixMilli()
	since := st.ConnectedSince
	if st.LastBlockAt.After(since) {
		since = st.LastBlockAt
	}
	quiet := max(now.Sub(since), 0)
	v.QuietMs = quiet.Milliseconds()
	v.CaughtUp = quiet >= quietAfter
	return v
}

// stillStreaming says why promoting a slave with stream v would lose the
// writes its master is still taking ("" when the stream is quiet, down,
// or the check is off).
func stillStreaming(v *protocol.SlaveStream) string {
	if v.QuietAfterMs == 0 || v.QuietMs < 0 || v.CaughtUp {
		return ""
	}
	return fmt.Sprintf("its master is still streaming writes to it (the last block %d ms ago, less than replication.promoteQuietMs %d): "+
		"writes the master takes after the promotion would be lost; stop writes on the master and wait until status shows the stream caughtUp",
		v.QuietMs, v.QuietAfterMs)
}

// promoteRisk says why a slave with last eventId last may not hold every
// write its master acknowledged ("" when it does as far as it knows):
// commitPoint is the last commit point the master sent, v2 whether the
// master tracks confirmations (replication.syncSlaves > 0: it serves the
// version 2 stream) and seen whether a commit frame came from it. A slave
// of an asynchronous master cannot know: nothing is refused then.
func promoteRisk(last, commitPoint int64, v2, seen bool) string {
	switch {
	case commitPoint > last:
		return fmt.Sprintf("this slave's last eventId is %d but its master acknowledged writes up to eventId %d (its last commit point): "+
			"the writes of eventIds %d..%d would be lost", last, commitPoint, last+1, commitPoint)
	case v2 && !seen:
		return fmt.Sprintf("its master confirms writes with its slaves (replication.syncSlaves > 0) but this slave never received its commit point, "+
			"so it cannot tell whether it holds every acknowledged write: any write the master acknowledged after eventId %d would be lost", last)
	}
	return ""
}

// Switchover implements server.Switchoverer: a planned switchover of the
// cluster (cluster.go); refused on a node that is not one.
func (n *node) Switchover(ctx context.Context, target string) (string, uint64, error) {
	if n.auto == nil {
		return "", 0, protocol.NewBizError("switchover needs a cluster: this node is not one (-role auto); " +
			"move a manual master with promote and follow")
	}
	return n.auto.switchover(ctx, target)
}

// promote turns the slave into a master; to is the epoch a cluster
// assigned, 0 for the next one (the manual promote).
func (n *node) promote(ctx context.Context, to uint64) (uint64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return 0, errShuttingDown
	}
	if !n.b.IsSlave() {
		return 0, protocol.ErrAlreadyMaster
	}
	if err := n.b.ReadOnly(); err != nil {
		return 0, err // promotion records the role and epoch in meta
	}
	start := time.Now()
	r := n.runner.Load()
	from := ""
	if r != nil {
		from = r.addr
	}
	n.log.Warn("promotion requested: stopping replication", "master", from, "lastEventId", n.b.LastEventID(), "epoch", n.b.Epoch())
	if r != nil {
		r.Stop()
	}
	var epoch uint64
	var err error
	if to == 0 {
		epoch, err = n.b.Promote(ctx)
	} else {
		epoch, err = n.b.PromoteTo(ctx, to)
	}
	if err != nil {
		n.log.Error("promotion failed; still a slave", "err", err)
		if r != nil {
			n.resume(r)
		}
		return 0, fmt.Errorf("promote: %w", err)
	}
	n.setRunner(nil)
	if err := n.bg.startMaster(); err != nil {
		// The broker is a master now and accepts writes; only the timers
		// are missing, which a restart brings back.
		n.log.Error("promoted, but the delay scheduler and expiry reaper did not start; restart the server to start them", "err", err)
		return epoch, fmt.Errorf("promoted to master with epoch %d, but the delay scheduler and expiry reaper did not start: %w", epoch, err)
	}
	n.log.Warn("PROMOTED TO MASTER: accepting writes", "epoch", epoch, "previousMaster", from,
		"lastEventId", n.b.LastEventID(), "took", time.Since(start))
	return epoch, nil
}

// resume restarts replication from r's master after a failed promotion or
// follow, so the slave keeps following rather than standing still.
func (n *node) resume(r *replicaRunner) {
	again, err := runReplication(n.cfg, r.link, r.addr, n.event, n.b, n.knownEpoch, n.log, n.diverged)
	if err != nil {
		n.setRunner(nil)
		n.log.Error("could not resume replication; the slave follows no master now", "master", r.addr, "err", err)
		return
	}
	n.setRunner(again)
}

// Follow implements server.Failover: it re-points a slave to the master at
// addr, resuming from its own binlog's last block with the TLS and login
// settings of the configuration (replication.*). On a master it refuses.
func (n *node) Follow(ctx context.Context, addr string) error {
	if n.auto != nil {
		return protocol.NewBizError("this node is one of a cluster (-role auto): it follows the master the cluster elects")
	}
	return n.followChecked(ctx, addr, true)
}

// follow re-points the slave to addr (a cluster's agent: a divergence
// found later makes it run again with -rejoin's path).
func (n *node) follow(ctx context.Context, addr string) error {
	return n.followChecked(ctx, addr, false)
}

// followCheckTimeout bounds the divergence check of a manual follow; a
// master that does not answer in time is left to the sessions, which
// check on every connection.
const followCheckTimeout = 10 * time.Second

// followChecked re-points the slave to addr. With check it first asks the
// new master whether this node's binlog is a prefix of its: when not, the
// slave would stop (and the process end) at its first session, so follow
// is refused and the previous master followed again.
func (n *node) followChecked(ctx context.Context, addr string, check bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return protocol.NewBizError(fmt.Sprintf("follow: invalid master address %q: %v", addr, err))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return errShuttingDown
	}
	if !n.b.IsSlave() {
		return errFollowOnMaster
	}
	if err := n.b.ReadOnly(); err != nil {
		return err // it could not apply what the new master sends
	}
	// The link is built before the old runner stops, so that TLS material
	// that does not load leaves the slave following its master.
	link, err := masterDialer(n.cfg, host, n.log)
	if err != nil {
		return fmt.Errorf("follow %s: %w", addr, err)
	}
	old := n.runner.Load()
	from := ""
	if old != nil {
		from = old.addr
		old.Stop()
	}
	if check {
		if err := n.checkPrefix(ctx, link, addr); err != nil {
			if old != nil {
				n.resume(old)
			}
			return err
		}
	}
	r, err := runReplication(n.cfg, link, addr, n.event, n.b, n.knownEpoch, n.log, n.diverged)
	if err != nil {
		n.log.Error("follow failed; resuming the previous master", "master", addr, "previousMaster", from, "err", err)
		if old != nil {
			n.resume(old)
		}
		return fmt.Errorf("follow %s: %w", addr, err)
	}
	n.setRunner(r)
	n.log.Warn("FOLLOWING A NEW MASTER", "master", addr, "previousMaster", from, "lastEventId", n.b.LastEventID())
	return nil
}

// checkPrefix refuses (a *protocol.BizError) a master at addr whose binlog
// this node's is not a prefix of; a master that cannot be asked is not
// refused (the replication sessions check on every connection).
func (n *node) checkPrefix(ctx context.Context, link *masterLink, addr string) error {
	var dial client.DialFunc
	if link != nil {
		dial = link.DialContext
	}
	s, err := replication.NewSlave(n.b, slaveOptions(n.cfg, addr, n.event, dial, n.log))
	if err != nil {
		return fmt.Errorf("follow %s: %w", addr, err)
	}
	cctx, cancel := context.WithTimeout(ctx, followCheckTimeout)
	defer cancel()
	err = s.Check(cctx)
	var d *replication.DivergenceError
	switch {
	case errors.As(err, &d):
		n.log.Error("follow refused: this node's binlog diverged from the new master's", "master", addr, "err", d.Error())
		return protocol.NewBizError(fmt.Sprintf("follow %s refused: this node's binlog is not a prefix of that master's (%v); "+
			"following it would stop replication. Restart this node as its slave with -rejoin (smss -role slave -host H -port P -rejoin), "+
			"which moves the divergent tail aside", addr, d))
	case err != nil:
		n.log.Warn("follow: could not check that this node's binlog is a prefix of the new master's; the replication sessions check it", "master", addr, "err", err)
	}
	return nil
}

// fence is the tracker's Fence: a cluster node refuses writes unless it is
// the cluster's master (cluster.go); nil outside a cluster.
func (n *node) fence() func() error {
	if n.auto == nil {
		return nil
	}
	return n.auto.fence
}
