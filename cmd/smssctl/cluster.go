package main

// smssctl cluster status and smssctl switchover: the operator's view of a
// cluster (smss -role auto) and its planned master change. Both ask nodes
// with the status command (34); switchover (40) goes to the consensus
// leader, and is asked again at the leader a node names when it is not.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/protocol"
)

const clusterUsage = `usage: smssctl cluster status

Shows every node of the cluster (smss -role auto): its address, role,
promotion epoch, last eventId and confirmed eventId (on the master its
commit point, on a slave what the master says it confirmed), whether it is
in the in-sync set and eligible for election, which node is the
consensus leader, why a master is fenced and why the leader's controller
holds an action back. It asks the nodes of --addr (several comma-separated
are asked each), then every configured peer they name; a node that does
not answer shows the consensus leader's last probe of it, if any. Any
logged-in user may ask.
`

const switchoverUsage = `usage: smssctl switchover [NODE]

Moves the cluster's master role (smss -role auto) to NODE, an eligible
member of the in-sync set, through the consensus: once NODE caught up with
the master (the nodes wait at most cluster.switchoverWaitMs), it is
elected with the next epoch, the old master steps down and follows it.
Without NODE the cluster picks the most advanced eligible member. The
request goes to the consensus leader (found through --addr). It waits for
the new master to accept writes, at most --wait. Needs the admin role
when authentication is on.
`

// errNotCluster: a node answered without a cluster object.
var errNotCluster = errors.New("not one of a cluster (smss -role auto)")

// dialOne connects to addr alone (not the master among several).
func (g *globals) dialOne(parent context.Context, addr string) (*client.Client, error) {
	ctx, cancel := g.ctx(parent)
	defer cancel()
	sec, err := g.clientOptions()
	if err != nil {
		return nil, err
	}
	return client.Dial(ctx, "", client.Options{Addrs: []string{addr}, MaxConns: 1, DialTimeout: g.timeout, HealthCheckInterval: -1,
		TLS: sec.TLS, Credentials: sec.Credentials})
}

// statusOf asks addr's status on a connection of its own.
func statusOf(ctx context.Context, g *globals, addr string) (*client.NodeStatus, error) {
	c, err := g.dialOne(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	st, err := c.Status(rctx)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// gatherCluster asks the --addr nodes, then every peer they name, and
// builds the cluster report. It fails when no --addr node answered as a
// cluster node.
func gatherCluster(ctx context.Context, g *globals) (protocol.ClusterReport, error) {
	addrs := g.addrs()
	if len(addrs) == 0 {
		return protocol.ClusterReport{}, usagef("--addr is empty")
	}
	var (
		mu      sync.Mutex
		answers = map[string]*protocol.NodeStatus{} // by node id
		errs    = map[string]string{}               // by node id
		asked   = map[string]bool{}                 // by address
		first   []string                            // failures of --addr nodes
	)
	ask := func(addrs []string, ids []string) {
		var wg sync.WaitGroup
		for i, addr := range addrs {
			asked[addr] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := statusOf(ctx, g, addr)
				if err == nil && st.Cluster == nil {
					err = errNotCluster
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					answers[st.Cluster.Node] = st
				case ids != nil:
					errs[ids[i]] = err.Error()
				default:
					first = append(first, fmt.Sprintf("%s: %v", addr, noFailover(&globals{addr: addr}, err)))
				}
			}()
		}
		wg.Wait()
	}
	ask(addrs, nil)
	if len(answers) == 0 {
		sort.Strings(first)
		return protocol.ClusterReport{}, fmt.Errorf("no cluster node answered: %s", strings.Join(first, "; "))
	}
	peers := clusterPeers(answers)
	var more, ids []string
	for _, p := range peers {
		if _, ok := answers[p.Node]; !ok && !asked[p.Addr] && p.Addr != "" {
			more, ids = append(more, p.Addr), append(ids, p.Node)
		}
	}
	ask(more, ids)
	for _, p := range peers {
		if _, ok := answers[p.Node]; !ok && errs[p.Node] == "" {
			errs[p.Node] = "no answer at " + p.Addr
		}
	}
	return protocol.BuildClusterReport(peers, answers, errs), nil
}

// clusterPeers is the union of the peers the answers list, by node id.
func clusterPeers(answers map[string]*protocol.NodeStatus) []protocol.ClusterPeer {
	by := map[string]string{}
	for _, st := range answers {
		for _, p := range st.Cluster.Peers {
			if by[p.Node] == "" {
				by[p.Node] = p.Addr
			}
		}
	}
	out := make([]protocol.ClusterPeer, 0, len(by))
	for id, addr := range by {
		out = append(out, protocol.ClusterPeer{Node: id, Addr: addr})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func runCluster(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("cluster", clusterUsage)
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if len(pos) == 0 {
		return fail(g, usagef("cluster: missing subcommand (status)"))
	}
	if pos[0] != "status" {
		return fail(g, usagef("cluster: unknown subcommand %q (want status)", pos[0]))
	}
	if err := needArgs(pos[1:], 0, 0, ""); err != nil {
		return fail(g, err)
	}
	rep, err := gatherCluster(ctx, g)
	if err != nil {
		return fail(g, err)
	}
	if g.json {
		if rep.Nodes == nil {
			rep.Nodes = []protocol.ClusterNode{}
		}
		writeJSON(g.e.stdout, rep)
		return exitOK
	}
	renderCluster(g.e.stdout, rep)
	return exitOK
}

// renderCluster prints the report as a table.
func renderCluster(w io.Writer, r protocol.ClusterReport) {
	master, leader := r.Master, r.Leader
	if master == "" {
		master = "none elected yet"
	}
	if leader == "" {
		leader = "none known"
	}
	fmt.Fprintf(w, "cluster: epoch %d, master %s, consensus leader %s, state version %d\n", r.Epoch, master, leader, r.Version)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDR\tROLE\tEPOCH\tLAST EVENTID\tCONFIRMED\tIN SYNC\tLEADER\tSTATE")
	for _, n := range r.Nodes {
		role, epoch, last := "-", "-", "-"
		if n.Reachable || n.FromProbe {
			role, epoch, last = n.Role, strconv.FormatUint(n.Epoch, 10), strconv.FormatInt(n.LastEventID, 10)
			if n.Master && n.Role != protocol.RoleMaster {
				role += " (elected master)"
			}
		}
		confirmed := "-"
		if n.Confirmed >= 0 {
			confirmed = strconv.FormatInt(n.Confirmed, 10)
		}
		inSync := "no"
		switch {
		case n.Master:
			inSync = "(master)"
		case n.InSync && n.Eligible:
			inSync = "yes, eligible"
		case n.InSync:
			inSync = "yes, not eligible yet"
		}
		lead := ""
		if n.Leader {
			lead = "yes"
		}
		var state []string
		switch {
		case n.Reachable && n.Fenced != "":
			state = append(state, "fenced: "+n.Fenced)
		case n.Reachable:
			state = append(state, "ok")
		case n.FromProbe:
			state = append(state, "unreachable (figures: the leader's last probe): "+n.Error)
		default:
			state = append(state, "unreachable: "+n.Error)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.Addr, role, epoch, last, confirmed, inSync, lead, strings.Join(state, "; "))
	}
	tw.Flush()
	if r.Blocked != "" {
		fmt.Fprintf(w, "controller blocked: %s\n", r.Blocked)
	}
}

// switchoverHops bounds how often switchover follows a node's "ask the
// leader" answer (leadership may move while it asks).
const switchoverHops = 3

func runSwitchover(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("switchover", switchoverUsage)
	wait := durationFlag{d: 30 * time.Second}
	fs.Var(&wait, "wait", "how long to wait for the switchover and the new master (default 30s)")
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if err := needArgs(pos, 0, 1, ""); err != nil {
		return fail(g, err)
	}
	target := ""
	if len(pos) == 1 {
		target = pos[0]
	}
	if err := validTarget(target); err != nil {
		return fail(g, err)
	}
	if wait.d <= 0 {
		return fail(g, usagef("switchover: --wait must be positive"))
	}
	res, err := switchover(ctx, g, target, wait.d)
	if err != nil {
		return fail(g, err)
	}
	if g.json {
		writeJSON(g.e.stdout, res)
		return exitOK
	}
	fmt.Fprintf(g.e.stdout, "switchover done: %s is master at epoch %d (was %s at epoch %d) and accepts writes\n",
		res.Master, res.Epoch, orNone(res.PreviousMaster), res.PreviousEpoch)
	return exitOK
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// validTarget checks NODE before anything is sent.
func validTarget(id string) error {
	if len(id) > 64 {
		return usagef("switchover: node id %q is longer than 64 bytes", id)
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return usagef("switchover: node id %q: printable ASCII without spaces only", id)
		}
	}
	return nil
}

// switchoverResult is what switchover prints.
type switchoverResult struct {
	Master         string `json:"master"`
	Addr           string `json:"addr"`
	Epoch          uint64 `json:"epoch"`
	PreviousMaster string `json:"previousMaster"`
	PreviousEpoch  uint64 `json:"previousEpoch"`
}

// switchover finds the consensus leader through --addr, asks it, follows a
// "not the leader" answer to the leader it names, and waits until the
// elected master answers as the master of its epoch, not fenced.
func switchover(ctx context.Context, g *globals, target string, wait time.Duration) (switchoverResult, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	rep, err := gatherCluster(ctx, g)
	if err != nil {
		return switchoverResult{}, err
	}
	res := switchoverResult{PreviousMaster: rep.Master, PreviousEpoch: rep.Epoch}
	addrOf := map[string]string{}
	for _, n := range rep.Nodes {
		addrOf[n.Node] = n.Addr
	}
	if target != "" {
		if _, ok := addrOf[target]; !ok {
			ids := make([]string, 0, len(addrOf))
			for id := range addrOf {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			return res, fmt.Errorf("switchover: no node %q in this cluster (its nodes: %s)", target, strings.Join(ids, ", "))
		}
	}
	at := addrOf[rep.Leader]
	if at == "" {
		at = g.addrs()[0]
	}
	var master string
	var epoch uint64
	for hop := 0; ; hop++ {
		master, epoch, err = switchoverAt(ctx, g, at, target)
		var nl *client.NotLeaderError
		if !errors.As(err, &nl) || nl.Addr == "" || nl.Addr == at || hop >= switchoverHops {
			break
		}
		at = nl.Addr
	}
	if err != nil {
		return res, noFailover(&globals{addr: at}, err)
	}
	res.Master, res.Epoch, res.Addr = master, epoch, addrOf[master]
	if res.Addr == "" {
		return res, nil // not a configured peer of the nodes asked: nothing to wait for
	}
	// The elected node promotes itself to the epoch; wait for it.
	for {
		st, err := statusOf(ctx, g, res.Addr)
		if err == nil && st.IsMaster() && st.Epoch == epoch && st.Cluster != nil && st.Cluster.Fenced == "" {
			return res, nil
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			why := "it did not answer"
			if err != nil {
				why = err.Error()
			} else if st != nil {
				why = fmt.Sprintf("it is %s at epoch %d", st.Role, st.Epoch)
				if st.Cluster != nil && st.Cluster.Fenced != "" {
					why += ", fenced: " + st.Cluster.Fenced
				}
			}
			return res, fmt.Errorf("switchover: the cluster elected %s at epoch %d, but it does not accept writes yet within --wait %v (%s)",
				master, epoch, wait, why)
		case <-t.C:
		}
	}
}

// switchoverAt sends the switchover request to addr.
func switchoverAt(ctx context.Context, g *globals, addr, target string) (string, uint64, error) {
	c, err := g.dialOne(ctx, addr)
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	if g.trace != "" {
		ctx = client.WithTraceID(ctx, g.trace)
	}
	return c.Switchover(ctx, target)
}
