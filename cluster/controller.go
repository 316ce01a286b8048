package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// controller is the failure detector and elector. One runs on the raft
// leader, from the moment it becomes leader to the moment it stops being
// one; every event goes through the one select of run, so its fields need
// no lock (but the status it publishes for Status()).
type controller struct {
	n   *Node
	o   *Options
	log *slog.Logger

	since   time.Time // when this controller took over (after the barrier)
	results chan probeResult
	round   int
	pending int
	cur     map[string]probe // the latest completed round, per node
	good    map[string]probe // the last successful probe, per node

	// Failure detection: when the master of badEpoch was first seen
	// unhealthy (zero: healthy), and when each ISR member (node/instance)
	// was first seen out of sync.
	badSince  time.Time
	badEpoch  uint64
	memberBad map[string]time.Time

	blocked  string // why the controller does not act (logged on change)
	applying bool
	applied  chan applyResult
	switchCh chan *switchReq
	stopped  chan struct{} // closed when run returns
	sw       *switchReq    // the pending switchover
	answer   chan error    // the switchover's answer, when decide elects its target

	statusMu sync.Mutex
	status   ControllerStatus
}

type probe struct {
	ok   bool
	rep  Report
	err  error
	sent time.Time // when it was sent
	at   time.Time // when the answer (or the timeout) came
}

type probeResult struct {
	round int
	id    string
	probe
}

type applyResult struct {
	cmd Command
	err error
}

type switchReq struct {
	ctx    context.Context
	target string
	resp   chan error // buffered: the controller never waits on it
}

// ControllerStatus is the controller's view, in ClusterStatus on the
// leader.
type ControllerStatus struct {
	Since time.Time // when this node's controller took over
	// Blocked says why the controller does not act ("" when nothing is
	// held back): no eligible ISR member reachable, bootstrap waiting for
	// nodes, an ISR shrink held back by MinISR.
	Blocked string
	Nodes   []NodeProbe
}

// NodeProbe is the controller's last knowledge of one node.
type NodeProbe struct {
	ID string
	// OK: the latest probe answered. Err is the latest failure.
	OK  bool
	Err string
	// Report is the last good report, At when it came and Age how old it
	// is when Status was called (-1: none yet).
	Report Report
	At     time.Time
	Age    time.Duration
}

// ErrNotEligible is wrapped by Switchover's refusal of a target that is not
// an eligible ISR member.
var ErrNotEligible = errors.New("cluster: not an eligible ISR member")

func newController(n *Node) *controller {
	return &controller{
		n: n, o: &n.o, log: n.log,
		results:   make(chan probeResult, len(n.o.Peers)),
		cur:       map[string]probe{},
		good:      map[string]probe{},
		memberBad: map[string]time.Time{},
		applied:   make(chan applyResult, 1),
		switchCh:  make(chan *switchReq),
		stopped:   make(chan struct{}),
	}
}

func (c *controller) run(ctx context.Context) {
	defer close(c.stopped)
	// Act only on a state that includes every entry committed by earlier
	// leaders: the barrier returns once the FSM applied them all.
	for waitFuture(ctx, c.n.raft.Barrier(c.o.FailAfter)) != nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.o.ProbeInterval):
		}
	}
	// The followers learn that every earlier entry is committed (a
	// restarted cluster's nodes act only once they know it: CaughtUp).
	go c.n.pushCommit()
	c.since = time.Now()
	c.publishStatus()
	tick := time.NewTicker(c.o.ProbeInterval)
	defer tick.Stop()
	c.startRound(ctx)
	for {
		select {
		case <-ctx.Done():
			if c.sw != nil {
				c.sw.resp <- &NotLeaderError{}
			}
			return
		case <-tick.C:
			if c.pending == 0 {
				c.startRound(ctx)
			}
		case r := <-c.results:
			if r.round != c.round {
				continue
			}
			c.cur[r.id] = r.probe
			if r.ok {
				c.good[r.id] = r.probe
			}
			if c.pending--; c.pending == 0 {
				c.evaluate(ctx)
				c.publishStatus()
			}
		case a := <-c.applied:
			c.applying = false
			if a.err != nil {
				c.log.Warn("cluster: command not applied", "op", a.cmd.Op, "node", a.cmd.Node, "err", a.err)
			} else {
				c.log.Info("cluster: command applied", "op", a.cmd.Op, "node", a.cmd.Node, "reason", a.cmd.Reason)
			}
		case req := <-c.switchCh:
			if err := c.acceptSwitchover(req); err != nil {
				req.resp <- err
			}
		}
	}
}

// startRound probes every peer at once; each answer, or its timeout, comes
// back on c.results within ProbeTimeout, whatever the Prober does.
func (c *controller) startRound(ctx context.Context) {
	c.round++
	c.pending = len(c.o.Peers)
	for _, p := range c.o.Peers {
		go func(round int, p Peer) {
			sent := time.Now()
			pctx, cancel := context.WithTimeout(ctx, c.o.ProbeTimeout)
			defer cancel()
			ch := make(chan probe, 1)
			go func() {
				rep, err := c.o.Prober.Probe(pctx, p)
				ch <- probe{ok: err == nil, rep: rep, err: err}
			}()
			var r probe
			select {
			case r = <-ch:
			case <-pctx.Done():
				r = probe{err: fmt.Errorf("probe of %s: no answer within %v", p.ID, c.o.ProbeTimeout)}
			}
			r.sent, r.at = sent, time.Now()
			select {
			case c.results <- probeResult{round: round, id: p.ID, probe: r}:
			case <-ctx.Done():
			}
		}(c.round, p)
	}
}

// evaluate takes at most one decision per round, on the local state (which
// is the committed one: this node leads and passed the barrier), and
// applies it asynchronously; the next round sees its effect.
func (c *controller) evaluate(ctx context.Context) {
	if c.applying {
		return
	}
	st := c.n.fsm.State()
	now := time.Now()
	var notes []string
	cmd := c.decide(st, now, &notes)
	c.setBlocked(strings.Join(notes, "; "))
	if cmd != nil {
		c.apply(ctx, *cmd, c.answer)
	}
	c.answer = nil
}

// decide returns the command to apply now, if any, and adds to notes the
// reasons it holds something back. Priority: election, switchover, ISR
// shrink, eligibility, ISR expansion.
func (c *controller) decide(st State, now time.Time, notes *[]string) *Command {
	if st.Master == "" {
		return c.bootstrap(st, notes)
	}
	if st.Epoch != c.badEpoch {
		// A new master gets FailAfter of its own to take over, and its
		// slaves ISRLag of their own to connect to it.
		c.badEpoch, c.badSince = st.Epoch, time.Time{}
		clear(c.memberBad)
	}
	healthy, why := c.masterHealth(st)
	if !healthy {
		if c.badSince.IsZero() {
			// Unhealthy since the probe that found it was sent: a frozen
			// master's probe takes ProbeTimeout to fail, and that time
			// counts (Options requires FailAfter > Lease + ProbeTimeout,
			// so the old master's lease has still expired first).
			c.badSince = c.cur[st.Master].sent
			if c.badSince.IsZero() || c.badSince.After(now) {
				c.badSince = now
			}
			c.log.Warn("cluster: master unhealthy", "master", st.Master, "epoch", st.Epoch, "why", why)
		}
		if d := now.Sub(c.badSince); d >= c.o.FailAfter {
			return c.failover(st, fmt.Sprintf("master %s %s for %v", st.Master, why, d.Round(time.Millisecond)), notes)
		}
		return nil
	}
	if !c.badSince.IsZero() {
		c.log.Info("cluster: master healthy again", "master", st.Master, "epoch", st.Epoch)
		c.badSince = time.Time{}
	}
	mr := c.cur[st.Master].rep
	if cmd := c.trySwitchover(st, mr); cmd != nil {
		return cmd
	}
	return c.maintainISR(st, mr, now, notes)
}

// masterHealth: the master answered, reports itself master of the current
// epoch and does not refuse writes as fenced. A master fenced for a moment
// (its lease renewed late, the epoch being taken) recovers well within
// FailAfter; one cut from the majority stays fenced and is replaced.
func (c *controller) masterHealth(st State) (bool, string) {
	p := c.cur[st.Master]
	switch {
	case !p.ok:
		return false, fmt.Sprintf("unreachable (%v)", p.err)
	case p.rep.Role != RoleMaster:
		return false, fmt.Sprintf("reports role %q", p.rep.Role)
	case p.rep.Epoch != st.Epoch:
		return false, fmt.Sprintf("reports epoch %d, not %d", p.rep.Epoch, st.Epoch)
	case p.rep.Fenced != "":
		return false, fmt.Sprintf("reports itself fenced (%s)", p.rep.Fenced)
	}
	return true, ""
}

// bootstrap elects the first master once every node answered: the one with
// the highest last eventId (tie: lowest id), so that the master of an
// upgraded master/slave set keeps its data.
func (c *controller) bootstrap(st State, notes *[]string) *Command {
	var missing []string
	var cands []candidate
	for _, p := range c.o.Peers {
		pr := c.cur[p.ID]
		if !pr.ok {
			missing = append(missing, p.ID)
			continue
		}
		cands = append(cands, candidate{id: p.ID, rep: pr.rep, eligible: true})
	}
	if len(missing) > 0 {
		*notes = append(*notes, "bootstrap: waiting for every node to answer (not yet: "+strings.Join(missing, ", ")+")")
		return nil
	}
	best := choose(cands)
	return c.elect(st, best, cands, "bootstrap: every node answered, the most advanced is elected")
}

type candidate struct {
	id       string
	rep      Report
	eligible bool
	why      string // why not eligible
}

// choose returns the eligible candidate with the highest LastEventID, the
// lowest id among equals; nil if none is eligible.
func choose(cands []candidate) *candidate {
	var best *candidate
	for i := range cands {
		k := &cands[i]
		if !k.eligible {
			continue
		}
		if best == nil || k.rep.LastEventID > best.rep.LastEventID ||
			k.rep.LastEventID == best.rep.LastEventID && k.id < best.id {
			best = k
		}
	}
	return best
}

// candidates lists the ISR members (all of them, eligible or not, for the
// log) with the reason each could not be elected.
func (c *controller) candidates(st State) []candidate {
	var out []candidate
	for _, m := range st.ISR {
		p := c.cur[m.Node]
		k := candidate{id: m.Node, rep: p.rep}
		switch {
		case !m.Eligible:
			k.why = "not eligible yet"
		case !p.ok:
			k.why = "unreachable"
		case p.rep.Instance != m.Instance:
			k.why = fmt.Sprintf("instance %s, not the member's %s", p.rep.Instance, m.Instance)
		default:
			k.eligible = true
		}
		out = append(out, k)
	}
	return out
}

func (c *controller) failover(st State, reason string, notes *[]string) *Command {
	cands := c.candidates(st)
	best := choose(cands)
	if best == nil {
		why := "no ISR member"
		if len(cands) > 0 {
			var parts []string
			for _, k := range cands {
				parts = append(parts, k.id+" "+k.why)
			}
			why = strings.Join(parts, ", ")
		}
		*notes = append(*notes, fmt.Sprintf("master %s of epoch %d failed, no eligible ISR member reachable (%s): no election",
			st.Master, st.Epoch, why))
		return nil
	}
	return c.elect(st, best, cands, reason)
}

// elect builds the Elect of best, with an epoch above every epoch known
// (the state's and every node's report), and logs the decision.
func (c *controller) elect(st State, best *candidate, cands []candidate, reason string) *Command {
	next := st.Epoch
	for _, p := range c.cur {
		if p.ok {
			next = max(next, p.rep.Epoch)
		}
	}
	next++
	var pos []string
	for _, k := range cands {
		s := fmt.Sprintf("%s=%d", k.id, k.rep.LastEventID)
		if !k.eligible {
			s += " (" + k.why + ")"
		}
		pos = append(pos, s)
	}
	c.log.Warn("cluster: electing a master", "reason", reason, "chosen", best.id,
		"lastEventId", best.rep.LastEventID, "epoch", next, "candidates", strings.Join(pos, ", "))
	return &Command{Op: OpElect, Epoch: st.Epoch, Version: st.Version, Node: best.id, NewEpoch: next,
		Reason: fmt.Sprintf("%s; elected %s at eventId %d", reason, best.id, best.rep.LastEventID)}
}

// maintainISR shrinks and expands the ISR from a healthy master's report.
func (c *controller) maintainISR(st State, mr Report, now time.Time, notes *[]string) *Command {
	slaves := map[string]SlaveReport{}
	for _, s := range mr.Slaves {
		slaves[s.Instance] = s
	}
	lag := c.o.ISRLag.Milliseconds()
	// Shrink: disconnected for ISRLag, or a write unconfirmed for ISRLag.
	for _, m := range st.ISR {
		key := m.Node + "/" + m.Instance
		s, found := slaves[m.Instance]
		var why string
		switch {
		case !found || !s.Connected:
			if c.memberBad[key].IsZero() {
				c.memberBad[key] = now
			}
			if d := now.Sub(c.memberBad[key]); d >= c.o.ISRLag {
				why = fmt.Sprintf("disconnected from master %s for %v", st.Master, d.Round(time.Millisecond))
			}
		case s.LagMs >= lag:
			why = fmt.Sprintf("an unconfirmed write %d ms old", s.LagMs)
		default:
			delete(c.memberBad, key)
		}
		if why == "" {
			continue
		}
		if len(st.ISR)-1 < c.o.MinISR {
			*notes = append(*notes, fmt.Sprintf("ISR member %s out of sync but kept: the ISR may not drop below minISR %d", m.Node, c.o.MinISR))
			continue
		}
		delete(c.memberBad, key)
		return &Command{Op: OpISRRemove, Epoch: st.Epoch, Version: st.Version, Node: m.Node,
			Reason: fmt.Sprintf("%s left the ISR: %s", m.Node, why)}
	}
	// Eligibility, the second step of a join: the master enforces the
	// member (it adopted the ISR that holds it) and the member confirmed
	// every write acknowledged before that.
	for _, m := range st.ISR {
		s, found := slaves[m.Instance]
		if m.Eligible || !found || !s.Connected {
			continue
		}
		if mr.AdoptedVersion >= m.Added && s.Confirmed >= mr.CommitPoint {
			return &Command{Op: OpMarkEligible, Epoch: st.Epoch, Version: st.Version, Node: m.Node, AfterVersion: m.Added,
				Reason: fmt.Sprintf("%s eligible: master adopted version %d >= %d, confirmed %d >= commit point %d",
					m.Node, mr.AdoptedVersion, m.Added, s.Confirmed, mr.CommitPoint)}
		}
	}
	// Expansion, the first step: a slave that confirmed the commit point.
	for _, p := range c.o.Peers {
		pr := c.cur[p.ID]
		if p.ID == st.Master || !pr.ok || !validInstance(pr.rep.Instance) {
			continue
		}
		if m, in := st.Member(p.ID); in && m.Instance == pr.rep.Instance {
			continue
		}
		s, found := slaves[pr.rep.Instance]
		if found && s.Connected && s.Confirmed >= mr.CommitPoint && s.LagMs < lag {
			return &Command{Op: OpISRAdd, Epoch: st.Epoch, Version: st.Version, Node: p.ID, Instance: pr.rep.Instance,
				Reason: fmt.Sprintf("%s joins the ISR (not eligible yet): confirmed %d >= commit point %d",
					p.ID, s.Confirmed, mr.CommitPoint)}
		}
	}
	return nil
}

// apply proposes cmd through raft without blocking the loop; the result
// comes back on c.applied, and to done (a switchover's answer) if set.
func (c *controller) apply(ctx context.Context, cmd Command, done chan error) {
	c.applying = true
	go func() {
		err := c.propose(ctx, cmd)
		if done != nil {
			done <- err
		}
		select {
		case c.applied <- applyResult{cmd: cmd, err: err}:
		case <-ctx.Done():
		}
	}()
}

func (c *controller) propose(ctx context.Context, cmd Command) error {
	b, err := EncodeCommand(cmd)
	if err != nil {
		return err
	}
	f := c.n.raft.Apply(b, c.o.FailAfter)
	if err := waitFuture(ctx, f); err != nil {
		return fmt.Errorf("cluster: apply %s: %w", cmd.Op, err)
	}
	// Committed (and applied here): every node acts on it once its FSM
	// applies it, which waits for the followers to learn the commit.
	go c.n.pushCommit()
	if err, ok := f.Response().(error); ok && err != nil {
		return err
	}
	return nil
}

func (c *controller) setBlocked(s string) {
	if s == c.blocked {
		return
	}
	if s != "" {
		c.log.Warn("cluster: controller holding back", "why", s)
	} else {
		c.log.Info("cluster: controller no longer holding back", "was", c.blocked)
	}
	c.blocked = s
}

func (c *controller) publishStatus() {
	s := ControllerStatus{Since: c.since, Blocked: c.blocked}
	for _, p := range c.o.Peers {
		np := NodeProbe{ID: p.ID, Age: -1}
		cur := c.cur[p.ID]
		np.OK = cur.ok
		if cur.err != nil {
			np.Err = cur.err.Error()
		}
		if g, ok := c.good[p.ID]; ok {
			np.Report = g.rep
			np.Report.Slaves = slices.Clone(g.rep.Slaves)
			np.At = g.at
		}
		s.Nodes = append(s.Nodes, np)
	}
	c.statusMu.Lock()
	c.status = s
	c.statusMu.Unlock()
}

func (c *controller) snapshotStatus() ControllerStatus {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	s := c.status
	s.Nodes = slices.Clone(s.Nodes)
	now := time.Now()
	for i := range s.Nodes {
		if !s.Nodes[i].At.IsZero() {
			s.Nodes[i].Age = now.Sub(s.Nodes[i].At)
		}
	}
	return s
}
