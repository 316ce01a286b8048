package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/smssmq/smss/client"
)

const defaultAddr = "127.0.0.1:12301"

// globals are the flags every command accepts.
type globals struct {
	e       env
	addr    string
	json    bool
	timeout time.Duration
	trace   string
	sec     secFlags // security.go
	noIDs   bool     // pub --no-id
}

func newGlobals(e env) *globals {
	g := &globals{e: e, addr: defaultAddr, timeout: 10 * time.Second}
	if a := e.getenv("SMSS_ADDR"); a != "" {
		g.addr = a
	}
	return g
}

// usages holds the usage printer of each flag set. The flag package calls
// fs.Usage itself on -help and on every parse error; keeping fs.Usage a
// no-op and printing from parse makes --help print once and a wrong flag
// print one line instead of the whole usage.
var usages sync.Map // *flag.FlagSet -> func()

// flagSet returns a flag set with the global flags bound to g; usage is
// printed for --help.
func (g *globals) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&g.addr, "addr", g.addr, "server `host:port`, or several comma-separated: the master is found among them (default $SMSS_ADDR, else "+defaultAddr+")")
	g.sec.bind(fs, g.e)
	fs.BoolVar(&g.json, "json", g.json, "machine-readable JSON output (errors too, on stderr)")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "timeout of each request")
	fs.StringVar(&g.trace, "trace", g.trace, "traceId sent with requests (default: random per request)")
	fs.Usage = func() {}
	usages.Store(fs, func() {
		w := g.e.stdout
		fmt.Fprint(w, usage)
		fmt.Fprintln(w, "\nflags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	})
	return fs
}

// jsonRequested reports whether args ask for --json, so that an error in
// a flag before it is reported as JSON too.
func jsonRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		switch strings.TrimLeft(a, "-") {
		case "json", "json=true", "json=1":
			return strings.HasPrefix(a, "-")
		}
	}
	return false
}

// parse parses flags and positional arguments in any order ("--" ends the
// flags). With stopAtCommand the first positional argument and everything
// after it are returned unparsed (global flags before a command). done
// reports that the caller must exit with code (help printed, or a usage
// error).
func parse(fs *flag.FlagSet, args []string, g *globals, stopAtCommand bool) (pos []string, code int, done bool) {
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			if u, ok := usages.Load(fs); ok {
				u.(func())()
			}
			return nil, exitOK, true
		}
		if err != nil {
			if g.json || jsonRequested(args) {
				g.json = true
				return nil, fail(g, usageError{err.Error() + " (run with --help for usage)"}), true
			}
			fmt.Fprintf(g.e.stderr, "smssctl: %v\nRun with --help for usage.\n", err)
			return nil, exitUsage, true
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), 0, false
		}
		if len(rest) == 0 {
			return pos, 0, false
		}
		if stopAtCommand {
			return rest, 0, false
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseDuration accepts Go durations plus a "d" (24h) unit: 7d, 1d12h.
func parseDuration(s string) (time.Duration, error) {
	if days, rest, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		d := time.Duration(n) * 24 * time.Hour
		if rest == "" {
			return d, nil
		}
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return d + r, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q", s)
	}
	return d, nil
}

// durationFlag is a flag.Value using parseDuration.
type durationFlag struct {
	d   time.Duration
	set bool
}

func (f *durationFlag) String() string {
	if !f.set {
		return ""
	}
	return f.d.String()
}

func (f *durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	f.d, f.set = d, true
	return nil
}

// headerFlag collects repeated --header k=v in order.
type headerFlag []client.Header

func (h *headerFlag) String() string { return "" }

func (h *headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("header %q is not key=value", s)
	}
	*h = append(*h, client.Header{Key: k, Value: v})
	return nil
}

// ctx returns the context of one request.
func (g *globals) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, g.timeout)
	if g.trace != "" {
		ctx = client.WithTraceID(ctx, g.trace)
	}
	return ctx, cancel
}

// addrs splits --addr at commas: with several addresses writes go to the
// master found among them and reads to any reachable server.
func (g *globals) addrs() []string {
	var out []string
	for _, a := range strings.Split(g.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// dial connects to the server (or the first reachable of several) with a
// pool of one connection per address.
func (g *globals) dial(parent context.Context) (*client.Client, error) {
	ctx, cancel := g.ctx(parent)
	defer cancel()
	sec, err := g.clientOptions()
	if err != nil {
		return nil, err
	}
	addrs := g.addrs()
	if len(addrs) == 0 {
		return nil, usagef("--addr is empty")
	}
	return client.Dial(ctx, "", client.Options{Addrs: addrs, MaxConns: 1, DialTimeout: g.timeout, HealthCheckInterval: -1,
		TLS: sec.TLS, Credentials: sec.Credentials, DisableMessageIDs: g.noIDs})
}

// needArgs checks the number of positional arguments.
func needArgs(pos []string, min, max int, what string) error {
	switch {
	case len(pos) < min:
		return usagef("missing %s", what)
	case len(pos) > max:
		return usagef("unexpected argument %q", pos[max])
	}
	return nil
}
