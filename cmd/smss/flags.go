package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
)

const (
	roleMaster = "master"
	roleSlave  = "slave"
	// roleAuto: the node is one of a cluster (the config's cluster
	// section) and the cluster decides its role (cluster.go).
	roleAuto = "auto"
)

// flags are the command-line options of docs/protocol.md §9.2 plus -config. -host and
// -port name the master a slave replicates from, not the listen address
// (that is host/port in the config file).
type flags struct {
	role       string
	masterHost string
	masterPort int
	event      int64
	rejoin     bool
	configPath string
	set        map[string]bool // flags given explicitly
}

// parseFlags returns code -1 to continue, otherwise the exit status (usage
// errors have been printed to stderr).
func parseFlags(args []string, stderr io.Writer) (*flags, int) {
	fl := &flags{set: map[string]bool{}}
	fs := flag.NewFlagSet("smss", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&fl.role, "role", roleMaster, "master, slave, or auto (a node of the cluster in the config's cluster section, which decides the role)")
	fs.StringVar(&fl.masterHost, "host", "", "master host to replicate from (slave only)")
	fs.IntVar(&fl.masterPort, "port", 12301, "master port to replicate from (slave only; the listen port is the config key port)")
	fs.Int64Var(&fl.event, "event", 0, "last eventId already replicated (slave only)")
	fs.BoolVar(&fl.rejoin, "rejoin", false, "slave only: if this node's binlog has diverged from the master's, move the divergent tail aside into <store.path>/diverged/ and follow (without it such a node refuses to start)")
	fs.StringVar(&fl.configPath, "config", "", "config file (default ./config/config.yaml if present, else built-in defaults)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: smss [-config PATH] [-role master|slave|auto] [-host H -port P -event E [-rejoin]]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitOK
		}
		return nil, exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "smss: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return nil, exitUsage
	}
	fs.Visit(func(f *flag.Flag) { fl.set[f.Name] = true })
	if fl.event < 0 {
		fmt.Fprintf(stderr, "smss: -event must be >= 0 (got %d)\n", fl.event)
		return nil, exitUsage
	}
	if fl.role != roleMaster && fl.role != roleSlave && fl.role != roleAuto {
		// A typo must not start a writable master next to the real one
		// (split brain): refuse instead of guessing.
		fmt.Fprintf(stderr, "smss: -role must be %s, %s or %s (got %q)\n", roleMaster, roleSlave, roleAuto, fl.role)
		return nil, exitUsage
	}
	if fl.masterPort < 1 || fl.masterPort > 65535 {
		fmt.Fprintf(stderr, "smss: -port must be between 1 and 65535 (got %d)\n", fl.masterPort)
		return nil, exitUsage
	}
	return fl, -1
}

// resolveRole returns the role (parseFlags refused any other value than
// master or slave, unlike the original, which ran anything but "slave" as a
// master) and logs what a user might not expect.
func (fl *flags) resolveRole(logger *slog.Logger) string {
	role := fl.role
	if role == roleMaster && (fl.set["host"] || fl.set["port"] || fl.set["event"]) {
		logger.Warn("-host, -port and -event apply to -role slave only; ignored")
	}
	return role
}
