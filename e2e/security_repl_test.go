package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
)

// A slave must log in as a user with the replication role: one without it
// cannot stream the binlog (nor even list topics for its first sync); one
// with it replicates, over TLS too.
func TestSecuritySlaveNeedsReplicationRole(t *testing.T) {
	pki := authtest.NewPKI(t)
	mdir := t.TempDir()
	users := filepath.Join(mdir, "users.json")
	authtest.WriteUsers(t, users,
		authtest.User{Name: "admin", Password: "adm", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "reader", Password: "rd", Subscribe: []string{"*"}},
		authtest.User{Name: "slave", Password: "sl", Roles: []string{auth.RoleReplication}})
	mport, tport := freePort(t), freePort(t)
	replConfig(t, mdir, mport, fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\ntls:\n  listen: 127.0.0.1:%d\n  cert: %s\n  key: %s\n",
		users, tport, pki.ServerCert, pki.ServerKey))
	master := start(t, mdir)
	admin := dial(t, master.addr)
	if err := admin.login(t, "admin", "adm"); err != nil {
		t.Fatal(err)
	}
	if err := admin.create("orders", 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := admin.pub("orders", record(nil, fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}

	slaveCfg := func(dir, user, pw string, useTLS bool) {
		pwFile := filepath.Join(dir, "master.pw")
		if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		extra := fmt.Sprintf("replication:\n  user: %s\n  passwordFile: %s\n", user, pwFile)
		if useTLS {
			extra += fmt.Sprintf("  useTLS: true\n  ca: %s\n  serverName: localhost\n", pki.CAFile)
		}
		replConfig(t, dir, freePort(t), extra)
	}

	// Without the replication role: replication stops with the refusal,
	// and nothing is copied.
	ndir := t.TempDir()
	slaveCfg(ndir, "reader", "rd", false)
	denied := startReplSlave(t, ndir, mport, 0)
	denied.waitLog(t, "REPLICATION STOPPED", 1)
	if !strings.Contains(denied.out.String(), `permission denied: user \"reader\" may not replicate`) {
		t.Fatalf("the stop does not name the missing permission:\n%s", tail(denied.out.String(), 3000))
	}
	if b := replBinlog(t, filepath.Join(ndir, "data")); len(b) != 0 {
		t.Fatalf("a slave without the replication role copied %d binlog bytes", len(b))
	}

	// A wrong password: refused at login, retried (never copies anything).
	wdir := t.TempDir()
	slaveCfg(wdir, "slave", "wrong", false)
	wrong := startReplSlave(t, wdir, mport, 0)
	wrong.waitLog(t, "authentication failed", 1)
	if b := replBinlog(t, filepath.Join(wdir, "data")); len(b) != 0 {
		t.Fatalf("a slave with a wrong password copied %d binlog bytes", len(b))
	}

	// With the role, over the master's TLS listener.
	sdir := t.TempDir()
	slaveCfg(sdir, "slave", "sl", true)
	slave := startReplSlave(t, sdir, tport, 0)
	waitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), slave, 30*time.Second)
	if got := subscribeAll(t, slave.addr, "orders"); len(got) != 3 {
		t.Fatalf("the slave serves %d messages, want 3", len(got))
	}
	if strings.Contains(slave.out.String(), "\"sl\"") || strings.Contains(master.out.String(), "adm\"") {
		t.Fatal("a password reached a log")
	}
}
