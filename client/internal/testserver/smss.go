package testserver

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildDir  string
	binPath   string
	buildErr  error
)

// Main runs the tests and removes the binaries built for them.
func Main(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// Binary returns the path of an smss binary built from this module, or the
// one named by the environment variable SMSS_TEST_BIN.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if bin := os.Getenv("SMSS_TEST_BIN"); bin != "" {
			binPath = bin
			return
		}
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "smss-client-test"); buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "smss")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/smss")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/smss: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Server is a running smss process.
type Server struct {
	t     testing.TB
	Dir   string // holds config.yaml and data/
	Addr  string // host:port it listens on
	Extra string // YAML appended to the config (top-level keys)
	// Args are command-line arguments added to every (re)start, e.g. the
	// -role slave flags; clear them before Restart to promote a slave the
	// way an operator does today (restart it as a master on its port).
	Args   []string
	port   int
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
	err    error
}

var listenRe = regexp.MustCompile(`smss listening.*addr=(\S+)`)

// Start starts a master on a free port with its data in a fresh directory.
// extra is YAML appended to the config (e.g. "timeout:\n  server:\n    alive: 500\n").
func Start(t testing.TB, extra string) *Server {
	t.Helper()
	s := &Server{t: t, Dir: t.TempDir(), Extra: extra}
	s.start()
	return s
}

// StartSlave starts a slave of master (from eventId 0) on a free port with
// its data in a fresh directory. extra is as for Start.
func StartSlave(t testing.TB, master *Server, extra string) *Server {
	t.Helper()
	s := &Server{t: t, Dir: t.TempDir(), Extra: extra,
		Args: []string{"-role", "slave", "-host", "127.0.0.1", "-port", strconv.Itoa(master.port), "-event", "0"}}
	s.start()
	return s
}

func (s *Server) start() {
	t := s.t
	t.Helper()
	cfg := fmt.Sprintf("host: 127.0.0.1\nport: %d\nlog:\n  path: stdout\n  sample: 0\nstore:\n  path: %s\n%s",
		s.port, filepath.Join(s.Dir, "data"), s.Extra)
	path := filepath.Join(s.Dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s.out = &syncBuffer{}
	s.exited = make(chan struct{})
	s.cmd = exec.Command(Binary(t), append([]string{"-config", path}, s.Args...)...)
	s.cmd.Dir = s.Dir
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd, exited := s.cmd, s.exited
	go func() {
		s.err = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { kill(cmd, exited) })
	deadline := time.After(30 * time.Second)
	for {
		if m := listenRe.FindStringSubmatch(s.out.String()); m != nil {
			s.Addr = m[1]
			_, p, err := net.SplitHostPort(s.Addr)
			if err != nil {
				t.Fatalf("listen address %q: %v", s.Addr, err)
			}
			s.port, _ = strconv.Atoi(p)
			return
		}
		select {
		case <-exited:
			t.Fatalf("smss exited during start-up: %v\n%s", s.err, s.out.String())
		case <-deadline:
			t.Fatalf("smss did not listen within 30 s:\n%s", s.out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func kill(cmd *exec.Cmd, exited chan struct{}) {
	select {
	case <-exited:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Kill stops the server with SIGKILL.
func (s *Server) Kill() { kill(s.cmd, s.exited) }

// Stop stops the server with SIGTERM and waits for a clean exit.
func (s *Server) Stop() {
	s.t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.t.Fatalf("smss did not stop within 30 s:\n%s", s.out.String())
	}
}

// Restart starts the server again on the same data directory and port
// (the port was free a moment ago; a collision fails the test).
func (s *Server) Restart() {
	s.t.Helper()
	s.start()
}

// Log returns the server's output so far.
func (s *Server) Log() string { return s.out.String() }
