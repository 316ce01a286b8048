package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

// fastOptions: timings short enough for tests on loopback, in the ratios
// of the defaults (FailAfter > Lease > HeartbeatTimeout).
func fastOptions() Options {
	o := DefaultOptions()
	o.HeartbeatTimeout = 200 * time.Millisecond
	o.ElectionTimeout = 200 * time.Millisecond
	o.Lease = 400 * time.Millisecond
	o.FailAfter = 800 * time.Millisecond
	o.ProbeInterval = 40 * time.Millisecond
	o.ProbeTimeout = 150 * time.Millisecond
	o.ISRLag = 200 * time.Millisecond
	o.SwitchoverWait = 5 * time.Second
	return o
}

// simNode is one simulated data node as the fake prober reports it. Its
// role and epoch follow its own cluster.Node's state, as a real data node
// in -role auto would.
type simNode struct {
	down bool  // probes fail at once
	hang bool  // probes never answer (until the test ends)
	last int64 // LastEventID; as a slave, also its confirmed eventId
	// instance is its data directory's id.
	instance string
	// As a slave, seen by the master:
	disconnected bool
	lagMs        int64
	// As master: commit (0: last) and, if freeze, adopted is reported
	// instead of the state's Version.
	commit  int64
	freeze  bool
	adopted uint64
	// fenced, as master: the reason it reports for refusing writes.
	fenced string
}

// sim is the fake Prober: every simulated node, driven by the test.
type sim struct {
	mu      sync.Mutex
	nodes   map[string]*simNode
	cl      map[string]*Node
	probes  map[string]int
	release chan struct{}
}

func newSim(ids ...string) *sim {
	s := &sim{nodes: map[string]*simNode{}, cl: map[string]*Node{}, probes: map[string]int{}, release: make(chan struct{})}
	for i, id := range ids {
		s.nodes[id] = &simNode{instance: fmt.Sprintf("%012x", 0xa0+i)}
	}
	return s
}

// set changes node id under the lock.
func (s *sim) set(id string, f func(*simNode)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.nodes[id])
}

func (s *sim) probeCount(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probes[id]
}

func (s *sim) Probe(ctx context.Context, p Peer) (Report, error) {
	s.mu.Lock()
	s.probes[p.ID]++
	sn := *s.nodes[p.ID]
	n := s.cl[p.ID]
	others := map[string]simNode{}
	for id, o := range s.nodes {
		if id != p.ID {
			others[id] = *o
		}
	}
	s.mu.Unlock()
	if sn.hang {
		<-s.release // ignores ctx on purpose: the controller must cut it
		return Report{}, errors.New("released")
	}
	if sn.down || n == nil {
		return Report{}, fmt.Errorf("dial %s: connection refused", p.Addr)
	}
	st := n.State()
	r := Report{Role: RoleSlave, Epoch: st.Epoch, LastEventID: sn.last, Instance: sn.instance}
	if st.Master == p.ID {
		r.Role = RoleMaster
		r.CommitPoint = sn.last
		if sn.commit != 0 {
			r.CommitPoint = sn.commit
		}
		r.AdoptedVersion = st.Version
		r.Fenced = sn.fenced
		if sn.freeze {
			r.AdoptedVersion = sn.adopted
		}
		ids := make([]string, 0, len(others))
		for id := range others {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			o := others[id]
			if o.down || o.hang {
				continue
			}
			r.Slaves = append(r.Slaves, SlaveReport{Instance: o.instance, Connected: !o.disconnected,
				Confirmed: o.last, LagMs: o.lagMs})
		}
	}
	return r, nil
}

// testCluster is three (or more) Nodes on loopback, each in its own
// directory.
type testCluster struct {
	t     *testing.T
	sim   *sim
	opts  Options
	tweak func(id string, o *Options)
	peers []Peer
	dirs  map[string]string
	nodes map[string]*Node
	logs  *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freePort is a loopback address on a port reserved for this test process.
func freePort(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(smsstest.FreePort(t)))
}

// newTestCluster opens nodes a, b, c (unless the sim marks them down, the
// fake data nodes answer at once).
func newTestCluster(t *testing.T, opts Options, ids ...string) *testCluster {
	t.Helper()
	return newTestClusterWith(t, opts, nil, ids...)
}

// newTestClusterWith is newTestCluster with tweak applied to each node's
// options before it opens.
func newTestClusterWith(t *testing.T, opts Options, tweak func(id string, o *Options), ids ...string) *testCluster {
	t.Helper()
	if len(ids) == 0 {
		ids = []string{"a", "b", "c"}
	}
	tc := &testCluster{t: t, sim: newSim(ids...), opts: opts, tweak: tweak, dirs: map[string]string{},
		nodes: map[string]*Node{}, logs: &lockedBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs:\n%s", tc.logs.String())
		}
	})
	for _, id := range ids {
		tc.peers = append(tc.peers, Peer{ID: id, Raft: freePort(t), Addr: "sim-" + id})
		tc.dirs[id] = filepath.Join(t.TempDir(), id)
	}
	t.Cleanup(func() {
		close(tc.sim.release)
		for _, n := range tc.nodes {
			n.Close()
		}
	})
	for _, id := range ids {
		tc.open(id)
	}
	return tc
}

func (tc *testCluster) open(id string) *Node {
	tc.t.Helper()
	o := tc.opts
	o.NodeID, o.Peers, o.Dir, o.Prober = id, tc.peers, tc.dirs[id], tc.sim
	o.Logger = slog.New(slog.NewTextHandler(tc.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test-node", id)
	if tc.tweak != nil {
		tc.tweak(id, &o)
	}
	n, err := Open(o)
	if err != nil {
		tc.t.Fatalf("open %s: %v", id, err)
	}
	tc.nodes[id] = n
	tc.sim.mu.Lock()
	tc.sim.cl[id] = n
	tc.sim.mu.Unlock()
	return n
}

// close closes node id and marks its data node down.
func (tc *testCluster) close(id string) {
	tc.t.Helper()
	tc.sim.set(id, func(s *simNode) { s.down = true })
	if err := tc.nodes[id].Close(); err != nil {
		tc.t.Fatalf("close %s: %v", id, err)
	}
	delete(tc.nodes, id)
}

// waitFor polls cond until it holds or d passes.
func (tc *testCluster) waitFor(d time.Duration, what string, cond func() bool) {
	tc.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tc.t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leader waits for a raft leader among the open nodes and returns it.
func (tc *testCluster) leader() *Node {
	tc.t.Helper()
	var l *Node
	tc.waitFor(10*time.Second, "a raft leader with its controller", func() bool {
		for _, n := range tc.nodes {
			if id, ok := n.Leader(); ok && id == n.o.NodeID && n.Status().Controller != nil {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

// waitState waits until every open node's state satisfies cond.
func (tc *testCluster) waitState(d time.Duration, what string, cond func(State) bool) State {
	tc.t.Helper()
	var st State
	tc.waitFor(d, what, func() bool {
		for _, n := range tc.nodes {
			st = n.State()
			if !cond(st) {
				return false
			}
		}
		return true
	})
	return st
}

// rounds waits until every open node was probed n more times.
func (tc *testCluster) rounds(n int) {
	tc.t.Helper()
	start := map[string]int{}
	for id := range tc.sim.nodes {
		start[id] = tc.sim.probeCount(id)
	}
	tc.waitFor(10*time.Second, fmt.Sprintf("%d probe rounds", n), func() bool {
		for id := range tc.sim.nodes {
			if tc.sim.probeCount(id) < start[id]+n {
				return false
			}
		}
		return true
	})
}

func isrString(st State) string {
	var b bytes.Buffer
	for _, m := range st.ISR {
		fmt.Fprintf(&b, "%s", m.Node)
		if m.Eligible {
			b.WriteString("*")
		}
		b.WriteString(" ")
	}
	return b.String()
}

// bootstrapped opens a cluster and waits for the first master, master, the
// most advanced node, and for every other node eligible in its ISR.
func bootstrapped(t *testing.T, opts Options, master string) *testCluster {
	t.Helper()
	tc := newTestCluster(t, opts)
	for id := range tc.sim.nodes {
		tc.sim.set(id, func(s *simNode) { s.last = 100 })
	}
	tc.sim.set(master, func(s *simNode) { s.last = 101 })
	tc.waitState(10*time.Second, "master "+master, func(st State) bool { return st.Master == master && st.Epoch == 1 })
	tc.sim.set(master, func(s *simNode) { s.last = 100 })
	want := len(tc.sim.nodes) - 1
	tc.waitState(10*time.Second, "a full, eligible ISR", func(st State) bool {
		n := 0
		for _, m := range st.ISR {
			if m.Eligible {
				n++
			}
		}
		return n == want
	})
	return tc
}
