package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/smssmq/smss/client"
)

const statusUsage = `usage: smssctl status

Prints the server's role (master or slave), promotion epoch, last eventId
and, on a slave, the master it follows and whether that master still
streams writes to it ("caught up" once no block came for
replication.promoteQuietMs, when a promote no longer loses writes the
master takes). Any logged-in user may ask.
`

const promoteUsage = `usage: smssctl promote [--force]

Turns the server, a running slave, into a master without a restart: it
stops replicating (after the block being applied), records a new promotion
epoch, starts the delay scheduler and the expiry reaper, serves slaves and
accepts writes. Needs the admin role when authentication is on. Refused on
a master, and on a cluster node (smss -role auto: use smssctl switchover).

Refused too when the slave is not known to hold every write its master
acknowledged: its last eventId is below the last commit point the master
sent, or the master confirms writes with its slaves (syncSlaves > 0) and
never sent one; or when its master is still streaming writes to it (a
block came less than replication.promoteQuietMs ago: stop writes on the
master and wait until status says caught up). --force promotes anyway and
prints what may be lost.
`

const followUsage = `usage: smssctl follow HOST:PORT

Re-points the server, a running slave, to the master at HOST:PORT; it
resumes from its own binlog. Needs the admin role when authentication is
on. Refused on a master: restart an old master as a slave with -rejoin.
`

// noFailover explains an original server's refusal.
func noFailover(g *globals, err error) error {
	if errors.Is(err, client.ErrNotSupported) {
		return fmt.Errorf("%w (the server at %s does not support it: an original smss or an older version)", err, g.addr)
	}
	return err
}

// call runs one status, promote or follow request on a connection of its
// own, bounded by the request timeout; an original server's refusal is
// explained.
func call(ctx context.Context, g *globals, fn func(context.Context, *client.Client) error) error {
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	return noFailover(g, fn(rctx, c))
}

func runStatus(ctx context.Context, g *globals, args []string) int {
	if _, err := failoverArgs(g, "status", statusUsage, args, 0); err != nil {
		return failOrDone(g, err)
	}
	var st *client.NodeStatus
	if err := call(ctx, g, func(ctx context.Context, c *client.Client) (err error) {
		st, err = c.Status(ctx)
		return err
	}); err != nil {
		return fail(g, err)
	}
	if g.json {
		out := map[string]any{"addr": g.addr, "role": st.Role, "epoch": st.Epoch,
			"lastEventId": st.LastEventID, "master": st.Master}
		if st.Stream != nil {
			out["stream"] = st.Stream
		}
		if st.QueueGroups > 0 {
			out["queueGroups"] = st.QueueGroups
		}
		writeJSON(g.e.stdout, out)
		return exitOK
	}
	fmt.Fprintf(g.e.stdout, "%s: %s, epoch %d, last eventId %d", g.addr, st.Role, st.Epoch, st.LastEventID)
	if st.Master != "" {
		fmt.Fprintf(g.e.stdout, ", following %s", st.Master)
	}
	if st.QueueGroups > 0 {
		fmt.Fprintf(g.e.stdout, ", %d queue group(s)", st.QueueGroups)
	}
	if s := st.Stream; s != nil {
		switch {
		case s.QuietMs < 0:
			fmt.Fprintf(g.e.stdout, "; stream %s", s.State)
		case s.CaughtUp:
			fmt.Fprintf(g.e.stdout, "; caught up (no block for %d ms)", s.QuietMs)
		default:
			fmt.Fprintf(g.e.stdout, "; streaming writes (last block %d ms ago)", s.QuietMs)
		}
	}
	fmt.Fprintln(g.e.stdout)
	return exitOK
}

func runPromote(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("promote", promoteUsage)
	force := fs.Bool("force", false, "promote even if acknowledged writes may be lost (the reply says which)")
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if err := needArgs(pos, 0, 0, ""); err != nil {
		return fail(g, err)
	}
	var res client.PromoteResult
	if err := call(ctx, g, func(ctx context.Context, c *client.Client) (err error) {
		res, err = c.PromoteForce(ctx, *force)
		return err
	}); err != nil {
		return fail(g, err)
	}
	if g.json {
		out := map[string]any{"addr": g.addr, "role": client.RoleMaster, "epoch": res.Epoch}
		if res.Warning != "" {
			out["warning"] = res.Warning
		}
		writeJSON(g.e.stdout, out)
		return exitOK
	}
	if res.Warning != "" {
		fmt.Fprintf(g.e.stderr, "smssctl: WARNING: forced promotion: %s\n", res.Warning)
	}
	fmt.Fprintf(g.e.stdout, "%s promoted to master, epoch %d\n", g.addr, res.Epoch)
	return exitOK
}

func runFollow(ctx context.Context, g *globals, args []string) int {
	pos, err := failoverArgs(g, "follow", followUsage, args, 1)
	if err != nil {
		return failOrDone(g, err)
	}
	master := pos[0]
	host, port, err := net.SplitHostPort(master)
	if err == nil && host == "" {
		err = errors.New("no host")
	}
	if p, perr := strconv.Atoi(port); err == nil && (perr != nil || p < 1 || p > 65535) {
		err = fmt.Errorf("port %q is not in 1..65535", port)
	}
	if err != nil {
		return fail(g, usagef("follow: %q is not HOST:PORT: %v", master, err))
	}
	if err := call(ctx, g, func(ctx context.Context, c *client.Client) error { return c.Follow(ctx, master) }); err != nil {
		return fail(g, err)
	}
	if g.json {
		writeJSON(g.e.stdout, map[string]any{"addr": g.addr, "following": master})
		return exitOK
	}
	fmt.Fprintf(g.e.stdout, "%s now follows %s\n", g.addr, master)
	return exitOK
}

// errDone ends a command whose flags asked for help (the code is in it).
type errDone struct{ code int }

func (e errDone) Error() string { return "done" }

// failoverArgs parses the flags of status, promote and follow, which take
// only the global ones, and exactly n positional arguments.
func failoverArgs(g *globals, name, usage string, args []string, n int) ([]string, error) {
	fs := g.flagSet(name, usage)
	pos, code, done := parse(fs, args, g, false)
	if done {
		return nil, errDone{code}
	}
	what := ""
	if n > 0 {
		what = "master address HOST:PORT"
	}
	if err := needArgs(pos, n, n, what); err != nil {
		return nil, err
	}
	return pos, nil
}

func failOrDone(g *globals, err error) int {
	var d errDone
	if errors.As(err, &d) {
		return d.code
	}
	return fail(g, err)
}
