//go:build unix

package testserver

import (
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

// Main runs the tests and removes the binaries built for them.
func Main(m *testing.M) { smsstest.Main(m) }

// Binary returns the path of an smss binary built from this module, or the
// one named by the environment variable SMSS_TEST_BIN.
func Binary(t testing.TB) string {
	t.Helper()
	return smsstest.SmssBinary(t)
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
	Args []string
	port int
	proc *smsstest.Proc
}

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
	smsstest.WriteConfig(t, s.Dir, s.port, s.Extra)
	s.proc = smsstest.StartSmss(t, s.Dir, s.Args...)
	s.Addr = s.proc.Addr
	_, p, err := net.SplitHostPort(s.Addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", s.Addr, err)
	}
	s.port, _ = strconv.Atoi(p)
}

// Kill stops the server with SIGKILL.
func (s *Server) Kill() { s.proc.Kill() }

// Stop stops the server with SIGTERM and waits for it to exit.
func (s *Server) Stop() {
	s.t.Helper()
	s.proc.Signal(syscall.SIGTERM)
	s.proc.Wait(30 * time.Second)
}

// Restart starts the server again on the same data directory and port
// (the port was free a moment ago; a collision fails the test).
func (s *Server) Restart() {
	s.t.Helper()
	s.start()
}

// Log returns the server's output so far.
func (s *Server) Log() string { return s.proc.Out.String() }

// Freeze stops the server with SIGSTOP: its port still accepts
// connections but nothing is answered, as when its host hangs. Thaw
// continues it.
func (s *Server) Freeze() { s.proc.Stop() }

// Thaw continues a server stopped by Freeze.
func (s *Server) Thaw() { s.proc.Cont() }
