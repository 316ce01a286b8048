package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Workload names.
const (
	wPub     = "pub"
	wSub     = "sub"
	wE2E     = "e2e"
	wRepl    = "repl"
	wQueue   = "queue"
	wCompare = "compare"
)

// Targets.
const (
	targetSmss      = "smss"
	targetRedis     = "redis"
	targetJetStream = "jetstream"
)

// options are the command line of one invocation.
type options struct {
	workload string // pub, sub, e2e, repl (compare: the compared workload)
	compare  bool
	target   string
	peer     string // compare: what smss is compared with, redis or jetstream

	addr     string // use a running server instead of starting one
	pid      int    // its pid, for RSS
	smssBin  string
	redisBin string
	natsBin  string
	flush    int
	jsAck    string // JetStream pull consumer ack policy: none or explicit
	// jsReplicas is the JetStream stream's replicas: 3 (a three-node
	// cluster) when compare --peer jetstream runs smss with a slave.
	jsReplicas int

	conns    int
	size     int
	records  int
	rate     float64 // messages per second over all connections; 0 = as fast as possible
	duration time.Duration
	count    int64 // messages; > 0 overrides duration
	batch    int
	topic    string
	// freshTopic: each run uses a new topic name (a running server may hold
	// an old "bench").
	freshTopic bool

	backlog   int64         // repl: messages the slave catches up on
	timeout   time.Duration // repl catch-up and live-delivery waits
	withSlave bool          // pub: attach a slave during the run
	cluster   bool          // pub (smss): a three-node -role auto cluster, publishing to its master
	// syncSlaves is the master's replication.syncSlaves (pub --with-slave).
	syncSlaves int
	ids        bool // smss: a message id (smss-msg-id) on every publish request
	noCursors  bool // cursor.enabled false on a server the benchmark starts

	runs  int
	json  bool
	quiet bool
	keep  bool
}

const usageText = `usage: smss-bench <pub|sub|e2e|repl|queue> [flags]
       smss-bench compare --workload <pub|sub|e2e|queue> [--peer redis|jetstream] [flags]
       smss-bench floor [--listen host:port] [--writer [--replicate-to host:port [--sync]] [--fsync]|--leader|--epoll]
       smss-bench floor --replica [--listen host:port] [--fsync]

Starts the server itself (smss built with go build, redis-server, or
nats-server built with go build from the version go.mod pins) on a free
loopback port with its data in a temp directory, unless --addr names a
running one. Everything it starts is stopped and removed on exit or Ctrl-C.

workloads:
  pub      C connections publish messages of --size bytes, --records per
           request, at --rate msgs/s or as fast as possible, for --duration
           or --count messages; latency is per request.
  sub      pre-fill --count messages (100 per request, not timed), then
           consume them on one connection with --batch; latency per batch.
  e2e      publish at --rate with one live subscriber; latency is
           publish→delivery per message (timestamp inside the body).
  queue    pre-fill --count messages (not timed), create a queue group
           from the oldest (Redis: XGROUP CREATE ... 0), then --conns
           workers consume until every message's ack is confirmed;
           --batch 1 acks one by one (smss maxInFlight 1; Redis
           XREADGROUP COUNT 1 + XACK), --batch B in batches (smss
           maxInFlight B, a frame's acks in one write; Redis XREADGROUP
           COUNT B + one XACK of B ids); latency per ack write.
  repl     (smss only) slave catch-up of a --backlog, then publish→delivery
           lag through the slave at --rate for --duration.
  compare  run --workload against smss and a peer (--peer redis, the
           default, or jetstream) back to back (--runs pairs) and print
           both side by side with their ratio. JetStream: file storage,
           sync_interval 2m (its default) at --flush 0/1, always at 2;
           synchronous publishes (--records N: N async publishes, then
           all N acks); pull consumers (--js-ack none or explicit).
           With --with-slave --sync-slaves 1 smss runs master + slave,
           with --cluster a three-node -role auto cluster, and JetStream
           a three-node cluster with an R3 stream.
  floor    serve a stand-in server with no storage and no hand-offs, for
           the other workloads' --addr: what Go and this machine cost by
           themselves (e2e latency, server CPU), smss's floor. --writer
           adds smss's shape: publishes go through one writer goroutine;
           --leader writes the same groups leader/follower style (the
           connection goroutines take turns as the writer); --epoll
           serves all connections from one thread's epoll loop (Linux).
           --replica is a stand-in slave; --writer --replicate-to sends
           it every group, and with --sync answers a publish once the
           replica confirmed its group (semi-synchronous); --fsync
           fsyncs each group (on the master before it answers, on the
           replica before it confirms).

flags:
`

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return nil, errors.New("missing workload")
	}
	o := &options{workload: args[0]}
	fs := flag.NewFlagSet("smss-bench "+args[0], flag.ContinueOnError)
	if help := args[0]; help == "-h" || help == "-help" || help == "--help" || help == "help" {
		args = []string{"", "-h"} // print the usage with every flag
	}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	var workload string
	fs.StringVar(&workload, "workload", "", "compare: the workload to compare (pub, sub, e2e)")
	fs.StringVar(&o.target, "target", targetSmss, "server to benchmark: smss, redis or jetstream")
	fs.StringVar(&o.addr, "addr", "", "host:port of a running server to use instead of starting one")
	fs.IntVar(&o.pid, "pid", 0, "pid of the --addr server, to report its RSS")
	fs.StringVar(&o.smssBin, "smss-bin", "", "smss binary (default: go build it into the temp dir)")
	fs.StringVar(&o.redisBin, "redis-bin", "redis-server", "redis-server binary")
	fs.StringVar(&o.natsBin, "nats-bin", "", "nats-server binary (default: go build "+natsModule+" into the temp dir)")
	fs.StringVar(&o.peer, "peer", targetRedis, "compare: the system smss is compared with, redis or jetstream")
	fs.StringVar(&o.jsAck, "js-ack", jsAckNone, "JetStream pull consumer ack policy: none or explicit (each message acked)")
	fs.IntVar(&o.flush, "flush", 1, "smss store.flushLevel 0/1/2; Redis appendfsync no/everysec/always")
	fs.IntVar(&o.conns, "conns", 1, "publishing connections (queue: workers)")
	fs.IntVar(&o.size, "size", 200, "message body bytes (>= 8: the first 8 carry the send time)")
	fs.IntVar(&o.records, "records", 1, "messages per publish request (Redis: pipelined XADDs)")
	fs.Float64Var(&o.rate, "rate", -1, "messages per second over all connections, 0 = as fast as possible (default 0; e2e and repl 1000)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of the timed phase")
	fs.Int64Var(&o.count, "count", 0, "pub/e2e: messages to send instead of --duration; sub: messages to consume (default 1000000); queue: to preload and ack (default 200000)")
	fs.IntVar(&o.batch, "batch", 32, "sub/e2e/repl: subscription batch, 1..255 (Redis: XREAD COUNT); queue: max in flight per worker (Redis: XREADGROUP COUNT)")
	fs.StringVar(&o.topic, "topic", "", "topic or stream key (default bench, or a fresh name with --addr)")
	fs.Int64Var(&o.backlog, "backlog", 1_000_000, "repl: messages published before the slave starts")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "repl: longest wait for the slave to catch up; e2e/repl: for the last deliveries; queue: for every ack to be confirmed")
	fs.BoolVar(&o.withSlave, "with-slave", false, "pub (smss): attach a replicating slave during the run")
	fs.BoolVar(&o.cluster, "cluster", false, "pub (smss): run a three-node -role auto cluster (syncSlaves 1) and publish to its master; compare --peer jetstream: against a three-node JetStream cluster with an R3 stream")
	fs.IntVar(&o.syncSlaves, "sync-slaves", 0, "pub --with-slave (smss): the master's replication.syncSlaves; 1 answers a publish once the slave confirmed it (semi-synchronous)")
	fs.BoolVar(&o.ids, "ids", false, "smss: attach a new 32-hex-char message id (smss-msg-id) to every publish request, as the Go client does")
	fs.BoolVar(&o.noCursors, "no-cursors", false, "smss: start the server with cursor.enabled false (no stored consumer positions)")
	fs.IntVar(&o.runs, "runs", 1, "repetitions (fresh servers each); medians are reported")
	fs.BoolVar(&o.json, "json", false, "print results as JSON on stdout")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines on stderr")
	fs.BoolVar(&o.keep, "keep", false, "keep the temp dir (data, logs) and print its path")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.workload == wCompare {
		o.compare = true
		o.workload = workload
		if o.addr != "" {
			return nil, errors.New("compare starts both servers itself; --addr is not allowed")
		}
	} else if workload != "" {
		return nil, errors.New("--workload is for compare only")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := o.validate(set); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *options) validate(set map[string]bool) error {
	switch o.workload {
	case wPub, wSub, wE2E:
	case wQueue:
		if o.target == targetJetStream || o.compare && o.peer == targetJetStream {
			return errors.New("queue compares smss with Redis (--peer redis)")
		}
	case wRepl:
		if o.compare {
			return errors.New("repl is smss only: compare supports pub, sub, e2e and queue")
		}
		if o.target != targetSmss {
			return errors.New("repl is smss only")
		}
	case "":
		return errors.New("compare needs --workload pub, sub, e2e or queue")
	default:
		return fmt.Errorf("unknown workload %q (want pub, sub, e2e, repl, queue or compare)", o.workload)
	}
	if o.target != targetSmss && o.target != targetRedis && o.target != targetJetStream {
		return fmt.Errorf("--target %q: want smss, redis or jetstream", o.target)
	}
	if o.peer != targetRedis && o.peer != targetJetStream {
		return fmt.Errorf("--peer %q: want redis or jetstream", o.peer)
	}
	if set["peer"] && !o.compare {
		return errors.New("--peer is for compare only (use --target for one system)")
	}
	if o.jsAck != jsAckNone && o.jsAck != jsAckExplicit {
		return fmt.Errorf("--js-ack %q: want none or explicit", o.jsAck)
	}
	if set["js-ack"] && !(o.target == targetJetStream || o.compare && o.peer == targetJetStream) {
		return errors.New("--js-ack applies to JetStream (--target jetstream or compare --peer jetstream)")
	}
	if o.cluster {
		switch {
		case o.workload != wPub:
			return errors.New("--cluster applies to the pub workload")
		case o.withSlave || o.addr != "":
			return errors.New("--cluster starts its own three nodes: not with --with-slave or --addr")
		case o.compare && o.peer != targetJetStream:
			return errors.New("compare --cluster needs --peer jetstream (against an R3 stream on three nodes)")
		case !o.compare && o.target != targetSmss:
			return errors.New("--cluster is an smss cluster (--target smss)")
		}
		o.jsReplicas = 3
	}
	if o.compare && o.withSlave {
		// Redis has no replicated acknowledged mode to compare with.
		if o.peer != targetJetStream || o.syncSlaves != 1 || o.workload != wPub {
			return errors.New("compare --with-slave needs --peer jetstream --sync-slaves 1 --workload pub (against an R3 stream on three nodes)")
		}
		o.jsReplicas = 3
	}
	if o.rate < 0 {
		o.rate = 0
		if o.workload == wE2E || o.workload == wRepl {
			o.rate = 1000
		}
	}
	if o.workload == wSub && o.count == 0 {
		o.count = 1_000_000
	}
	if o.workload == wQueue && o.count == 0 {
		o.count = 200_000
	}
	switch {
	case o.flush < 0 || o.flush > 2:
		return fmt.Errorf("--flush %d: want 0, 1 or 2", o.flush)
	case o.conns < 1:
		return fmt.Errorf("--conns %d: want >= 1", o.conns)
	case o.size < stampSize:
		return fmt.Errorf("--size %d: want >= %d (the body carries an 8-byte timestamp)", o.size, stampSize)
	case o.records < 1 || o.records > 10000:
		return fmt.Errorf("--records %d: want 1..10000 (the server's default limit.maxRecords)", o.records)
	case o.records*(o.size+8) > 8<<20:
		return fmt.Errorf("--size × --records exceeds the server's default 8 MiB limit.maxPayload")
	case o.batch < 1 || o.batch > 255:
		return fmt.Errorf("--batch %d: want 1..255", o.batch)
	case o.duration <= 0 && o.count <= 0:
		return errors.New("--duration must be > 0 unless --count is given")
	case o.count < 0:
		return fmt.Errorf("--count %d: want >= 0", o.count)
	case o.runs < 1:
		return fmt.Errorf("--runs %d: want >= 1", o.runs)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %s: want > 0", o.timeout)
	case o.backlog < 1:
		return fmt.Errorf("--backlog %d: want >= 1", o.backlog)
	case o.pid != 0 && o.addr == "":
		return errors.New("--pid goes with --addr (a started server's pid is known)")
	case o.withSlave && (o.workload != wPub || o.target != targetSmss) && !o.compare:
		return errors.New("--with-slave applies to the smss pub workload")
	case o.syncSlaves < 0 || o.syncSlaves > 1:
		return fmt.Errorf("--sync-slaves %d: want 0 or 1 (one slave is attached)", o.syncSlaves)
	case o.syncSlaves > 0 && (!o.withSlave || o.addr != ""):
		return errors.New("--sync-slaves needs --with-slave and a master the benchmark starts (no --addr)")
	case o.ids && (o.target != targetSmss || o.compare):
		return errors.New("--ids applies to smss workloads (not compare or redis)")
	case (o.workload == wE2E || o.workload == wRepl) && o.rate == 0:
		return fmt.Errorf("%s needs a fixed --rate", o.workload)
	case o.workload == wRepl && o.count > 0:
		return errors.New("repl's lag phase runs for --duration; use --backlog for the catch-up size")
	}
	if (o.workload == wSub || o.workload == wQueue) && set["rate"] {
		return fmt.Errorf("--rate does not apply to %s (it consumes as fast as possible)", o.workload)
	}
	o.freshTopic = o.topic == "" && o.addr != ""
	if o.topic == "" {
		o.topic = "bench"
	}
	if strings.ContainsAny(o.topic, " /\\\t\n") {
		return fmt.Errorf("--topic %q: not a valid topic name", o.topic)
	}
	return nil
}
