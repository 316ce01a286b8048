// Command smssctl is the operator's tool for an smss server: topic
// management, publishing, tailing a subscription or the replication stream,
// a ping, the node's status, work queue groups and a queue consumer
// (queue.go, work.go), promote and follow (failover.go), a
// cluster's status and switchover (cluster.go), and
// (through the admin HTTP endpoint) stats and a live top.
//
//	smssctl [global flags] <command> [flags] [args]
//
// Global flags (accepted before or after the command): --addr host:port,
// or several comma-separated (requests go to the master found among them,
// sub to the master or a slave of the newest epoch; default $SMSS_ADDR, else 127.0.0.1:12301), --json (machine-readable
// output: one JSON document, or one JSON object per line for sub and
// replica), --timeout (per request, default 10s), --trace (traceId sent
// with requests), and for servers with authentication or TLS (security.go)
// --user (default $SMSS_USER) with --password-file, $SMSS_PASSWORD or a
// terminal prompt, --tls, --ca, --server-name, --cert and --key. The user
// command edits the server's users file (user.go).
//
// Exit codes: 0 success; 1 the server refused or could not be reached;
// 2 usage error; 3 a subscription ended because the topic was deleted, or
// a work because its queue group or topic was.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const (
	exitOK           = 0
	exitError        = 1
	exitUsage        = 2
	exitTopicDeleted = 3
)

const usageText = `usage: smssctl [--addr HOST:PORT[,HOST:PORT...]] [--json] [--timeout D] [--trace ID] <command> ...

commands:
  topic create NAME [--ttl 2h | --expire-at TIME]   create a topic (permanent by default)
  topic delete NAME                                 delete a topic and its messages
  topic list                                        list all topics
  topic info NAME                                   show one topic
  pub TOPIC [--header k=v]... [--delay 5s] [--id ID] [MESSAGE | -]
                                                    publish one message (- or no MESSAGE: body from stdin)
  sub TOPIC --who NAME [--from N] [--batch N]       print messages as they arrive, like tail -f
  replica [--from N]                                print the binlog command lines of the replication stream
  ping                                              check that the server answers
  status                                            role, promotion epoch, last eventId, followed master
  promote [--force]                                 turn a running slave into a master (admin role)
  follow HOST:PORT                                  re-point a running slave to another master (admin role)
  cluster status                                    every node of a cluster (-role auto): role, epoch, eventIds, in-sync set
  switchover [NODE] [--wait 30s]                    move a cluster's master role to NODE (admin role)
  cursor list [TOPIC] | set TOPIC WHO EVENTID | reset TOPIC WHO
                                                    stored consumer positions and their lag (admin role)
  queue create TOPIC GROUP [--ack-wait 30s] [--max-deliver N] [--backoff 1s,5s,30s] [--dead-letter TOPIC]
               [--from oldest|newest|EVENTID] [--max-in-flight N]
                                                    create a work queue group on a topic
  queue info TOPIC GROUP | list [TOPIC] | delete TOPIC GROUP
                                                    a group's counters and consumers, every group, delete one
  work TOPIC GROUP [--exec CMD] [--count N] [--consumer NAME]
                                                    consume a queue group: print (or run CMD on) each message and ack it
  stats [--admin HOST:PORT] [--token-file F]        one report from the admin endpoint (admin.listen)
  top [--admin HOST:PORT] [--interval 2s]           live view of rates, topics, lag (admin endpoint)
  user add|passwd|set|disable|enable|delete NAME    manage the users file (--users-file; see user --help)
  user list                                         list users, roles and grants (never credentials)
  diverged DIR [--republish] [--create-topics]      list (and publish again) what "smss -rejoin" moved aside

Durations take Go units plus days: 500ms, 5s, 90m, 2h, 7d.
The address defaults to $SMSS_ADDR, else 127.0.0.1:12301. With several
comma-separated addresses, topic, pub, ping, replica, queue and work go to
the master found among them (topic info/list and ping to any reachable
server when no master is), sub to the master or a slave of the newest epoch among them
(never a node that does not answer or is of an older epoch). stats and top
read the admin endpoint instead: --admin defaults to $SMSS_ADMIN_ADDR, else
127.0.0.1:12380, and the token is read from --token-file or
$SMSS_ADMIN_TOKEN_FILE, else $SMSS_ADMIN_TOKEN (--token shows in the
process list).
Servers with authentication: --user NAME, password from --password-file,
$SMSS_PASSWORD or a prompt. TLS: --tls, --ca FILE, --server-name NAME,
--cert FILE --key FILE (client certificate).
Run "smssctl <command> --help" for the flags of a command.

exit codes: 0 ok, 1 error from or reaching the server, 2 usage, 3 subscription or work ended: topic (or queue group) deleted
`

// env is what a command runs with; tests substitute the streams.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}))
}

func run(ctx context.Context, args []string, e env) int {
	g := newGlobals(e)
	fs := g.flagSet("smssctl", usageText)
	rest, code, done := parse(fs, args, g, true)
	if done {
		return code
	}
	if len(rest) == 0 {
		fmt.Fprint(e.stderr, usageText)
		return exitUsage
	}
	cmd, rest := rest[0], rest[1:]
	switch cmd {
	case "topic":
		return runTopic(ctx, g, rest)
	case "pub":
		return runPub(ctx, g, rest)
	case "sub":
		return runSub(ctx, g, rest)
	case "replica":
		return runReplica(ctx, g, rest)
	case "ping":
		return runPing(ctx, g, rest)
	case "status":
		return runStatus(ctx, g, rest)
	case "promote":
		return runPromote(ctx, g, rest)
	case "follow":
		return runFollow(ctx, g, rest)
	case "cluster":
		return runCluster(ctx, g, rest)
	case "switchover":
		return runSwitchover(ctx, g, rest)
	case "user":
		return runUser(g, rest)
	case "cursor":
		return runCursor(ctx, g, rest)
	case "queue":
		return runQueue(ctx, g, rest)
	case "work":
		return runWork(ctx, g, rest)
	case "stats":
		return runStats(ctx, g, rest)
	case "top":
		return runTop(ctx, g, rest)
	case "diverged":
		return runDiverged(ctx, g, rest)
	case "help":
		fmt.Fprint(e.stdout, usageText)
		return exitOK
	}
	fmt.Fprintf(e.stderr, "smssctl: unknown command %q\n\n%s", cmd, usageText)
	return exitUsage
}

// fail prints err and returns the exit code it maps to. With --json the
// error is one JSON object on stderr: {"error": text, "exitCode": code}.
func fail(g *globals, err error) int {
	code := exitError
	var ue usageError
	if errors.As(err, &ue) {
		code = exitUsage
	}
	msg := err.Error()
	if code == exitError {
		msg += tlsHint(g, err)
	}
	return report(g, msg, code)
}

// report prints an error message (as JSON with --json) and returns code.
func report(g *globals, msg string, code int) int {
	if g.json {
		b, _ := json.Marshal(struct {
			Error    string `json:"error"`
			ExitCode int    `json:"exitCode"`
		}{msg, code})
		fmt.Fprintf(g.e.stderr, "%s\n", b)
		return code
	}
	fmt.Fprintf(g.e.stderr, "smssctl: %s\n", msg)
	return code
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }
