package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/smssmq/smss/config"
)

// sysmonSetting is what runtime.keepSysmonAwake adds to GODEBUG.
//
// Why: when every P of the Go runtime is idle, its monitor thread (sysmon)
// leaves its 20 µs–10 ms polling loop for a deep sleep, and the next
// system call of any goroutine wakes it again (a futex wake inside that
// call) and resets it to 20 µs polling. A server that waits on the network
// goes idle between requests all the time, from a few messages a second
// up to 64 busy connections on 2 CPUs, so every request paid for a sysmon
// wake-up and a burst of 20 µs sleeps: about a third of smss' CPU per
// message at 1,000 msg/s, and 15–23 % with 64 publishing connections
// (BENCHMARKS.md). The runtime keeps sysmon out of the deep sleep while
// GODEBUG's schedtrace is on, so that it can print on time; with the
// largest period it prints a line on stderr once every 24.8 days of
// machine uptime. Idle, sysmon then polls every 10 ms.
//
// The runtime reads schedtrace only when the process starts, hence the
// re-execution.
const sysmonSetting = "schedtrace=2147483647"

// keepSysmonAwake re-executes the server with sysmonSetting added to
// GODEBUG, unless runtime.keepSysmonAwake is false in the configuration
// args name, GODEBUG already sets schedtrace (the operator's choice
// stands), or the arguments or configuration are bad (run reports those).
// It returns only when it did not re-execute.
func keepSysmonAwake(args []string, stderr io.Writer) {
	fl, code := parseFlags(args[1:], io.Discard)
	if code >= 0 {
		return
	}
	cfg, err := config.Load(fl.configPath)
	if err != nil || !cfg.Runtime.KeepSysmonAwake {
		return
	}
	env := sysmonEnv(os.Environ())
	if env == nil {
		return
	}
	exe := "/proc/self/exe" // this binary even if its file was replaced since
	if _, err := os.Stat(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			return
		}
	}
	err = syscall.Exec(exe, args, env)
	fmt.Fprintf(stderr, "smss: runtime.keepSysmonAwake: re-executing with GODEBUG=%s failed (%v); continuing without it\n", sysmonSetting, err)
}

// sysmonEnv returns environ with sysmonSetting added to GODEBUG, or nil if
// GODEBUG already sets schedtrace. Like the runtime it reads the first
// GODEBUG entry.
func sysmonEnv(environ []string) []string {
	const key = "GODEBUG="
	at := -1
	for i, kv := range environ {
		if strings.HasPrefix(kv, key) {
			at = i
			break
		}
	}
	if at < 0 {
		return append(environ[:len(environ):len(environ)], key+sysmonSetting)
	}
	current := environ[at][len(key):]
	if godebugSets(current, "schedtrace") {
		return nil
	}
	out := append([]string(nil), environ...)
	if current == "" {
		out[at] = key + sysmonSetting
	} else {
		out[at] = key + current + "," + sysmonSetting
	}
	return out
}

// godebugSets reports whether the GODEBUG value sets name.
func godebugSets(godebug, name string) bool {
	for _, field := range strings.Split(godebug, ",") {
		if k, _, ok := strings.Cut(field, "="); ok && k == name {
			return true
		}
	}
	return false
}

// sysmonAwake reports whether this process runs with sysmonSetting: what
// the start-up log says about runtime.keepSysmonAwake.
func sysmonAwake() bool {
	return strings.Contains(","+os.Getenv("GODEBUG")+",", ","+sysmonSetting+",")
}
