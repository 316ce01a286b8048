//go:build unix

package smsstest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

var readyRe = regexp.MustCompile(`ready at (\S+)`)

// shell runs script under /bin/sh.
func shell(script string) *exec.Cmd { return exec.Command("/bin/sh", "-c", script) }

// procState is the state letter of pid in /proc (R, S, T, Z, …), or "" if
// it cannot be read.
func procState(pid int) string {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(st), ')')
	if i < 0 || i+2 >= len(st) {
		return ""
	}
	return string(st[i+2])
}

func TestStartProcReadyAndSignals(t *testing.T) {
	// trap: SIGTERM is a clean exit; sleep in the background so the trap
	// runs at once.
	p := StartProc(t, shell(`trap 'echo bye; exit 0' TERM; echo "ready at 127.0.0.1:7"; while :; do sleep 1 & wait; done`), readyRe)
	if p.Addr != "127.0.0.1:7" {
		t.Errorf("Addr %q", p.Addr)
	}
	if p.Err() != nil {
		t.Errorf("Err of a running process: %v", p.Err())
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		p.Stop()
		WaitFor(t, 5*time.Second, "the stopped state", func() bool { return procState(p.Pid()) == "T" })
		p.Cont()
		WaitFor(t, 5*time.Second, "the continued state", func() bool { return procState(p.Pid()) != "T" })
	}
	p.Term()
	select {
	case <-p.Exited():
	default:
		t.Fatal("Term returned before the exit")
	}
	if p.Err() != nil || !strings.Contains(p.Out.String(), "bye") {
		t.Errorf("exit %v, output %q", p.Err(), p.Out.String())
	}
}

func TestStartProcKill(t *testing.T) {
	p := StartProc(t, shell(`echo "ready at x"; exec sleep 100`), readyRe)
	p.Kill()
	if p.Err() == nil {
		t.Error("a killed process exited cleanly")
	}
	p.Kill() // again: a no-op
}

func TestStartProcFailures(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{"exits", `echo oops; exit 3`, "exited during start-up"},
		{"termFails", `echo "ready at x"; exec sleep 100`, "exit after SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := failure(t, func(tb testing.TB) {
				p := StartProc(tb, shell(tc.script), readyRe)
				p.Term()
			})
			if !strings.Contains(msg, tc.want) {
				t.Errorf("failure %q, want %q", msg, tc.want)
			}
		})
	}
}

// The cleanup ends a process the test left running, even a stopped one.
func TestStartProcCleanup(t *testing.T) {
	var p *Proc
	t.Run("leaves it running", func(t *testing.T) {
		p = StartProc(t, shell(`echo "ready at x"; exec sleep 100`), readyRe)
		p.Stop()
	})
	select {
	case <-p.Exited():
	default:
		t.Fatal("the process outlived its test")
	}
}

func TestFreePort(t *testing.T) {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// TestFreePortReserved: a port comes from outside the ephemeral range, is
// never handed out twice, and is not one another process reserved or one
// something listens on.
func TestFreePortReserved(t *testing.T) {
	lo, hi := reservablePorts()
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if p < lo || p > hi {
			t.Fatalf("port %d outside %d..%d", p, lo, hi)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	if b, err := os.ReadFile(portRangeFile); err == nil {
		var el, eh int
		if _, err := fmt.Sscan(string(b), &el, &eh); err == nil && lo <= eh && hi >= el {
			t.Fatalf("ports %d..%d overlap the ephemeral range %d..%d", lo, hi, el, eh)
		}
	}
	// Another process's reservation: the same lock through another open
	// file, which flock treats as another owner.
	next := func() int {
		ports.mu.Lock()
		defer ports.mu.Unlock()
		for p := ports.next; ; p++ {
			if p > hi {
				p = lo
			}
			if ports.held[p] == nil {
				ports.next = p
				return p
			}
		}
	}
	q := next()
	f, err := lockPortFile(filepath.Join(os.TempDir(), "smsstest-ports", strconv.Itoa(q)))
	if err != nil {
		t.Fatalf("lock port %d as another process: %v", q, err)
	}
	defer f.Close()
	if p := FreePort(t); p == q {
		t.Fatalf("port %d handed out although another process reserved it", q)
	}
	// A port something listens on.
	r := next()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", r))
	if err != nil {
		t.Skipf("port %d taken meanwhile: %v", r, err)
	}
	defer l.Close()
	if p := FreePort(t); p == r {
		t.Fatalf("port %d handed out although something listens on it", r)
	}
}

func TestStartSmss(t *testing.T) {
	if testing.Short() {
		t.Skip("builds smss")
	}
	dir := t.TempDir()
	WriteConfig(t, dir, 0, "timeout:\n  server:\n    alive: 200\n")
	p := StartSmss(t, dir)
	c, err := net.DialTimeout("tcp", p.Addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", p.Addr, err)
	}
	c.Close()
	if SmssBinary(t) != SmssBinary(t) {
		t.Error("the binary was built twice")
	}
	p.Term()
	// Again on the same data, on a fixed port.
	port := FreePort(t)
	WriteConfig(t, dir, port, "")
	p = StartSmss(t, dir)
	if want := fmt.Sprintf("127.0.0.1:%d", port); p.Addr != want {
		t.Errorf("listening on %s, want %s", p.Addr, want)
	}
	p.Kill()
}

// TestStartRedis: the server answers once StartRedis returns, stops
// answering while paused, and is gone after Kill.
func TestStartRedis(t *testing.T) {
	r := StartRedis(t)
	if err := r.ping(); err != nil {
		t.Fatalf("ping after start: %v", err)
	}
	r.Pause()
	if err := r.ping(); err == nil {
		t.Error("a paused server answered")
	}
	r.Resume()
	WaitFor(t, 10*time.Second, "redis answering after resume", func() bool { return r.ping() == nil })
	r.Kill()
	if err := r.ping(); err == nil {
		t.Error("a killed server answered")
	}
}

func TestBinaryName(t *testing.T) {
	for pkg, want := range map[string]string{
		"./cmd/smss":                        "smss",
		"github.com/nats-io/nats-server/v2": "nats-server",
		"example.com/tool/v":                "v",
		"example.com/v2x":                   "v2x",
	} {
		if got := binaryName(pkg); got != want {
			t.Errorf("binaryName(%q) = %q, want %q", pkg, got, want)
		}
	}
}
