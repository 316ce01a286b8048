package admin

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

// schedRe matches the runtime's own scheduler trace (GODEBUG=schedtrace),
// which reports the GOMAXPROCS the process runs with, independently of
// anything smss logs.
var schedRe = regexp.MustCompile(`SCHED \d+ms: gomaxprocs=(\d+)`)

// TestMaxProcs: server.maxProcs sets the server process's GOMAXPROCS, an
// explicit GOMAXPROCS in the environment wins over it, and 0 keeps Go's
// default (issue 24). The value is read back from the runtime's scheduler
// trace of the real process, after the server listens.
func TestMaxProcs(t *testing.T) {
	def := runtime.NumCPU() // the child's default, on a machine without a CPU quota
	other := def + 1        // never the default, so an ignored key shows
	for _, tc := range []struct {
		name     string
		key      int
		env      string // GOMAXPROCS of the child, "" = unset
		want     int    // 0 = the runtime default (not checked against NumCPU)
		wantFrom string
	}{
		{"key sets it", other, "", other, "server.maxProcs"},
		{"key 1", 1, "", 1, "server.maxProcs"},
		{"environment wins", other, "1", 1, "GOMAXPROCS"},
		{"0 keeps the default", 0, "", 0, "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			kit.WriteConfig(t, dir, fmt.Sprintf("server:\n  maxProcs: %d\n", tc.key))
			env := []string{"GODEBUG=schedtrace=20"}
			if tc.env != "" {
				env = append(env, "GOMAXPROCS="+tc.env)
			}
			p := startWithEnv(t, dir, env)
			line := waitOutput(t, p, func(out string) string {
				for _, l := range strings.Split(out, "\n") {
					if strings.Contains(l, "msg=gomaxprocs") {
						return l
					}
				}
				return ""
			})
			if !strings.Contains(line, "from="+tc.wantFrom+" ") {
				t.Errorf("start-up line %q, want from=%s", line, tc.wantFrom)
			}
			// The first trace lines can predate main; take one printed
			// after the server listened.
			at := strings.Index(p.Out.String(), "smss listening")
			traced := waitOutput(t, p, func(out string) string {
				m := schedRe.FindStringSubmatch(out[at:])
				if m == nil {
					return ""
				}
				return m[1]
			})
			got, _ := strconv.Atoi(traced)
			if tc.want != 0 && got != tc.want {
				t.Errorf("runtime reports gomaxprocs=%d, want %d", got, tc.want)
			}
			if !strings.Contains(line, fmt.Sprintf("value=%d ", got)) {
				t.Errorf("start-up line %q does not show the runtime's gomaxprocs=%d", line, got)
			}
			p.Term()
		})
	}
}

// startWithEnv is start (harness_test.go) with extra environment
// variables for the server process.
func startWithEnv(t *testing.T, dir string, env []string) *kit.Proc {
	t.Helper()
	cmd := smsstest.SmssCommand(t, dir)
	cmd.Env = append(os.Environ(), env...)
	return kit.StartCmd(t, dir, cmd)
}

// waitOutput polls p's output until find returns something, failing the
// test if the server exits or 30 s pass first.
func waitOutput(t *testing.T, p *kit.Proc, find func(string) string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if s := find(p.Out.String()); s != "" {
			return s
		}
		select {
		case <-p.Exited():
			t.Fatalf("server exited: %v\n%s", p.Err(), p.Out.String())
		case <-deadline:
			t.Fatalf("condition not met within 30 s:\n%s", p.Out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
