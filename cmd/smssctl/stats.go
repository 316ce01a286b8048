package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/smssmq/smss/admin/adminapi"
	"github.com/smssmq/smss/admin/adminclient"
)

const statsUsage = `usage: smssctl stats [--admin HOST:PORT] [--token-file F]

Prints one report from the server's admin endpoint (config admin.listen):
server info, current rates and latencies, topics, subscribers with their
lag, replication and delayed messages. --json prints the raw API answers.
The token is read from --token-file (default $SMSS_ADMIN_TOKEN_FILE), else
taken from $SMSS_ADMIN_TOKEN; prefer either to --token, which other users
can see in the process list (/proc/*/cmdline).
`

const topUsage = `usage: smssctl top [--admin HOST:PORT] [--token-file F] [--interval 2s] [--duration D]

A live view of the admin endpoint, redrawn every --interval until q is
pressed or it is interrupted (or for --duration): rates, latencies, the
busiest topics, the subscribers furthest behind, replication.
`

// quitOnQ calls quit when q (or Q) is read from in; the end of in (no
// terminal, /dev/null) leaves top running until interrupted.
func quitOnQ(in io.Reader, quit func()) {
	if in == nil {
		return
	}
	buf := make([]byte, 64)
	for {
		n, err := in.Read(buf)
		if bytes.ContainsAny(buf[:n], "qQ") {
			quit()
			return
		}
		if err != nil {
			return
		}
	}
}

// adminFlags are the flags of the commands that read the admin endpoint.
// --addr is the client protocol's address and is not used by them.
type adminFlags struct {
	addr, token, tokenFile string
	fs                     *flag.FlagSet
}

func (a *adminFlags) bind(fs *flag.FlagSet, g *globals) {
	a.addr = g.e.getenv("SMSS_ADMIN_ADDR")
	if a.addr == "" {
		a.addr = adminapi.DefaultListen
	}
	a.token = g.e.getenv("SMSS_ADMIN_TOKEN")
	fs.StringVar(&a.addr, "admin", a.addr, "admin endpoint `host:port` or URL (default $SMSS_ADMIN_ADDR, else "+adminapi.DefaultListen+")")
	fs.StringVar(&a.token, "token", a.token, "admin token (default $SMSS_ADMIN_TOKEN; visible to other users in the process list: prefer --token-file)")
	a.tokenFile = g.e.getenv("SMSS_ADMIN_TOKEN_FILE")
	fs.StringVar(&a.tokenFile, "token-file", a.tokenFile, "file holding the admin token (default $SMSS_ADMIN_TOKEN_FILE)")
	a.fs = fs
}

// resolve settles the token after parsing: --token-file (or
// $SMSS_ADMIN_TOKEN_FILE) wins over $SMSS_ADMIN_TOKEN; with --token too it
// is a usage error.
func (a *adminFlags) resolve() error {
	if a.tokenFile == "" {
		return nil
	}
	explicit := false
	a.fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "token" })
	if explicit {
		return usagef("--token and --token-file (or $SMSS_ADMIN_TOKEN_FILE) are exclusive")
	}
	data, err := os.ReadFile(a.tokenFile)
	if err != nil {
		return fmt.Errorf("admin token file: %w", err)
	}
	tok := strings.TrimRight(string(data), "\r\n")
	if tok == "" {
		return usagef("admin token file %s is empty", a.tokenFile)
	}
	a.token = tok
	return nil
}

func runStats(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("stats", statsUsage)
	var af adminFlags
	af.bind(fs, g)
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if err := needArgs(pos, 0, 0, ""); err != nil {
		return fail(g, err)
	}
	if err := af.resolve(); err != nil {
		return fail(g, err)
	}
	rctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if err := adminclient.RunStats(rctx, g.e.stdout, af.addr, af.token, g.json); err != nil {
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
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if err := needArgs(pos, 0, 0, ""); err != nil {
		return fail(g, err)
	}
	if err := af.resolve(); err != nil {
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
	ctx, quit := context.WithCancel(ctx)
	defer quit()
	if f, ok := g.e.stdin.(*os.File); ok {
		restore, _ := cbreak(f)
		defer restore()
	}
	go quitOnQ(g.e.stdin, quit)
	if err := adminclient.RunTop(ctx, g.e.stdout, af.addr, af.token, interval.d); err != nil {
		return fail(g, err)
	}
	return exitOK
}
