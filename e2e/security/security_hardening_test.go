package security

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// startWithNoFile is start with the process's file descriptor limit (soft
// and hard: Go raises the soft one to the hard one) set to nofile.
func startWithNoFile(t *testing.T, dir string, nofile int) *kit.Proc {
	t.Helper()
	script := fmt.Sprintf(`ulimit -S -n %d && ulimit -H -n %d && exec "$0" -config "$1"`, nofile, nofile)
	cmd := exec.Command("/bin/sh", "-c", script, smsstest.SmssBinary(t), filepath.Join(dir, "config.yaml"))
	cmd.Dir = dir
	return kit.StartCmd(t, dir, cmd)
}

// High 2 of issue 18: a flood of the admin port (connections that send
// nothing, as many as the process has file descriptors) must not touch the
// message port: clients still connect, publish and create topics.
func TestAdminFloodLeavesMessagePortAlone(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh for ulimit")
	}
	const nofile = 256
	dir := t.TempDir()
	kit.WriteConfig(t, dir, kit.AdminConfig(kit.AdminToken))
	p := startWithNoFile(t, dir, nofile)
	admin := kit.AdminAddr(t, p)

	c := kit.Dial(t, p.Addr)
	if err := c.Create("flood", 0); err != nil {
		t.Fatal(err)
	}
	var flood []net.Conn
	defer func() {
		for _, f := range flood {
			f.Close()
		}
	}()
	for range 2 * nofile {
		f, err := net.DialTimeout("tcp", admin, 5*time.Second)
		if err != nil {
			break // the backlog is full: the flood is as big as it gets
		}
		flood = append(flood, f)
	}
	// Give the admin server time to accept all it will: the log line of
	// its refusals, or of its failures, shows it got to them.
	if !smsstest.Poll(10*time.Second, func() bool {
		out := p.Out.String()
		return strings.Contains(out, "admin connection refused") || strings.Contains(out, "too many open files")
	}) {
		t.Fatalf("the admin server never reached its cap or the process limit:\n%s", p.Out.String())
	}
	// The message port still serves new clients and writes.
	for i := range 20 {
		cl := kit.Dial(t, p.Addr)
		if err := cl.Pub("flood", kit.Record(nil, fmt.Sprint("m", i))); err != nil {
			t.Fatalf("publish %d during the admin flood: %v\n%s", i, err, kit.Tail(p.Out.String(), 3000))
		}
		if err := cl.Create(fmt.Sprint("t", i), 0); err != nil {
			t.Fatalf("create %d during the admin flood: %v", i, err)
		}
	}
	if strings.Contains(p.Out.String(), "too many open files") {
		t.Fatalf("the process ran out of file descriptors:\n%s", kit.Tail(p.Out.String(), 3000))
	}
}

// Data and topic files are private to the server's user (0600 in 0700
// directories, store.path itself 0700), or group-readable with
// store.groupReadable; never readable by others.
func TestDataFilesPrivate(t *testing.T) {
	for _, tc := range []struct {
		name          string
		extra         string
		file, dir     os.FileMode
		rootPerm      os.FileMode
		preexistsWide bool
	}{
		{"private", "", 0o600, 0o700, 0o700, false},
		{"private, root was 0755", "", 0o600, 0o700, 0o700, true},
		{"group readable", "  groupReadable: true\n", 0o640, 0o750, 0o750, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			if tc.preexistsWide {
				if err := os.Mkdir(data, 0o755); err != nil {
					t.Fatal(err)
				}
				os.Chmod(data, 0o755) // whatever the umask
			}
			cfg := fmt.Sprintf("host: 127.0.0.1\nport: 0\nlog:\n  path: stdout\n  sample: 0\nstore:\n  path: %s\n%s", data, tc.extra)
			if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			p := kit.Start(t, dir)
			c := kit.Dial(t, p.Addr)
			if err := c.Create("orders", 0); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := c.Pub("orders", kit.Record(nil, fmt.Sprint("secret message ", i))); err != nil {
					t.Fatal(err)
				}
			}
			p.Term()
			info, err := os.Stat(data)
			if err != nil {
				t.Fatal(err)
			}
			if perm := info.Mode().Perm(); perm != tc.rootPerm {
				t.Fatalf("store.path mode %v, want %v", perm, tc.rootPerm)
			}
			files := 0
			err = filepath.Walk(data, func(path string, info os.FileInfo, err error) error {
				if err != nil || path == data {
					return err
				}
				rel, _ := filepath.Rel(data, path)
				perm := info.Mode().Perm()
				if strings.HasPrefix(rel, "meta") {
					// The meta store (badger) picks its own modes; store.path
					// keeps others out.
					return nil
				}
				want := tc.file
				if info.IsDir() {
					want = tc.dir
				} else {
					files++
				}
				// The umask may narrow the mode, never widen it.
				if perm&^want != 0 {
					t.Errorf("%s: mode %v, want at most %v", rel, perm, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if files == 0 {
				t.Fatal("no data files found")
			}
		})
	}
}

// The hardening keys reach the real server: auth.loginTimeoutMs,
// auth.maxStartsPerSecond, limit.maxConnsPerIP, and the fake-salt secret
// in store.path that keeps an unknown user's salt across a restart.
func TestSecurityHardeningKeysWired(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users.json")
	authtest.WriteUsers(t, users, authtest.User{Name: "alice", Password: "pw", Roles: []string{"admin"}})
	kit.WriteConfig(t, dir, fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\n  loginTimeoutMs: 400\n  maxStartsPerSecond: 3\n"+
		"limit:\n  maxConnsPerIP: 3\n", users))
	p := kit.Start(t, dir)
	s := &secured{Proc: p, users: users}

	// An unknown user's salt, and the secret's mode.
	saltOf := func(s *secured) string {
		t.Helper()
		c := s.connect(t, false, nil)
		reply, err := c.RoundTrip(kit.Must(protocol.AppendAuthStart(nil, protocol.MechSCRAMSHA256, []byte("n,,n=mallory,r=abcdefgh"))), protocol.ReplyJSON)
		if err != nil {
			t.Fatalf("auth start: %v", err)
		}
		for _, f := range strings.Split(string(reply), ",") {
			if strings.HasPrefix(f, "s=") {
				return f
			}
		}
		t.Fatalf("no salt in %q", reply)
		return ""
	}
	salt := saltOf(s)
	info, err := os.Stat(filepath.Join(dir, "data", "auth.secret"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("auth.secret: %v, %v", info, err)
	}

	// Starts past the rate are refused (two used above and below).
	c := s.connect(t, false, nil)
	authStart := kit.Must(protocol.AppendAuthStart(nil, protocol.MechSCRAMSHA256, []byte("n,,n=alice,r=abcdefgh")))
	refused := false
	for range 4 {
		if _, err := c.RoundTrip(authStart, protocol.ReplyJSON); err != nil {
			if !strings.Contains(err.Error(), "too many failed authentication attempts") {
				t.Fatalf("start: %v", err)
			}
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("5 auth starts within a second were all served with maxStartsPerSecond 3")
	}

	// The login deadline closes a connection that only sends alives.
	c = s.connect(t, false, nil)
	began := time.Now()
	var aliveErr error
	for aliveErr == nil && time.Since(began) < 20*time.Second {
		_, aliveErr = c.RoundTrip(kit.Must(protocol.AppendAlive(nil, nil)), protocol.ReplyPlain)
	}
	if el := time.Since(began); aliveErr == nil || el < 350*time.Millisecond || el > 5*time.Second {
		t.Fatalf("alive-only connection: %v after %v, want closed after 400ms", aliveErr, el)
	}

	// Three connections from this address; the fourth is refused at accept.
	var held []*kit.Client
	for range 3 {
		var h *kit.Client
		if !smsstest.Poll(10*time.Second, func() bool {
			// The closed ones above may not be counted out yet.
			h = s.connect(t, false, nil)
			if _, err := h.RoundTrip(kit.Must(protocol.AppendAlive(nil, nil)), protocol.ReplyPlain); err != nil {
				return false
			}
			return true
		}) {
			t.Fatal("no slot for a new connection")
		}
		held = append(held, h)
	}
	over := s.connect(t, false, nil)
	if _, err := over.RoundTrip(kit.Must(protocol.AppendAlive(nil, nil)), protocol.ReplyPlain); err == nil {
		t.Fatal("a 4th connection from one address was served with maxConnsPerIP 3")
	}
	for _, h := range held {
		h.C.Close()
	}

	// After a restart, the unknown user's salt is the same.
	p.Term()
	p2 := kit.Start(t, dir)
	if got := saltOf(&secured{Proc: p2, users: users}); got != salt {
		t.Fatalf("unknown user's salt %s, %s before the restart", got, salt)
	}
}

// vmHWM is the peak resident set of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb << 10
		}
	}
	t.Skip("no VmHWM")
	return 0
}

// High 3 of issue 18: requests stalled before login, each declaring a
// 64 KiB topic field and sending most of it, do not make the server
// allocate it (2000 of them took about 150 MB more before: the field plus
// a 16 KiB read buffer each).
func TestStalledPreAuthRequestsDoNotGrowMemory(t *testing.T) {
	const n = 2000
	const budget = 80 << 20 // about 40 MiB fixed (goroutines, linger buffers), 130+ unfixed
	dir := t.TempDir()
	users := filepath.Join(dir, "users.json")
	authtest.WriteUsers(t, users, authtest.User{Name: "alice", Password: "pw"})
	kit.WriteConfig(t, dir, fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\nlimit:\n  maxConnsPerIP: 5000\n", users))
	p := kit.Start(t, dir)
	base := vmHWM(t, p.Cmd.Process.Pid)
	// The header and most of the topic field, then a stall: an unfixed
	// server reads what came into the buffer it allocated for the field,
	// which makes it resident.
	head := protocol.Header{Cmd: protocol.CmdDelete, TopicLen: 0xffff}.AppendTo(nil)
	head = append(head, make([]byte, 60<<10)...)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.DialTimeout("tcp", p.Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		// A fixed server refuses after the header and closes: the rest of
		// the write may fail.
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		c.Write(head)
	}
	// Every request ends: refused at once, or (unfixed) at the server's
	// read timeout. The peak memory is what counts.
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		io.Copy(io.Discard, c)
	}
	if grew := vmHWM(t, p.Cmd.Process.Pid) - base; grew > budget {
		t.Fatalf("%d stalled unauthenticated requests raised the peak RSS by %d MiB (budget %d MiB)", n, grew>>20, budget>>20)
	} else {
		t.Logf("peak RSS grew by %d MiB for %d stalled requests", grew>>20, n)
	}
}
