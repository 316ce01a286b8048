package main

import (
	"context"
	"flag"
	"time"

	"github.com/smssmq/smss/admin"
)

const statsUsage = `usage: smssctl stats [--admin HOST:PORT] [--token T]

Prints one report from the server's admin endpoint (config admin.listen):
server info, current rates and latencies, topics, subscribers with their
lag, replication and delayed messages. --json prints the raw API answers.
The token defaults to $SMSS_ADMIN_TOKEN (prefer it to --token, which other
users can see in the process list).
`

const topUsage = `usage: smssctl top [--admin HOST:PORT] [--token T] [--interval 2s] [--duration D]

A live view of the admin endpoint, redrawn every --interval until
interrupted (or for --duration): rates, latencies, the busiest topics,
the subscribers furthest behind, replication.
`

// adminFlags are the flags of the commands that read the admin endpoint.
// --addr is the client protocol's address and is not used by them.
type adminFlags struct {
	addr, token string
}

func (a *adminFlags) bind(fs *flag.FlagSet, g *globals) {
	a.addr = g.e.getenv("SMSS_ADMIN_ADDR")
	if a.addr == "" {
		a.addr = admin.DefaultListen
	}
	a.token = g.e.getenv("SMSS_ADMIN_TOKEN")
	fs.StringVar(&a.addr, "admin", a.addr, "admin endpoint `host:port` or URL (default $SMSS_ADMIN_ADDR, else "+admin.DefaultListen+")")
	fs.StringVar(&a.token, "token", a.token, "admin token (default $SMSS_ADMIN_TOKEN)")
}

func runStats(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("stats", statsUsage)
	var af adminFlags
	af.bind(fs, g)
	pos, code, done := parse(fs, args, g.e, false)
	if done {
		return code
	}
	if err := needArgs(pos, 0, 0, ""); err != nil {
		return fail(g, err)
	}
	rctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if err := admin.RunStats(rctx, g.e.stdout, af.addr, af.token, g.json); err != nil {
		return fail(g, err)
	}
	return exitOK
}

func runTop(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("top", topUsage)
	var af adminFlags
	af.bind(fs, g)
	interval, duration := durationFlag{d: 2 * time.Second}, durationFlag{}
	fs.Var(&interval, "interval", "redraw period (default 2s)")
	fs.Var(&duration, "duration", "stop after this long (default: until interrupted)")
	pos, code, done := parse(fs, args, g.e, false)
	if done {
		return code
	}
	if err := needArgs(pos, 0, 0, ""); err != nil {
		return fail(g, err)
	}
	if interval.d <= 0 {
		return fail(g, usagef("--interval must be positive"))
	}
	if duration.set {
		if duration.d <= 0 {
			return fail(g, usagef("--duration must be positive"))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, duration.d)
		defer cancel()
	}
	if err := admin.RunTop(ctx, g.e.stdout, af.addr, af.token, interval.d); err != nil {
		return fail(g, err)
	}
	return exitOK
}
