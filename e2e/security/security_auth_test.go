package security

import (
	"bytes"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/protocol"
)

const e2ePassword = "e2e-Secret-Pa55"

// Refused logins over real TCP and TLS, and no secret in the bytes of the
// handshakes (below TLS too) or in the server's log.
func TestSecurityLoginRefusalsAndSecrets(t *testing.T) {
	s := startSecured(t, 1000, "",
		authtest.User{Name: "alice", Password: e2ePassword, Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "dis", Password: e2ePassword, Roles: []string{auth.RoleAdmin}, Disabled: true})
	var wire []byte
	for _, useTLS := range []bool{false, true} {
		for _, tc := range []struct{ name, user, pw, want string }{
			{"ok", "alice", e2ePassword, ""},
			{"wrong password", "alice", e2ePassword + "-", "authentication failed"},
			{"unknown user", "mallory", e2ePassword, "authentication failed"},
			{"disabled user", "dis", e2ePassword, `authentication failed: user "dis" is disabled`},
		} {
			t.Run(fmt.Sprintf("%s/tls=%v", tc.name, useTLS), func(t *testing.T) {
				var rec *recorder
				c := s.connect(t, useTLS, &rec)
				err := c.Login(t, tc.user, tc.pw)
				wire = append(wire, rec.bytes()...)
				if tc.want == "" {
					if err != nil {
						t.Fatal(err)
					}
					if err := c.Create("orders-"+fmt.Sprint(useTLS), 0); err != nil {
						t.Fatal(err)
					}
					return
				}
				var be *protocol.BizError
				if !errors.As(err, &be) || be.Msg != tc.want {
					t.Fatalf("login: %v, want %q", err, tc.want)
				}
				if err := c.Create("x", 0); err == nil || err.Error() != "authentication required" {
					t.Fatalf("create after a refused login: %v", err)
				}
			})
		}
	}

	// A replayed handshake: record a successful one, replay its client bytes
	// on a new connection. The server nonce differs: refused.
	var rec *recorder
	c := s.connect(t, false, &rec)
	if err := c.Login(t, "alice", e2ePassword); err != nil {
		t.Fatal(err)
	}
	sent := clientBytes(t, rec.bytes())
	replay := s.connect(t, false, nil)
	if _, err := replay.C.Write(sent); err != nil {
		t.Fatal(err)
	}
	if _, err := protocol.ReadReply(replay.R, protocol.ReplyJSON, protocol.MaxAuthMessage); err != nil {
		t.Fatalf("replayed client-first: %v", err)
	}
	if _, err := protocol.ReadReply(replay.R, protocol.ReplyJSON, protocol.MaxAuthMessage); !errors.Is(err, protocol.ErrAuthFailed) {
		t.Fatalf("replayed client-final: %v, want authentication failed", err)
	}
	if err := replay.Create("x", 0); err == nil || err.Error() != "authentication required" {
		t.Fatalf("command after a replayed handshake: %v", err)
	}

	// The plain handshakes really are in the capture; the secrets are not,
	// neither there nor in the server's log.
	if !bytes.Contains(wire, []byte("n=alice")) || !bytes.Contains(wire, []byte(",s=")) {
		t.Fatalf("the capture holds no plain handshake: %q", wire)
	}
	f, err := auth.ReadFile(s.users)
	if err != nil {
		t.Fatal(err)
	}
	cr := f.Lookup("alice").SCRAM
	salted, err := pbkdf2.Key(sha256.New, e2ePassword, cr.Salt, cr.Iterations, 32)
	if err != nil {
		t.Fatal(err)
	}
	// The log reaches us through a pipe, after the replies: wait for the
	// lines that must be there, then search everything logged so far.
	for _, want := range []string{`reason="unknown user"`, `reason="user disabled"`, "authenticated"} {
		s.WaitLog(t, want, 1)
	}
	logs := []byte(s.Out.String())
	for _, secret := range [][]byte{[]byte(e2ePassword), salted, []byte(base64.StdEncoding.EncodeToString(salted)),
		[]byte(fmt.Sprintf("%x", salted)), []byte(base64.StdEncoding.EncodeToString(cr.StoredKey))} {
		if bytes.Contains(wire, secret) {
			t.Fatalf("secret %q on the wire", secret)
		}
		if bytes.Contains(logs, secret) {
			t.Fatalf("secret %q in the server log", secret)
		}
	}
}

// clientBytes extracts the requests from a capture of both directions: it
// re-reads the capture as requests interleaved with replies.
func clientBytes(t *testing.T, capture []byte) []byte {
	t.Helper()
	var out []byte
	r := bytes.NewReader(capture)
	for r.Len() > 0 {
		req, err := protocol.ReadRequest(r, protocol.Limits{})
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		out = append(out, kit.Must(protocol.AppendRequest(nil, req.Header.Cmd, req.Header.Area, req.Topic, req.TraceID, req.Payload))...)
		if _, err := protocol.ReadReply(r, protocol.ReplyJSON, protocol.MaxAuthMessage); err != nil && !protocol.IsBizError(err) {
			t.Fatalf("capture reply: %v", err)
		}
	}
	return out
}

func TestSecurityRateLimitedLogins(t *testing.T) {
	s := startSecured(t, 3, "", authtest.User{Name: "alice", Password: e2ePassword})
	for i := range 3 {
		c := s.connect(t, i%2 == 1, nil)
		if err := c.Login(t, "alice", "wrong"); !errors.Is(err, protocol.ErrAuthFailed) {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	c := s.connect(t, false, nil)
	err := c.Login(t, "alice", e2ePassword)
	if err == nil || !strings.HasPrefix(err.Error(), "too many failed authentication attempts; retry in ") {
		t.Fatalf("login during the lockout: %v", err)
	}
	// Logged with the third failure; the log reaches us through a pipe.
	s.WaitLog(t, "lockout=1m0s", 1)
}

// SIGHUP to the real binary applies an edited users file to the next
// command of an already authenticated connection, which survives.
func TestSecurityReloadOnSIGHUP(t *testing.T) {
	s := startSecured(t, 1000, "",
		authtest.User{Name: "admin", Password: "adm", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "bob", Password: "bob-pw", Publish: []string{"orders"}})
	admin := s.connect(t, false, nil)
	if err := admin.Login(t, "admin", "adm"); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{"orders", "other"} {
		if err := admin.Create(tp, 0); err != nil {
			t.Fatal(err)
		}
	}
	bob := s.connect(t, true, nil)
	if err := bob.Login(t, "bob", "bob-pw"); err != nil {
		t.Fatal(err)
	}
	rec := kit.Record(nil, "m")
	if err := bob.Pub("orders", rec); err != nil {
		t.Fatal(err)
	}
	if err := bob.Pub("other", rec); err == nil || !strings.Contains(err.Error(), `may not publish to "other"`) {
		t.Fatalf("pub to other before the reload: %v", err)
	}

	authtest.WriteUsers(t, s.users,
		authtest.User{Name: "admin", Password: "adm", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "bob", Password: "bob-pw", Publish: []string{"other"}})
	s.Cmd.Process.Signal(syscall.SIGHUP)
	s.WaitLog(t, "SIGHUP: users file reloaded", 1)
	if err := bob.Pub("orders", rec); err == nil || err.Error() != `permission denied: user "bob" may not publish to "orders"` {
		t.Fatalf("pub to orders after the reload: %v", err)
	}
	if err := bob.Pub("other", rec); err != nil {
		t.Fatalf("pub to other after the reload: %v", err)
	}

	// A broken file is refused; the rules in force stay.
	if err := os.WriteFile(s.users, []byte(`{"version":1,"users":[{"name":`), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Cmd.Process.Signal(syscall.SIGHUP)
	s.WaitLog(t, "users file not reloaded", 1)
	if err := bob.Pub("other", rec); err != nil {
		t.Fatalf("pub after a failed reload: %v", err)
	}

	// Disabling bob refuses his next command and closes his connection.
	authtest.WriteUsers(t, s.users,
		authtest.User{Name: "admin", Password: "adm", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "bob", Password: "bob-pw", Publish: []string{"other"}, Disabled: true})
	s.Cmd.Process.Signal(syscall.SIGHUP)
	s.WaitLog(t, "SIGHUP: users file reloaded", 2)
	if err := bob.Pub("other", rec); err == nil || err.Error() != `user "bob" is disabled` {
		t.Fatalf("pub by a disabled user: %v", err)
	}
	if _, err := bob.R.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("the disabled user's connection is still open: %v", err)
	}
	if err := admin.Pub("orders", rec); err != nil {
		t.Fatalf("admin after the reloads: %v", err)
	}
	select {
	case <-s.Exited():
		t.Fatalf("the server exited on SIGHUP:\n%s", s.Out.String())
	default:
	}
}

func TestSecurityPermissionsAgainstBinary(t *testing.T) {
	users := []authtest.User{
		{Name: "admin", Password: "pw", Roles: []string{auth.RoleAdmin}},
		{Name: "pubber", Password: "pw", Publish: []string{"orders"}},
		{Name: "subber", Password: "pw", Subscribe: []string{"orders"}},
		{Name: "manager", Password: "pw", Manage: []string{"orders"}},
		{Name: "nobody", Password: "pw"},
	}
	s := startSecured(t, 1000, "timeout:\n  server:\n    alive: 200\n", users...)
	grants := map[string]string{"admin": "pub sub manage info", "pubber": "pub info", "subber": "sub info", "manager": "manage info"}
	type command struct {
		name, perm string
		req        func(topic string) []byte
	}
	cmds := []command{
		{"pub", "pub", func(tp string) []byte {
			return kit.Must(protocol.AppendPub(nil, []byte(tp), nil, kit.Record(nil, "x")))
		}},
		{"delay", "pub", func(tp string) []byte {
			return kit.Must(protocol.AppendDelay(nil, []byte(tp), nil, 60000, kit.Record(nil, "x")))
		}},
		{"sub", "sub", func(tp string) []byte {
			return kit.Must(protocol.AppendSub(nil, []byte(tp), nil, 0, 1, 0, []byte("w-"+tp)))
		}},
		{"create", "manage", func(tp string) []byte { return kit.Must(protocol.AppendCreate(nil, []byte(tp), nil, 0)) }},
		{"info", "info", func(tp string) []byte { return kit.Must(protocol.AppendTopicInfo(nil, []byte(tp), nil)) }},
	}
	admin := s.connect(t, false, nil)
	if err := admin.Login(t, "admin", "pw"); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{"orders", "other"} {
		if err := admin.Create(tp, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range users {
		for _, cmd := range cmds {
			for _, tp := range []string{"orders", "other"} {
				want := strings.Contains(" "+grants[u.Name]+" ", " "+cmd.perm+" ") && (u.Name == "admin" || tp == "orders")
				c := s.connect(t, false, nil)
				if err := c.Login(t, u.Name, u.Password); err != nil {
					t.Fatal(err)
				}
				topic := tp
				if _, err := c.C.Write(cmd.req(tp)); err != nil {
					t.Fatal(err)
				}
				var err error
				if cmd.name == "sub" {
					var u kit.Unit
					if u, err = c.Next(10 * time.Second); err == nil && u.Code == protocol.StatusError {
						err = errors.New(u.Text)
					}
				} else {
					_, err = protocol.ReadReply(c.R, protocol.ReplyJSON, 1<<20)
				}
				denied := err != nil && strings.HasPrefix(err.Error(), "permission denied")
				if denied == want {
					t.Errorf("%s %s %s: allowed=%v, reply error %v", u.Name, cmd.name, topic, want, err)
				}
				if denied && !strings.Contains(err.Error(), fmt.Sprintf("%q", topic)) {
					t.Errorf("%s %s %s: the refusal does not name the topic: %v", u.Name, cmd.name, topic, err)
				}
				c.C.Close()
			}
		}
	}
	// Nothing a refused command asked for happened: the binlog holds
	// exactly the allowed writes (pub and delay to other by admin only;
	// the allowed creates found the topics existing).
	got := map[string]int{}
	for _, b := range kit.ReadStore(t, filepath.Join(s.Dir, "data"), nil).Binlog {
		got[fmt.Sprintf("%d %s", b.Cmd, b.Topic)]++
	}
	want := map[string]int{
		fmt.Sprintf("%d orders", binlog.CmdCreate): 1, fmt.Sprintf("%d other", binlog.CmdCreate): 1,
		fmt.Sprintf("%d orders", binlog.CmdPub): 2, fmt.Sprintf("%d other", binlog.CmdPub): 1,
		fmt.Sprintf("%d orders", binlog.CmdDelay): 2, fmt.Sprintf("%d other", binlog.CmdDelay): 1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("binlog writes %v, want %v", got, want)
	}
}

func TestSecurityStartupWarning(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "")
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.yaml"))
	os.WriteFile(filepath.Join(dir, "config.yaml"), bytes.Replace(cfg, []byte("host: 127.0.0.1"), []byte("host: 0.0.0.0"), 1), 0o644)
	p := kit.Start(t, dir)
	if !strings.Contains(p.Out.String(), "without authentication") {
		t.Fatalf("no warning for a listener beyond loopback without auth:\n%s", p.Out.String())
	}
	p.Term()

	users := filepath.Join(dir, "users.json")
	authtest.WriteUsers(t, users, authtest.User{Name: "a", Password: "pw"})
	cfg, _ = os.ReadFile(filepath.Join(dir, "config.yaml"))
	cfg = append(cfg, []byte(fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\n", users))...)
	os.WriteFile(filepath.Join(dir, "config.yaml"), cfg, 0o644)
	p = kit.Start(t, dir)
	if strings.Contains(p.Out.String(), "without authentication") {
		t.Fatalf("warning despite auth:\n%s", p.Out.String())
	}
}
