// Command smss-torture is the long crash-torture run of smss. It runs a
// real master and a real slave (the smss binary, slave started with
// -role slave -host 127.0.0.1 -port P) under mixed load: four publishers
// sending singles and batches of up to 20 records, delayed messages due in
// 1–3 s, a churner that creates, fills and deletes topics and creates
// topics that expire after 10–12 s, and three subscribers (two on the
// master, one on the slave) that ack every frame. Each cycle it kills the
// master or the slave with SIGKILL at a random moment, inspects the killed
// server's meta store, restarts it with a random flushLevel, pauses the
// writers and checks:
//
//   - every acknowledged publish, delay, create and delete is in the
//     master's binlog exactly once, every refused one not at all, each
//     publisher's messages in the order it sent them, and no message,
//     delay or topic appears that nobody sent;
//   - eventIds strictly increase over the whole binlog, and the binlog
//     verified at the previous check is a byte prefix of today's (nothing
//     is rewritten, no eventId is reused);
//   - no delayed message is stored or applied twice, and (at the end)
//     every stored one was applied exactly once;
//   - every topic file holds exactly the messages the binlog gives its
//     topic (eventIds and record bytes), deleted topics left no directory,
//     the topic list (meta) is exactly the binlog's live topics, and
//     expired topics were reaped;
//   - a killed server's meta holds no topic or delay the binlog lacks, and
//     after the final clean stop meta matches the binlog exactly (topics,
//     delay queue, checkpoint);
//   - the slave's binlog is a byte prefix of the master's, equal once it
//     caught up, and its topics hold the same messages;
//   - the subscribers received every message of their topic once, in
//     order, across all restarts.
//
// It ends with one summary line. Exit status: 0 every check passed, 1 a
// check failed (the work directory is kept and named), 2 bad flags.
//
// Usage:
//
//	go run ./cmd/smss-torture -cycles 100 -seed 7
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

type options struct {
	cycles   int
	duration time.Duration
	dir      string
	keep     bool
	seed     uint64
	smss     string
	verbose  bool
	maxWait  time.Duration // longest load phase before a kill
	pace     time.Duration // publishers pause up to this between requests
}

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

func mainErr(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("smss-torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.cycles, "cycles", 20, "kill cycles to run; 0 runs until -duration")
	fs.DurationVar(&o.duration, "duration", 0, "start no new cycle after this much time (0: no limit)")
	fs.StringVar(&o.dir, "dir", "", "work directory (default: a new temporary directory, removed after a passing run)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory after a passing run")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed (0: from the clock; printed in the summary)")
	fs.StringVar(&o.smss, "smss", "", "smss binary (default: go build ./cmd/smss from the current directory)")
	fs.BoolVar(&o.verbose, "v", false, "print a line per cycle")
	fs.DurationVar(&o.maxWait, "maxload", 1500*time.Millisecond, "longest load phase of a cycle before the kill")
	fs.DurationVar(&o.pace, "pace", 10*time.Millisecond, "publishers pause a random time up to this between requests (0: full speed)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || o.cycles < 0 || (o.cycles == 0 && o.duration <= 0) || o.maxWait <= 0 || o.pace < 0 {
		fmt.Fprintln(stderr, "smss-torture: need -cycles > 0 or -duration > 0, a positive -maxload and no arguments")
		fs.Usage()
		return 2
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	dir, temp := o.dir, o.dir == ""
	if temp {
		d, err := os.MkdirTemp("", "smss-torture-")
		if err != nil {
			fmt.Fprintln(stderr, "smss-torture:", err)
			return 1
		}
		dir = d
	}
	r, err := newRun(o, dir, stdout)
	if err == nil {
		err = r.run()
	}
	if err != nil {
		fmt.Fprintf(stdout, "smss-torture FAIL seed=%d: %v\n", o.seed, err)
		fmt.Fprintf(stdout, "smss-torture: work directory kept: %s\n", dir)
		return 1
	}
	if temp && !o.keep {
		os.RemoveAll(dir)
	}
	return 0
}

// freePort returns a loopback port nothing listens on right now; the
// master keeps it across restarts because the slave dials it.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// buildSmss builds the server from the module in the current directory.
func buildSmss(dir string) (string, error) {
	out := filepath.Join(dir, "smss")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/smss")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/smss (run from the module root or pass -smss): %v\n%s", err, b)
	}
	return out, nil
}
