package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
)

// ctlEnv runs smssctl with extra environment, detached from any terminal
// (so that a password prompt cannot block the test).
func ctlEnv(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(ctlBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("smssctl %v did not finish", args)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

func TestUserManagement(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "users.json")
	env := []string{"SMSS_USERS_FILE=" + file}
	const pw = "first-Passw0rd"
	ctlEnv(t, env, "", "user", "--help").expect(t, 0, "usage: smssctl user add")
	ctlEnv(t, env, "", "user", "add", "--help").expect(t, 0, "-password-stdin", "-users-file")
	// A missing directory is named as such, not as a failing lock file.
	r0 := ctlEnv(t, []string{"SMSS_USERS_FILE=" + filepath.Join(dir, "nodir", "users.json")}, pw+"\n", "user", "add", "x", "--password-stdin")
	r0.expect(t, 1)
	if !strings.Contains(r0.stderr, "directory of the users file") || strings.Contains(r0.stderr, ".lock") {
		t.Errorf("the error names the lock file: %s", r0.stderr)
	}

	ctlEnv(t, env, pw+"\n", "user", "add", "alice", "--password-stdin", "--iterations", "4096",
		"--publish", "orders,inv.*", "--subscribe", "*").expect(t, 0, "added user alice")
	ctlEnv(t, env, "pw2\n", "user", "add", "--password-stdin", "--iterations", "4096", "--roles", "replication", "slave1").expect(t, 0)
	ctlEnv(t, env, "x\n", "user", "add", "alice", "--password-stdin").expect(t, 1)
	// Passwords never come from the command line, nor without a terminal.
	ctlEnv(t, env, "", "user", "add", "bob", "--password", "x").expect(t, 2)
	r := ctlEnv(t, env, "", "user", "add", "bob")
	r.expect(t, 2)
	if !strings.Contains(r.stderr, "--password-stdin") {
		t.Errorf("no hint about --password-stdin: %s", r.stderr)
	}
	// Bad grants are refused before any password is read.
	ctlEnv(t, env, "x\n", "user", "add", "bob", "--password-stdin", "--publish", "ord*").expect(t, 2)
	ctlEnv(t, env, "x\n", "user", "add", "bob", "--password-stdin", "--roles", "root").expect(t, 2)
	ctlEnv(t, env, "x\n", "user", "add", "bad,name", "--password-stdin").expect(t, 2)

	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("users file mode %v", info.Mode().Perm())
	}
	data, _ := os.ReadFile(file)
	if bytes.Contains(data, []byte(pw)) {
		t.Fatal("the users file holds the password")
	}
	before := data

	ctlEnv(t, env, "second\n", "user", "passwd", "alice", "--password-stdin").expect(t, 0, "changed the password of alice")
	ctlEnv(t, env, "", "user", "set", "alice", "--manage", "tmp.*", "--publish", "").expect(t, 0)
	ctlEnv(t, env, "", "user", "disable", "slave1").expect(t, 0, "disabled user slave1")
	ctlEnv(t, env, "", "user", "disable", "nobody").expect(t, 1)

	f, err := auth.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	a := f.Lookup("alice")
	if len(a.Publish) != 0 || a.Manage[0] != "tmp.*" || a.Subscribe[0] != "*" || a.SCRAM.Iterations != 4096 {
		t.Fatalf("alice after set: %+v", a)
	}
	after, _ := os.ReadFile(file)
	if bytes.Equal(before, after) || !f.Lookup("slave1").Disabled {
		t.Fatal("edits not applied")
	}

	r = ctlEnv(t, env, "", "user", "list")
	r.expect(t, 0, "alice", "enabled", "slave1", "disabled", "replication", "tmp.*")
	for _, secret := range []string{"storedKey", "serverKey", "salt", base64Of(a.SCRAM.StoredKey)} {
		if strings.Contains(r.stdout, secret) {
			t.Fatalf("user list shows %q:\n%s", secret, r.stdout)
		}
	}
	r = ctlEnv(t, env, "", "--json", "user", "list")
	var rows []struct {
		Name     string
		Disabled bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 2 || !rows[1].Disabled {
		t.Fatalf("json list %q: %v", r.stdout, err)
	}
	ctlEnv(t, env, "", "user", "enable", "slave1").expect(t, 0)
	ctlEnv(t, env, "", "user", "delete", "slave1").expect(t, 0)
	if f, _ := auth.ReadFile(file); len(f.Users) != 1 {
		t.Fatalf("%d users after delete", len(f.Users))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 { // users.json and its .lock
		t.Fatalf("stray files: %v", ents)
	}
}

func base64Of(b []byte) string {
	out, _ := json.Marshal(b)
	return strings.Trim(string(out), `"`)
}

var tlsListenRe = regexp.MustCompile(`listening \(TLS\).*addr=(\S+)`)

func TestConnectWithCredentialsAndTLS(t *testing.T) {
	pki := authtest.NewPKI(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "users.json")
	authtest.WriteUsers(t, users,
		authtest.User{Name: "admin", Password: "adm-pw", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "pubber", Password: "pub-pw", Publish: []string{"orders"}})
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("adm-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, out := startServerWith(t, fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\ntls:\n  listen: 127.0.0.1:0\n  cert: %s\n  key: %s\n",
		users, pki.ServerCert, pki.ServerKey))
	m := tlsListenRe.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no TLS listener in the log:\n%s", out.String())
	}
	tlsAddr := m[1]
	plain := []string{"SMSS_ADDR=" + addr}

	// Without credentials everything but ping is refused.
	r := ctlEnv(t, plain, "", "topic", "list")
	r.expect(t, 1)
	if !strings.Contains(r.stderr, "authentication required") {
		t.Errorf("stderr: %s", r.stderr)
	}
	ctlEnv(t, plain, "", "ping").expect(t, 0)
	// A --user without any password source is a usage error (no terminal).
	ctlEnv(t, plain, "", "--user", "admin", "topic", "list").expect(t, 2)
	ctlEnv(t, plain, "", "--user", "admin", "--password-file", pwFile, "topic", "create", "orders").expect(t, 0)
	r = ctlEnv(t, append(plain, "SMSS_PASSWORD=wrong"), "", "--user", "admin", "topic", "list")
	r.expect(t, 1)
	if !strings.Contains(r.stderr, "authentication failed") {
		t.Errorf("stderr: %s", r.stderr)
	}

	// Over TLS, as pubber: publish allowed, delete refused with the
	// permission named.
	tlsEnv := []string{"SMSS_ADDR=" + tlsAddr, "SMSS_USER=pubber", "SMSS_PASSWORD=pub-pw"}
	ctlEnv(t, tlsEnv, "", "--ca", pki.CAFile, "--server-name", "localhost", "pub", "orders", "hello").expect(t, 0)
	r = ctlEnv(t, tlsEnv, "", "--ca", pki.CAFile, "topic", "delete", "orders")
	r.expect(t, 1)
	if !strings.Contains(r.stderr, `permission denied: user "pubber" may not manage topic "orders"`) {
		t.Errorf("stderr: %s", r.stderr)
	}
	// An untrusted server certificate is refused.
	ctlEnv(t, tlsEnv, "", "--tls", "pub", "orders", "x").expect(t, 1)
	// The admin subscribes over TLS and sees pubber's message.
	r = ctlEnv(t, []string{"SMSS_ADDR=" + tlsAddr, "SMSS_PASSWORD=adm-pw"}, "", "--user", "admin", "--ca", pki.CAFile,
		"sub", "orders", "--who", "w", "--count", "1")
	r.expect(t, 0, "hello")
	if strings.Contains(out.String(), "adm-pw") || strings.Contains(out.String(), "pub-pw") {
		t.Fatal("a password reached the server log")
	}
}
