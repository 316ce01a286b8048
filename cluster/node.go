package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Node is this process's member of the cluster: its raft node, its copy of
// the State, and — while it is the raft leader — the controller.
type Node struct {
	o      Options
	log    *slog.Logger
	fsm    *fsm
	raft   *raft.Raft
	stream *streamLayer
	trans  *raft.NetworkTransport
	store  *raftboltdb.BoltStore

	notify chan bool // raft's leadership changes
	done   chan struct{}
	wg     sync.WaitGroup

	// follower and leading are raft's reloadable settings as configured
	// and while this node leads (monitor switches them): raft's leader
	// sends a heartbeat every HeartbeatTimeout/10..HeartbeatTimeout/5, five
	// to ten in a follower's timeout; a leader takes
	// leaderHeartbeatFactor times the timeout, which spaces its heartbeats
	// that much more (the followers' timeout, i.e. how soon a lost
	// leader is replaced, does not change).
	follower, leading raft.ReloadableConfig

	// verified is when the last successful VerifyLeader of this
	// leadership started (unix ns; 0: none yet); lostAt is when this node
	// last stopped being leader. Both feed LeaseValid.
	verified atomic.Int64
	lostAt   atomic.Int64
	// caughtUp: CaughtUp was true once (it stays true).
	caughtUp atomic.Bool

	ctrlMu sync.Mutex
	ctrl   *controller // nil unless leader

	closeOnce sync.Once
	closeErr  error
}

// ErrNotLeader is wrapped by the errors of calls only the raft leader
// serves; a *NotLeaderError says which node leads.
var ErrNotLeader = errors.New("cluster: not the raft leader")

// NotLeaderError is ErrNotLeader with the current leader's id ("" if none
// is known).
type NotLeaderError struct{ Leader string }

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return ErrNotLeader.Error() + " (no leader known)"
	}
	return fmt.Sprintf("%v (the leader is %s)", ErrNotLeader, e.Leader)
}

// Is makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// Open starts this node: the raft store in o.Dir, the transport on its
// peer's Raft address, and raft itself. On a first start (no raft state in
// o.Dir) it bootstraps the configured peers as voters; every node may do so
// with the same peer set. The controller runs whenever this node is leader.
func Open(o Options) (*Node, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	o.Peers = append([]Peer(nil), o.Peers...)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	n := &Node{o: o, log: o.Logger.With("component", "cluster", "node", o.NodeID),
		notify: make(chan bool, 16), done: make(chan struct{})}
	n.fsm = newFSM(n.log)
	if err := n.open(); err != nil {
		if n.raft != nil {
			n.raft.Shutdown().Error()
		}
		n.closeResources()
		return nil, err
	}
	n.wg.Add(1)
	go n.monitor()
	return n, nil
}

func (n *Node) open() error {
	o := &n.o
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	hlog := newRaftLogger(n.o.Logger)
	var err error
	n.store, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(o.Dir, "raft.db")})
	if err != nil {
		return fmt.Errorf("cluster: raft store: %w", err)
	}
	logs, err := raft.NewLogCache(256, n.store)
	if err != nil {
		return fmt.Errorf("cluster: raft log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(o.Dir, 2, hlog)
	if err != nil {
		return fmt.Errorf("cluster: raft snapshots: %w", err)
	}
	self, _ := o.peer(o.NodeID)
	var client func() *tls.Config
	transport := "plain TCP"
	if o.ClientTLS != nil {
		client = o.CurrentClientTLS
		if client == nil {
			client = func() *tls.Config { return o.ClientTLS }
		}
		transport = "TLS"
		if o.ServerTLS.ClientAuth == tls.RequireAndVerifyClientCert {
			transport = "mutual TLS"
		}
	}
	n.stream, err = newStreamLayer(self.Raft, o.ServerTLS, client, n.log)
	if err != nil {
		return err
	}
	n.log.Info("cluster: raft transport listening", "addr", n.stream.Addr().String(), "transport", transport)
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: n.stream, MaxPool: 3, Timeout: 2 * o.ElectionTimeout, Logger: hlog,
		ServerAddressProvider: peerAddrs{o},
	})

	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(o.NodeID)
	conf.HeartbeatTimeout = o.HeartbeatTimeout
	conf.ElectionTimeout = o.ElectionTimeout
	conf.LeaderLeaseTimeout = min(o.HeartbeatTimeout, o.Lease)
	// CommitTimeout is how often the leader sends each follower an
	// AppendEntries that carries nothing but its commit index, for
	// followers to learn a commit when no entry follows it. The heartbeats
	// (every HeartbeatTimeout/10) do not carry it. The controller pushes
	// every commit it makes to the followers at once (pushCommit), so this
	// is only the fallback: at raft's default of 50 ms it doubled the
	// messages of an idle cluster (a third of its CPU).
	conf.CommitTimeout = o.HeartbeatTimeout
	// The state is a few hundred bytes: snapshot often, keep a short log.
	conf.SnapshotThreshold = 1024
	conf.TrailingLogs = 1024
	conf.NotifyCh = n.notify
	conf.Logger = hlog
	if err := raft.ValidateConfig(conf); err != nil {
		return fmt.Errorf("%w: raft: %v", ErrOptions, err)
	}
	n.follower = raft.ReloadableConfig{TrailingLogs: conf.TrailingLogs, SnapshotInterval: conf.SnapshotInterval,
		SnapshotThreshold: conf.SnapshotThreshold, HeartbeatTimeout: conf.HeartbeatTimeout, ElectionTimeout: conf.ElectionTimeout}
	n.leading = n.follower
	n.leading.HeartbeatTimeout = leaderHeartbeatFactor * conf.HeartbeatTimeout
	n.leading.ElectionTimeout = max(n.leading.HeartbeatTimeout, conf.ElectionTimeout)
	lc := *conf
	lc.HeartbeatTimeout, lc.ElectionTimeout = n.leading.HeartbeatTimeout, n.leading.ElectionTimeout
	if err := raft.ValidateConfig(&lc); err != nil {
		return fmt.Errorf("%w: raft (leader): %v", ErrOptions, err)
	}

	existing, err := raft.HasExistingState(logs, n.store, snaps)
	if err != nil {
		return fmt.Errorf("cluster: raft state: %w", err)
	}
	n.raft, err = raft.NewRaft(conf, n.fsm, logs, n.store, snaps, n.trans)
	if err != nil {
		return fmt.Errorf("cluster: raft: %w", err)
	}
	if !existing {
		var cfg raft.Configuration
		for _, p := range o.Peers {
			cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter,
				ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Raft)})
		}
		// Several nodes bootstrapping the same set is fine; one that
		// already heard from a leader refuses with ErrCantBootstrap.
		if err := n.raft.BootstrapCluster(cfg).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("cluster: bootstrap: %w", err)
		}
		n.log.Info("cluster: bootstrapped raft", "peers", len(o.Peers))
	} else {
		n.warnPeerDrift()
	}
	return nil
}

// warnPeerDrift logs when the configured peers differ from the raft
// configuration stored in Dir: raft keeps the stored one (membership
// changes are not made from the configuration).
func (n *Node) warnPeerDrift() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	stored := map[string]string{}
	for _, s := range f.Configuration().Servers {
		stored[string(s.ID)] = string(s.Address)
	}
	same := len(stored) == len(n.o.Peers)
	for _, p := range n.o.Peers {
		if stored[p.ID] != p.Raft {
			same = false
		}
	}
	if !same {
		n.log.Warn("cluster: the configured peers differ from the raft membership stored in the cluster directory; the stored one is used",
			"stored", fmt.Sprint(stored))
	}
}

// monitor follows raft's leadership changes: it runs the controller and
// the lease check while this node leads.
func (n *Node) monitor() {
	defer n.wg.Done()
	var stop func()
	for {
		select {
		case leader := <-n.notify:
			if leader && stop == nil {
				n.verified.Store(0)
				n.reloadRaft(n.leading)
				stop = n.lead()
			} else if !leader && stop != nil {
				n.lostAt.Store(time.Now().UnixNano())
				// The follower's timeout again first: raft resets the
				// election timer when it shrinks.
				n.reloadRaft(n.follower)
				stop()
				stop = nil
			}
		case <-n.done:
			if stop != nil {
				stop()
			}
			return
		}
	}
}

// leaderHeartbeatFactor: a leader's raft HeartbeatTimeout is this many
// times the configured one, so that it sends a heartbeat every
// HeartbeatTimeout/5..HeartbeatTimeout/2.5 instead of every
// HeartbeatTimeout/10..HeartbeatTimeout/5. A follower starts an election
// only after a whole (configured) HeartbeatTimeout without any message, so
// at least two heartbeats (and the lease check's, every Lease/4) fall in
// that time. It also doubles the leader's ElectionTimeout when that was
// not above it (raft requires ElectionTimeout >= HeartbeatTimeout), which
// counts only if it stands as a candidate before monitor restores the
// follower's settings.
const leaderHeartbeatFactor = 2

// reloadRaft switches raft's heartbeat and election timeouts (logged if
// raft refuses: Open validated both settings).
func (n *Node) reloadRaft(rc raft.ReloadableConfig) {
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Error("cluster: raft refused its timeouts", "heartbeat", rc.HeartbeatTimeout, "election", rc.ElectionTimeout, "err", err)
	}
}

// lead starts the controller and the lease check; the returned function
// stops both and waits for them.
func (n *Node) lead() func() {
	ctx, cancel := context.WithCancel(context.Background())
	c := newController(n)
	n.ctrlMu.Lock()
	n.ctrl = c
	n.ctrlMu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.run(ctx) }()
	go func() { defer wg.Done(); n.verifyLoop(ctx) }()
	n.log.Info("cluster: raft leader, controller started")
	return func() {
		cancel()
		wg.Wait()
		n.ctrlMu.Lock()
		n.ctrl = nil
		n.ctrlMu.Unlock()
		n.log.Info("cluster: raft leadership lost, controller stopped")
	}
}

// verifyLoop confirms the leadership with a quorum several times per Lease,
// so that LeaseValid on the leader is a load, not a round trip per write.
func (n *Node) verifyLoop(ctx context.Context) {
	period := max(n.o.Lease/4, time.Millisecond)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		start := time.Now()
		if waitFuture(ctx, n.raft.VerifyLeader()) == nil {
			n.verified.Store(start.UnixNano())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pushCommit makes the followers learn the leader's commit index now, so
// that an entry the caller saw committed reaches their States at once
// rather than after CommitTimeout: a barrier is one more entry, and raft
// sends it to every follower with the current commit index. The caller
// does not wait for it (its own commit travels with the next one).
func (n *Node) pushCommit() {
	n.raft.Barrier(n.o.FailAfter)
}

// waitFuture waits for f or ctx. raft v1.7.2 may leave a VerifyLeader
// future unanswered when it shuts down right after the quorum answered; a
// goroutine waits for it so that the caller cannot hang on it.
func waitFuture(ctx context.Context, f raft.Future) error {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// State returns the local FSM's committed state (possibly behind the
// leader's by the entries not yet applied here).
func (n *Node) State() State { return n.fsm.State() }

// MasterEpoch is State's Master and Epoch alone: what a master checks for
// every write, without copying the in-sync set.
func (n *Node) MasterEpoch() (master string, epoch uint64) { return n.fsm.masterEpoch() }

// Changes delivers every applied change of the State, coalesced: a reader
// that falls behind receives the newest state, never an older one after a
// newer. The FSM never waits for the reader.
func (n *Node) Changes() <-chan State { return n.fsm.changes }

// Leader returns the raft leader's id, if one is known.
func (n *Node) Leader() (string, bool) {
	_, id := n.raft.LeaderWithID()
	return string(id), id != ""
}

// LeaseValid reports whether this node heard from a raft quorum within
// Lease: on the leader, a VerifyLeader that started within Lease succeeded;
// on a follower, the leader's last contact (received after this node last
// lost the leadership, if it ever led) is within Lease. A master answers
// writes only while it holds.
func (n *Node) LeaseValid() bool {
	now := time.Now()
	if n.raft.State() == raft.Leader {
		v := n.verified.Load()
		return v != 0 && now.Sub(time.Unix(0, v)) < n.o.Lease
	}
	lc := n.raft.LastContact()
	if lc.IsZero() || lc.UnixNano() <= n.lostAt.Load() {
		return false
	}
	return now.Sub(lc) < n.o.Lease
}

// CaughtUp reports whether this node's State includes every entry the
// cluster had committed when this node last heard from the leader. After a
// start, raft hands the FSM the log it holds as the leader commits it
// again, so the first States a restarted node sees are the past (a master
// it was, an epoch long replaced): a data node must not act on them. Once
// caught up, a node stays so: later States arrive in order, each newer
// than the one before (a node that lost contact is held back by its lease
// instead).
func (n *Node) CaughtUp() bool {
	if n.caughtUp.Load() {
		return true
	}
	if !n.LeaseValid() {
		return false
	}
	commit, applied := n.raft.CommitIndex(), n.raft.AppliedIndex()
	if commit == 0 || applied < commit {
		return false
	}
	// applied counts the entries raft handed to the FSM, some of them
	// perhaps not taken in yet; the FSM sees commands only (not raft's
	// own no-op and configuration entries): the last command at or below
	// applied must be in.
	for i := applied; i > 0 && applied-i < 256; i-- {
		var l raft.Log
		if err := n.store.GetLog(i, &l); err != nil {
			break // compacted: covered by the snapshot the FSM restored
		}
		if l.Type == raft.LogCommand {
			if n.fsm.lastIndex() < i {
				return false
			}
			break
		}
	}
	if n.caughtUp.CompareAndSwap(false, true) {
		n.log.Info("cluster: this node's state has caught up with the cluster's", "index", applied, "version", n.fsm.State().Version)
	}
	return true
}

// Switchover elects target, an eligible ISR member, once its last eventId
// reached the master's; it waits at most until ctx is done or
// SwitchoverWait passed. Only the raft leader serves it: elsewhere it
// returns a *NotLeaderError.
func (n *Node) Switchover(ctx context.Context, target string) error {
	n.ctrlMu.Lock()
	c := n.ctrl
	n.ctrlMu.Unlock()
	if c == nil {
		id, _ := n.Leader()
		return &NotLeaderError{Leader: id}
	}
	ctx, cancel := context.WithTimeout(ctx, n.o.SwitchoverWait)
	defer cancel()
	return c.switchover(ctx, target)
}

// MemberStatus is one configured raft member.
type MemberStatus struct {
	ID, Raft, Addr string
	Voter          bool
}

// ClusterStatus is what Status returns.
type ClusterStatus struct {
	Node       string
	Leader     string // "" if none known
	LeaseValid bool
	State      State
	Members    []MemberStatus
	// Controller is set only on the leader.
	Controller *ControllerStatus
}

// Status describes the cluster as this node sees it.
func (n *Node) Status() ClusterStatus {
	s := ClusterStatus{Node: n.o.NodeID, LeaseValid: n.LeaseValid(), State: n.State()}
	s.Leader, _ = n.Leader()
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			m := MemberStatus{ID: string(srv.ID), Raft: string(srv.Address), Voter: srv.Suffrage == raft.Voter}
			if p, ok := n.o.peer(m.ID); ok {
				m.Addr = p.Addr
			}
			s.Members = append(s.Members, m)
		}
	}
	n.ctrlMu.Lock()
	c := n.ctrl
	n.ctrlMu.Unlock()
	if c != nil {
		cs := c.snapshotStatus()
		s.Controller = &cs
	}
	return s
}

// Close stops the controller and raft and closes the store. The node's
// peers see it as failed.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		// The controller first, while raft still answers its futures.
		close(n.done)
		n.wg.Wait()
		err := n.raft.Shutdown().Error()
		n.closeErr = errors.Join(err, n.closeResources())
	})
	return n.closeErr
}

func (n *Node) closeResources() error {
	var errs []error
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	} else if n.stream != nil {
		errs = append(errs, n.stream.Close())
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: close: %w", err)
	}
	return nil
}
