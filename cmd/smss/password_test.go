package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/config"
)

// waitLines waits until s holds n lines containing substr and returns the
// nth.
func (s *sink) waitLines(t *testing.T, substr string, n int) string {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	for {
		var found []string
		for _, line := range strings.Split(s.String(), "\n") {
			if strings.Contains(line, substr) {
				found = append(found, line)
			}
		}
		if len(found) >= n {
			return found[n-1]
		}
		select {
		case <-s.changed:
		case <-timer.C:
			t.Fatalf("%d of %d lines containing %q; output:\n%s", len(found), n, substr, s.String())
		}
	}
}

// TestSIGHUPReloadsReplicationPassword runs a master requiring logins and
// a slave's link to it, with and without TLS. A real SIGHUP reloads both
// sides: the master's users file and the slave's password file, which the
// next connection logs in with. A password file that cannot be used keeps
// the previous password.
func TestSIGHUPReloadsReplicationPassword(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := "plain"
		if useTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) { testPasswordReload(t, useTLS) })
	}
}

func testPasswordReload(t *testing.T, useTLS bool) {
	const first, second = "first-secret", "second-secret"
	dir := t.TempDir()
	usersFile := filepath.Join(dir, "users.json")
	setUsers := func(password string) {
		t.Helper()
		authtest.WriteUsers(t, usersFile+".new", authtest.User{Name: "repl", Password: password, Roles: []string{auth.RoleReplication}})
		authtest.Install(t, usersFile, usersFile+".new")
	}
	setUsers(first)
	conf := "auth:\n  enabled: true\n  usersFile: " + strconv.Quote(usersFile) + "\n"
	var pki *authtest.PKI
	if useTLS {
		pki = authtest.NewPKI(t)
		conf += "tls:\n  listen: 127.0.0.1:0\n  cert: " + strconv.Quote(pki.ServerCert) + "\n  key: " + strconv.Quote(pki.ServerKey) + "\n"
	}
	master := start(t, conf)
	addr := master.addr
	if useTLS {
		m := addrRe.FindStringSubmatch(master.out.waitLine(t, `msg="listening (TLS)"`))
		if m == nil {
			t.Fatalf("no TLS address:\n%s", master.out.String())
		}
		addr = m[1]
	}

	pwFile := filepath.Join(dir, "repl.password")
	authtest.InstallBytes(t, pwFile, []byte(first+"\n"))
	cfg := config.Default()
	cfg.Replication.User, cfg.Replication.PasswordFile = "repl", pwFile
	if useTLS {
		cfg.Replication.UseTLS, cfg.Replication.CA = true, pki.CAFile
	}
	logs := newSink()
	link, err := masterDialer(cfg, "127.0.0.1", slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil || link == nil || (link.tls != nil) != useTLS {
		t.Fatalf("masterDialer: %+v, %v", link, err)
	}
	r := &reloader{log: slog.New(slog.NewTextHandler(logs, nil)), master: link}
	if r.empty() {
		t.Fatal("a slave with a password file has nothing to reload")
	}
	t.Cleanup(reloadOnHUP(r))
	login := func() error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		nc, err := link.DialContext(ctx, "tcp", addr)
		if err == nil {
			nc.Close()
		}
		return err
	}
	if err := login(); err != nil {
		t.Fatalf("login with the start-up password: %v", err)
	}
	hups, failures := 0, 0
	hup := func() {
		t.Helper()
		hups++
		sendHUP(t)
		master.out.waitLines(t, `msg="SIGHUP: users file reloaded"`, hups)
		// One outcome line per SIGHUP on the slave side, either way.
		logs.waitLines(t, "SIGHUP: replication password file", hups)
	}

	// The master moves on alone: the slave's password no longer logs in,
	// which is what makes the next step's success mean something.
	setUsers(second)
	hup()
	if err := login(); err == nil || !strings.Contains(err.Error(), `log in to `+addr+` as "repl"`) {
		t.Fatalf("login with the old password after the master changed it: %v", err)
	}

	authtest.InstallBytes(t, pwFile, []byte(second+"\n"))
	hup()
	if line := logs.waitLines(t, "SIGHUP: replication password file reloaded", 2); !strings.Contains(line, "level=INFO") ||
		!strings.Contains(line, "key=replication.passwordFile") {
		t.Fatalf("reload line: %s", line)
	}
	if err := login(); err != nil {
		t.Fatalf("login after the password file was reloaded: %v", err)
	}

	for _, tc := range []struct {
		name, want string
		breakIt    func()
	}{
		{"empty", "is empty", func() { authtest.InstallBytes(t, pwFile, []byte("\n")) }},
		{"missing", "no such file", func() { os.Remove(pwFile) }},
		// SASLprep prohibits control characters: no login can use it.
		{"unusable", "replication.user/replication.passwordFile", func() { authtest.InstallBytes(t, pwFile, []byte("bad\apassword")) }},
	} {
		tc.breakIt()
		hup()
		failures++
		line := logs.waitLines(t, "SIGHUP: replication password file not reloaded", failures)
		if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "key=replication.passwordFile") ||
			!strings.Contains(line, tc.want) {
			t.Fatalf("%s: failed reload line: %s", tc.name, line)
		}
		if tc.name != "unusable" && !strings.Contains(line, pwFile) {
			t.Fatalf("%s: the line does not name the file: %s", tc.name, line)
		}
		if err := login(); err != nil {
			t.Fatalf("%s: login after a failed reload: %v", tc.name, err)
		}
	}
	for _, out := range []string{logs.String(), master.out.String()} {
		if strings.Contains(out, first) || strings.Contains(out, second) {
			t.Fatalf("a password was logged:\n%s", out)
		}
	}
}
