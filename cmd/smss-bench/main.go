// Command smss-bench measures smss and compares it with Redis Streams
// (issue 7) or NATS JetStream (issue 36, --peer jetstream) on the same
// machine. It is a separate command so the server binary carries none of
// it.
//
// Every workload talks the raw wire protocol over net.Conn (package
// protocol for smss, hand-written RESP for Redis): one request in flight per
// connection, no pools, so the client's own cost is as small and as equal
// as possible on both sides. JetStream is driven through nats.go, its
// official client (jetstream.go says why), also one request in flight per
// connection. Unless --addr is given, the servers are
// started by the tool on free loopback ports with their data in a temp
// directory, and everything started is killed and removed on exit,
// including on Ctrl-C (children also get SIGKILL if the tool itself dies).
//
// `smss-bench floor` serves a stand-in server with no storage (floor.go)
// for the workloads' --addr: the cost of Go and of this machine alone,
// which smss's own figures are read against.
//
// Definitions used in the output:
//   - msgs/s counts messages (records), MB/s their bodies (10^6 bytes).
//   - pub latency is per request (send to reply); e2e and repl latency is
//     per message, from just before the publish write to the moment the
//     subscriber parsed it; sub latency is per batch (one frame and its ack,
//     or one XREAD); queue latency is per ack write, from writing a
//     worker's acks to the server's confirmation of the last of them (smss
//     211, Redis the XACK reply).
//   - queue msgs/s counts only acks the server confirmed as recorded.
//   - percentiles are nearest-rank over a log-linear histogram with < 0.8 %
//     bucket width; max is exact.
//   - RSS comes from /proc/PID/status: VmRSS before the timed phase (idle),
//     the highest VmRSS sampled every 100 ms during it, and VmHWM.
//   - disk B/msg is what the data directory occupies on disk (allocated
//     blocks, as du counts them; smss: binlog, topic files, meta; Redis:
//     appendonlydir; JetStream: its store_dir) over the messages stored.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A second Ctrl-C kills the tool at once; its servers still die with it
	// (Pdeathsig).
	context.AfterFunc(ctx, stop)
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "floor" {
		return runFloor(ctx, args[1:], stdout, stderr)
	}
	o, err := parseOptions(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "smss-bench:", err)
		return 2
	}
	if (o.compare && o.peer == targetRedis || !o.compare && o.target == targetRedis) && o.addr == "" {
		if _, err := exec.LookPath(o.redisBin); err != nil {
			fmt.Fprintf(stderr, "smss-bench: %s not found (apt-get install redis-server, or --redis-bin): %v\n", o.redisBin, err)
			return 2
		}
	}
	e, err := newEnv(o.keep)
	if err != nil {
		fmt.Fprintln(stderr, "smss-bench:", err)
		return 1
	}
	defer e.close()
	r := &runner{o: o, env: e, ctx: ctx, stderr: stderr, base: time.Now()}
	if err := r.main(stdout); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "smss-bench: interrupted; servers stopped")
			return 130
		}
		fmt.Fprintln(stderr, "smss-bench:", err)
		return 1
	}
	return 0
}

func (r *runner) main(stdout io.Writer) error {
	o := r.o
	if !o.compare {
		var rs []*Result
		for i := 0; i < o.runs; i++ {
			res, err := r.runOne(o.target)
			if err != nil {
				return err
			}
			rs = append(rs, res)
		}
		if o.json {
			if len(rs) == 1 {
				return writeJSON(stdout, rs[0])
			}
			return writeJSON(stdout, rs)
		}
		printRuns(stdout, rs)
		return nil
	}
	// Pairs back to back, so both systems of a pair see the same machine load.
	var smss, peer []*Result
	for i := 0; i < o.runs; i++ {
		s, err := r.runOne(targetSmss)
		if err != nil {
			return err
		}
		p, err := r.runOne(o.peer)
		if err != nil {
			return err
		}
		smss, peer = append(smss, s), append(peer, p)
		if !o.quiet {
			fmt.Fprintf(r.stderr, "pair %d: smss %s msgs/s, %s %s msgs/s\n", i+1, fmtNum(s.MsgsPerSec), o.peer, fmtNum(p.MsgsPerSec))
		}
	}
	if o.json {
		sm, pm := rowsMap(medianRows(smss)), rowsMap(medianRows(peer))
		ratio := map[string]float64{}
		for k, v := range sm {
			if w, ok := pm[k]; ok && w != 0 {
				ratio[k] = v / w
			}
		}
		c := compareJSON{Smss: smss, SmssMedian: sm}
		if o.peer == targetJetStream {
			c.JetStream, c.JetStreamMed, c.RatioJetStream = peer, pm, ratio
		} else {
			c.Redis, c.RedisMed, c.Ratio = peer, pm, ratio
		}
		return writeJSON(stdout, c)
	}
	printCompare(stdout, o.peer, smss, peer)
	return nil
}
