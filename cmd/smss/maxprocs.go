package main

import (
	"log/slog"
	"os"
	"runtime"
	"strconv"
)

// Where the GOMAXPROCS in effect came from, as logged at start-up (from=):
// the environment variable, the key, or the runtime's default.
const (
	procsFromEnv     = "GOMAXPROCS"
	procsFromKey     = "server.maxProcs"
	procsFromDefault = "default"
)

// applyMaxProcs sets the process's GOMAXPROCS from server.maxProcs (issue
// 24: on a small machine one P spends far less CPU per message at low
// rates, because fewer threads are woken per message). An explicit
// GOMAXPROCS in the environment wins over the key: it is the runtime's own
// knob, set per process by whoever starts it (a unit file, a container, a
// benchmark), and the runtime has already applied it before main runs. A
// GOMAXPROCS the runtime ignores (not a positive integer) does not win.
// maxProcs 0 leaves Go's default (every core the process may use, which
// the runtime keeps adjusting to a container's CPU limit). It returns the
// value in effect, read back from the runtime, and where it came from.
func applyMaxProcs(maxProcs int, getenv func(string) string) (int, string) {
	switch {
	case envProcs(getenv("GOMAXPROCS")):
		return runtime.GOMAXPROCS(0), procsFromEnv
	case maxProcs > 0:
		runtime.GOMAXPROCS(maxProcs)
		return runtime.GOMAXPROCS(0), procsFromKey
	default:
		return runtime.GOMAXPROCS(0), procsFromDefault
	}
}

// logMaxProcs applies server.maxProcs and logs the result.
func logMaxProcs(maxProcs int, logger *slog.Logger) {
	n, from := applyMaxProcs(maxProcs, os.Getenv)
	logger.Info("gomaxprocs", "value", n, "from", from, "server.maxProcs", maxProcs, "cpus", runtime.NumCPU())
}

// envProcs reports whether the runtime took GOMAXPROCS from the
// environment: it does for a positive integer and ignores anything else.
func envProcs(v string) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n > 0
}
