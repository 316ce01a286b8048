package cluster

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The first master is elected only once every node answered, and it is
// the most advanced one; epoch 1.
func TestBootstrapWaitsForEveryNode(t *testing.T) {
	tc := newTestCluster(t, fastOptions())
	tc.sim.set("a", func(s *simNode) { s.last = 50 })
	tc.sim.set("b", func(s *simNode) { s.last = 100 })
	tc.sim.set("c", func(s *simNode) { s.last = 70; s.hang = true })
	l := tc.leader()
	tc.waitFor(10*time.Second, "the controller waiting for c", func() bool {
		cs := l.Status().Controller
		return cs != nil && strings.Contains(cs.Blocked, "bootstrap: waiting") && strings.Contains(cs.Blocked, "c")
	})
	tc.rounds(3)
	if st := l.State(); st.Epoch != 0 || st.Master != "" {
		t.Fatalf("elected with c not answering: %+v", st)
	}
	tc.sim.set("c", func(s *simNode) { s.hang = false })
	st := tc.waitState(10*time.Second, "the first master", func(st State) bool { return st.Master != "" })
	if st.Master != "b" || st.Epoch != 1 || len(st.ISR) != 0 {
		t.Fatalf("bootstrap state %+v, want master b (the most advanced), epoch 1, empty ISR", st)
	}
	if cs := l.Status().Controller; cs != nil && cs.Blocked != "" {
		t.Fatalf("still blocked after the election: %q", cs.Blocked)
	}
}

// A failed master is replaced by the most advanced reachable eligible ISR
// member, never by a more advanced node outside the ISR; with no eligible
// member reachable nothing changes and Status says why.
func TestFailoverElectsMostAdvancedEligible(t *testing.T) {
	tc := bootstrapped(t, fastOptions(), "a")
	// c leaves the ISR (disconnected from a), then runs ahead of b.
	tc.sim.set("c", func(s *simNode) { s.disconnected = true })
	tc.waitState(10*time.Second, "c out of the ISR", func(st State) bool { _, in := st.Member("c"); return !in })
	tc.sim.set("c", func(s *simNode) { s.last = 500 })
	tc.sim.set("b", func(s *simNode) { s.last = 120 })

	// The master hangs: its probes never answer, the controller cuts them.
	start := time.Now()
	tc.sim.set("a", func(s *simNode) { s.hang = true })
	st := tc.waitState(10*time.Second, "a new master", func(st State) bool { return st.Epoch == 2 })
	took := time.Since(start)
	if st.Master != "b" {
		t.Fatalf("elected %s, want b (c is more advanced but not in the ISR): %+v", st.Master, st)
	}
	if len(st.ISR) != 0 {
		t.Fatalf("ISR after the election %+v, want the old one minus b (empty)", st.ISR)
	}
	if took < tc.opts.FailAfter {
		t.Fatalf("elected after %v, before FailAfter %v", took, tc.opts.FailAfter)
	}
	t.Logf("hung master replaced after %v (FailAfter %v)", took, tc.opts.FailAfter)

	// c catches up with b and rejoins the ISR; then b and c fail: the
	// only eligible member is unreachable; no election, and the reason.
	tc.sim.set("c", func(s *simNode) { s.last, s.disconnected = 120, false })
	tc.waitState(10*time.Second, "c eligible", func(st State) bool { m, _ := st.Member("c"); return m.Eligible })
	tc.sim.set("c", func(s *simNode) { s.down = true })
	tc.sim.set("b", func(s *simNode) { s.down = true })
	var blocked string
	tc.waitFor(10*time.Second, "the controller saying why it does not elect", func() bool {
		for _, n := range tc.nodes {
			if cs := n.Status().Controller; cs != nil && strings.Contains(cs.Blocked, "no eligible ISR member reachable (c unreachable)") {
				blocked = cs.Blocked
				return true
			}
		}
		return false
	})
	t.Logf("blocked: %s", blocked)
	tc.rounds(3)
	for id, n := range tc.nodes {
		if st := n.State(); st.Epoch != 2 || st.Master != "b" {
			t.Fatalf("%s: state changed with nobody eligible: %+v", id, st)
		}
	}
}

// A master that answers its probes but reports itself fenced (its lease
// lost: cut from the consensus, not from the controller) is replaced like
// an unreachable one; one that is fenced for less than FailAfter is not.
func TestFailoverReplacesFencedMaster(t *testing.T) {
	tc := bootstrapped(t, fastOptions(), "a")
	tc.waitState(10*time.Second, "b eligible", func(st State) bool { m, _ := st.Member("b"); return m.Eligible })
	tc.sim.set("a", func(s *simNode) { s.fenced = "lease expired" })
	start := time.Now()
	st := tc.waitState(10*time.Second, "a new master", func(st State) bool { return st.Epoch == 2 })
	if st.Master == "a" {
		t.Fatalf("the fenced master was kept: %+v", st)
	}
	if took := time.Since(start); took < tc.opts.FailAfter {
		t.Fatalf("replaced after %v, before FailAfter %v", took, tc.opts.FailAfter)
	}
}

// An eligible member that is less advanced wins over one that is not
// eligible yet, however advanced.
func TestFailoverSkipsIneligibleMember(t *testing.T) {
	tc := bootstrapped(t, fastOptions(), "a")
	// c's data directory is replaced: it rejoins ineligible (another
	// instance) and is far ahead of b; a's adoption is frozen so that c
	// cannot become eligible.
	st := tc.nodes["a"].State()
	tc.sim.set("a", func(s *simNode) { s.freeze, s.adopted = true, st.Version })
	tc.sim.set("c", func(s *simNode) { s.instance = "00000000cccc" })
	tc.waitState(10*time.Second, "c re-admitted, ineligible", func(st State) bool {
		m, in := st.Member("c")
		return in && m.Instance == "00000000cccc" && !m.Eligible
	})
	tc.sim.set("c", func(s *simNode) { s.last = 900 })
	// b, once master, does not adopt anything either: c stays ineligible.
	tc.sim.set("b", func(s *simNode) { s.freeze, s.adopted = true, 0 })
	tc.sim.set("a", func(s *simNode) { s.down = true })
	st = tc.waitState(10*time.Second, "a new master", func(st State) bool { return st.Epoch == 2 })
	if st.Master != "b" {
		t.Fatalf("elected %s, want b: c is ahead but not eligible: %+v", st.Master, st)
	}
	if m, _ := st.Member("c"); m.Eligible {
		t.Fatalf("c eligible in the new ISR: %+v", st.ISR)
	}
}

// The raft leader that is also the master is killed: the other two elect a
// raft leader and a new master, with the default timings, in a bounded
// time (the design's goal: p99 <= 5 s from fault to a new master).
func TestKillLeaderThatIsMaster(t *testing.T) {
	o := DefaultOptions()
	tc := newTestCluster(t, o)
	for id := range tc.sim.nodes {
		tc.sim.set(id, func(s *simNode) { s.down = true; s.last = 100 })
	}
	l := tc.leader()
	lid := l.o.NodeID
	tc.sim.set(lid, func(s *simNode) { s.last = 101 })
	for id := range tc.sim.nodes {
		tc.sim.set(id, func(s *simNode) { s.down = false })
	}
	tc.waitState(15*time.Second, "the raft leader elected master", func(st State) bool { return st.Master == lid })
	for id := range tc.sim.nodes {
		tc.sim.set(id, func(s *simNode) { s.last = 101 })
	}
	tc.waitState(15*time.Second, "a full eligible ISR", func(st State) bool {
		return len(st.ISR) == 2 && st.ISR[0].Eligible && st.ISR[1].Eligible
	})

	start := time.Now()
	tc.close(lid)
	st := tc.waitState(15*time.Second, "a new master", func(st State) bool { return st.Epoch == 2 })
	took := time.Since(start)
	if st.Master == lid {
		t.Fatalf("re-elected the dead master: %+v", st)
	}
	newLeader := tc.leader()
	t.Logf("killed %s (raft leader and master): raft leader %s, master %s of epoch 2 after %v",
		lid, newLeader.o.NodeID, st.Master, took)
	if took > 5*time.Second {
		t.Fatalf("failover took %v, more than 5 s", took)
	}
}

// The ISR grows in two steps — added ineligible, eligible only once the
// master reported that it adopted the member and the member confirmed the
// commit point — and shrinks, never below MinISR.
func TestISRTwoStepsAndMinISR(t *testing.T) {
	tc := newTestCluster(t, fastOptions())
	tc.sim.set("a", func(s *simNode) { s.last = 200; s.freeze = true; s.adopted = 0 })
	tc.sim.set("b", func(s *simNode) { s.last = 100 })
	tc.sim.set("c", func(s *simNode) { s.last = 100 })
	tc.waitState(10*time.Second, "master a", func(st State) bool { return st.Master == "a" })
	tc.rounds(3)
	if st := tc.nodes["a"].State(); len(st.ISR) != 0 {
		t.Fatalf("admitted below the commit point: %+v", st.ISR)
	}
	// b reaches the commit point: added, not eligible while a has not
	// adopted it.
	tc.sim.set("b", func(s *simNode) { s.last = 200 })
	st := tc.waitState(10*time.Second, "b added", func(st State) bool { _, in := st.Member("b"); return in })
	if m, _ := st.Member("b"); m.Eligible {
		t.Fatalf("b eligible at once: %+v", st.ISR)
	}
	tc.rounds(3)
	if m, _ := tc.nodes["a"].State().Member("b"); m.Eligible {
		t.Fatalf("b eligible before the master adopted it: %+v", m)
	}
	// a adopts it, but committed more than b confirmed: still not.
	added, _ := st.Member("b")
	tc.sim.set("a", func(s *simNode) { s.adopted = added.Added; s.last = 250 })
	tc.rounds(3)
	if m, _ := tc.nodes["a"].State().Member("b"); m.Eligible {
		t.Fatalf("b eligible below the master's commit point: %+v", m)
	}
	tc.sim.set("b", func(s *simNode) { s.last = 250 })
	tc.waitState(10*time.Second, "b eligible", func(st State) bool { m, _ := st.Member("b"); return m.Eligible })

	// c joins too; then both disconnect: c leaves, b stays (MinISR 1).
	tc.sim.set("a", func(s *simNode) { s.freeze = false })
	tc.sim.set("c", func(s *simNode) { s.last = 250 })
	tc.waitState(10*time.Second, "c eligible", func(st State) bool { m, _ := st.Member("c"); return m.Eligible })
	tc.sim.set("b", func(s *simNode) { s.disconnected = true })
	tc.sim.set("c", func(s *simNode) { s.lagMs = 5000 })
	tc.waitState(10*time.Second, "one of b and c removed", func(st State) bool { return len(st.ISR) == 1 })
	l := tc.leader()
	tc.waitFor(10*time.Second, "the MinISR hold reported (or the ISR emptied)", func() bool {
		cs := l.Status().Controller
		return cs != nil && strings.Contains(cs.Blocked, "may not drop below minISR 1") || len(l.State().ISR) == 0
	})
	tc.rounds(3)
	if st := tc.nodes["a"].State(); len(st.ISR) != 1 {
		t.Fatalf("ISR shrunk below MinISR: %+v", st.ISR)
	}
	// c recovers and rejoins; then b, still disconnected, can leave.
	tc.sim.set("c", func(s *simNode) { s.lagMs = 0 })
	st = tc.waitState(10*time.Second, "b out, c back", func(st State) bool {
		_, b := st.Member("b")
		m, c := st.Member("c")
		return !b && c && m.Eligible
	})
	t.Logf("final ISR %s", isrString(st))
}

// A command decided on a state that has changed since is refused by the
// FSM of every node, through the real raft log.
func TestStaleElectRefused(t *testing.T) {
	tc := bootstrapped(t, fastOptions(), "a")
	l := tc.leader()
	st := l.State()
	first := Command{Op: OpElect, Epoch: st.Epoch, Version: st.Version, Node: "b", NewEpoch: st.Epoch + 1}
	second := Command{Op: OpElect, Epoch: st.Epoch, Version: st.Version, Node: "c", NewEpoch: st.Epoch + 1}
	// Two controllers' decisions on the same state: the first wins.
	if err := l.ctrlPropose(first); err != nil {
		t.Fatalf("first elect: %v", err)
	}
	if err := l.ctrlPropose(second); !errors.Is(err, ErrStale) {
		t.Fatalf("second elect on the same state: %v, want ErrStale", err)
	}
	got := tc.waitState(10*time.Second, "b elected everywhere", func(s State) bool { return s.Epoch == st.Epoch+1 })
	if got.Master != "b" {
		t.Fatalf("state %+v, want master b", got)
	}
}

// ctrlPropose applies cmd through raft on the leader as the controller does.
func (n *Node) ctrlPropose(cmd Command) error {
	c := &controller{n: n, o: &n.o}
	return c.propose(context.Background(), cmd)
}

// A node cut from the others loses its lease within Lease (+ a margin for
// raft to notice): the leader and a follower alike.
func TestLeaseLostWhenCut(t *testing.T) {
	for _, role := range []string{"leader", "follower"} {
		t.Run(role, func(t *testing.T) {
			tc := newTestCluster(t, fastOptions())
			l := tc.leader()
			n := l
			if role == "follower" {
				for _, m := range tc.nodes {
					if m != l {
						n = m
						break
					}
				}
			}
			tc.waitFor(10*time.Second, "every lease valid", func() bool {
				for _, m := range tc.nodes {
					if !m.LeaseValid() {
						return false
					}
				}
				return true
			})
			start := time.Now()
			n.stream.setCut(true)
			bound := tc.opts.Lease + tc.opts.HeartbeatTimeout
			tc.waitFor(bound+time.Second, "the lease lost", func() bool { return !n.LeaseValid() })
			took := time.Since(start)
			t.Logf("%s cut: lease lost after %v (Lease %v)", role, took, tc.opts.Lease)
			if took > bound {
				t.Fatalf("lease held %v after the cut, more than Lease+HeartbeatTimeout %v", took, bound)
			}
			// The others keep (or regain) a valid lease; the cut node
			// recovers once the cut is mended.
			tc.waitFor(10*time.Second, "a lease among the others", func() bool {
				for _, m := range tc.nodes {
					if m != n && m.LeaseValid() {
						return true
					}
				}
				return false
			})
			n.stream.setCut(false)
			tc.waitFor(10*time.Second, "the lease back", n.LeaseValid)
		})
	}
}

// A node restarted on its directory has the state, from its own store (a
// snapshot and the log), and so has a whole cluster restarted: no new
// bootstrap election.
func TestRestartKeepsState(t *testing.T) {
	tc := bootstrapped(t, fastOptions(), "b")
	want := tc.nodes["b"].State()
	// c snapshots: its restart restores the snapshot file.
	if err := tc.nodes["c"].raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	// Only c's raft node restarts: its data node stays up (the sim keeps
	// answering for it), so that nothing changes the state meanwhile.
	if err := tc.nodes["c"].Close(); err != nil {
		t.Fatal(err)
	}
	c := tc.open("c")
	tc.waitFor(10*time.Second, "c's state back", func() bool { return reflect.DeepEqual(c.State(), want) })

	for _, id := range []string{"a", "b", "c"} {
		tc.close(id)
	}
	for _, id := range []string{"a", "b", "c"} {
		tc.sim.set(id, func(s *simNode) { s.down = false })
	}
	for _, id := range []string{"a", "b", "c"} {
		tc.open(id)
	}
	l := tc.leader()
	tc.waitState(10*time.Second, "the state after the restart", func(s State) bool { return reflect.DeepEqual(s, want) })
	tc.waitFor(10*time.Second, "a controller round with every node", func() bool {
		cs := l.Status().Controller
		if cs == nil {
			return false
		}
		for _, np := range cs.Nodes {
			if !np.OK {
				return false
			}
		}
		return true
	})
	tc.rounds(3)
	for id, n := range tc.nodes {
		if st := n.State(); st.Epoch != want.Epoch || st.Master != want.Master {
			t.Fatalf("%s after the restart: %+v, want %+v", id, st, want)
		}
	}
	if strings.Contains(tc.logs.String(), "differ from the raft membership") {
		t.Fatal("peer drift reported for unchanged peers")
	}
}

// A node restarted with other peers than its stored raft membership keeps
// the stored one and says so.
func TestPeerDriftLogged(t *testing.T) {
	tc := bootstrapped(t, fastOptions(), "a")
	if err := tc.nodes["c"].Close(); err != nil {
		t.Fatal(err)
	}
	tc.peers[0].Raft = freePort(t) // a "moved"
	c := tc.open("c")
	if !strings.Contains(tc.logs.String(), "differ from the raft membership") {
		t.Fatal("peer drift not logged")
	}
	for _, m := range c.Status().Members {
		if m.ID == "a" && m.Raft == tc.peers[0].Raft {
			t.Fatalf("the configured address replaced the stored one: %+v", m)
		}
	}
}

// Switchover elects an eligible member once it caught up; it refuses a
// member that is not eligible, and a node that does not lead.
func TestSwitchover(t *testing.T) {
	tc := bootstrapped(t, fastOptions(), "a")
	l := tc.leader()
	for _, n := range tc.nodes {
		if n == l {
			continue
		}
		err := n.Switchover(context.Background(), "b")
		var nl *NotLeaderError
		if !errors.Is(err, ErrNotLeader) || !errors.As(err, &nl) || nl.Leader != l.o.NodeID {
			t.Fatalf("switchover on a follower: %v, want ErrNotLeader naming %s", err, l.o.NodeID)
		}
	}
	// c leaves the ISR: not a switchover target.
	tc.sim.set("c", func(s *simNode) { s.disconnected = true })
	tc.waitState(10*time.Second, "c out of the ISR", func(st State) bool { _, in := st.Member("c"); return !in })
	if err := l.Switchover(context.Background(), "c"); !errors.Is(err, ErrNotEligible) {
		t.Fatalf("switchover to c: %v, want ErrNotEligible", err)
	}
	if err := l.Switchover(context.Background(), "a"); !errors.Is(err, ErrSwitchover) {
		t.Fatalf("switchover to the master: %v", err)
	}
	// b behind the master: a short wait fails, and nothing changes.
	tc.sim.set("a", func(s *simNode) { s.last = 150; s.commit = 100 })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := l.Switchover(ctx, "b")
	cancel()
	if !errors.Is(err, ErrSwitchover) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("switchover to a lagging b: %v", err)
	}
	if st := l.State(); st.Master != "a" || st.Epoch != 1 {
		t.Fatalf("state changed by a failed switchover: %+v", st)
	}
	// b catches up while the switchover waits.
	done := make(chan error, 1)
	go func() { done <- l.Switchover(context.Background(), "b") }()
	tc.rounds(2)
	tc.sim.set("b", func(s *simNode) { s.last = 150 })
	if err := <-done; err != nil {
		t.Fatalf("switchover to b: %v", err)
	}
	st := tc.waitState(10*time.Second, "b master everywhere", func(st State) bool { return st.Master == "b" })
	if st.Epoch != 2 {
		t.Fatalf("switchover state %+v, want epoch 2", st)
	}
}

// Status lists the members with their addresses, the leader and, on the
// leader, each node's last report.
func TestStatus(t *testing.T) {
	tc := bootstrapped(t, fastOptions(), "a")
	l := tc.leader()
	s := l.Status()
	if s.Leader != l.o.NodeID || !s.LeaseValid || s.State.Master != "a" || len(s.Members) != 3 {
		t.Fatalf("status %+v", s)
	}
	for _, m := range s.Members {
		if !m.Voter || m.Addr != "sim-"+m.ID || m.Raft == "" {
			t.Fatalf("member %+v", m)
		}
	}
	if s.Controller == nil || len(s.Controller.Nodes) != 3 {
		t.Fatalf("controller status %+v", s.Controller)
	}
	for _, np := range s.Controller.Nodes {
		if !np.OK || np.Age < 0 || np.Report.Instance == "" {
			t.Fatalf("node probe %+v", np)
		}
	}
	for _, n := range tc.nodes {
		if n != l && n.Status().Controller != nil {
			t.Fatal("a follower reports a controller")
		}
	}
	if l.raft.State() != raft.Leader {
		t.Fatal("leader is not raft leader")
	}
}

// A node restarted alone holds the past (here the snapshot it took before
// a failover): it is not caught up, so a data node does not act on that
// state, until it heard from a leader and took in every committed entry.
func TestCaughtUpAfterRestart(t *testing.T) {
	tc := bootstrapped(t, fastOptions(), "b")
	tc.waitState(10*time.Second, "a and c eligible", func(st State) bool {
		ma, _ := st.Member("a")
		mc, _ := st.Member("c")
		return ma.Eligible && mc.Eligible
	})
	if err := tc.nodes["a"].raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	past := tc.nodes["a"].State()
	tc.sim.set("b", func(s *simNode) { s.down = true })
	want := tc.waitState(10*time.Second, "a new master", func(st State) bool { return st.Epoch > past.Epoch })
	tc.waitFor(10*time.Second, "every node has the new state", func() bool {
		for _, n := range tc.nodes {
			if n.State().Epoch != want.Epoch {
				return false
			}
		}
		return true
	})
	for _, id := range []string{"a", "b", "c"} {
		if n := tc.nodes[id]; !n.CaughtUp() {
			t.Fatalf("%s is not caught up in a running cluster", id)
		}
		tc.close(id)
	}
	a := tc.open("a")
	if st := a.State(); st.Epoch != past.Epoch {
		t.Fatalf("a restarted alone holds epoch %d, want the snapshot's %d", st.Epoch, past.Epoch)
	}
	// It campaigns and hears from nobody: still the past.
	tc.waitFor(10*time.Second, "a campaigning", func() bool { return a.raft.State() == raft.Candidate })
	if a.CaughtUp() {
		t.Fatalf("a restarted alone, holding epoch %d of the past, says it caught up", a.State().Epoch)
	}
	for _, id := range []string{"b", "c"} {
		tc.sim.set(id, func(s *simNode) { s.down = false })
		tc.open(id)
	}
	tc.waitFor(10*time.Second, "a caught up", a.CaughtUp)
	if st := a.State(); st.Epoch < want.Epoch {
		t.Fatalf("a caught up at epoch %d, the cluster had %d", st.Epoch, want.Epoch)
	}
}

// A committed command reaches every follower's State within a round trip,
// not after raft's CommitTimeout (HeartbeatTimeout here: 1 s or more
// between the appends that carry only a commit index): the controller
// pushes each commit (pushCommit). Three elections, so that a commit-only
// append falling just after the command cannot pass the test by luck.
func TestFollowersLearnCommitsAtOnce(t *testing.T) {
	o := fastOptions()
	o.HeartbeatTimeout, o.ElectionTimeout = time.Second, time.Second
	o.Lease, o.FailAfter = time.Second, 2*time.Second
	tc := bootstrapped(t, o, "a")
	l := tc.leader()
	for _, target := range []string{"b", "c", "a"} {
		st := l.State()
		cmd := Command{Op: OpElect, Epoch: st.Epoch, Version: st.Version, Node: target, NewEpoch: st.Epoch + 1}
		start := time.Now()
		if err := l.ctrlPropose(cmd); err != nil {
			t.Fatalf("elect %s: %v", target, err)
		}
		tc.waitState(5*time.Second, target+" elected everywhere", func(s State) bool { return s.Epoch == st.Epoch+1 })
		if took := time.Since(start); took > 400*time.Millisecond {
			t.Fatalf("the followers learnt the election of %s %v after it was proposed, want < 400ms (CommitTimeout is %v)", target, took, o.HeartbeatTimeout)
		}
		// The next target must be an eligible member again.
		tc.waitState(10*time.Second, "a full, eligible ISR", func(st State) bool {
			n := 0
			for _, m := range st.ISR {
				if m.Eligible {
					n++
				}
			}
			return n == 2
		})
	}
}

// The raft leader spaces its heartbeats (leaderHeartbeatFactor times the
// configured timeout) and a node that stops leading takes the configured
// timeouts again; followers keep them throughout.
func TestLeaderSpacesHeartbeats(t *testing.T) {
	o := fastOptions()
	tc := bootstrapped(t, o, "a")
	l := tc.leader()
	check := func(what string) {
		t.Helper()
		for id, n := range tc.nodes {
			want := o.HeartbeatTimeout
			if n == l {
				want = leaderHeartbeatFactor * o.HeartbeatTimeout
			}
			if got := n.raft.ReloadableConfig().HeartbeatTimeout; got != want {
				t.Fatalf("%s: %s (leader %s) has raft HeartbeatTimeout %v, want %v", what, id, l.o.NodeID, got, want)
			}
		}
	}
	tc.waitFor(5*time.Second, "the leader's settings", func() bool {
		return l.raft.ReloadableConfig().HeartbeatTimeout == leaderHeartbeatFactor*o.HeartbeatTimeout
	})
	check("first leader")
	old := l
	if err := old.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	tc.waitFor(10*time.Second, "another leader", func() bool {
		id, ok := old.Leader()
		return ok && id != old.o.NodeID
	})
	l = tc.leader()
	tc.waitFor(5*time.Second, "the settings of the new leader and of the old one", func() bool {
		return l.raft.ReloadableConfig().HeartbeatTimeout == leaderHeartbeatFactor*o.HeartbeatTimeout &&
			old.raft.ReloadableConfig().HeartbeatTimeout == o.HeartbeatTimeout
	})
	check("after a leadership transfer")
}
