package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/e2e/internal/kit"
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
	mport, tport := kit.FreePort(t), kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\ntls:\n  listen: 127.0.0.1:%d\n  cert: %s\n  key: %s\n",
		users, tport, pki.ServerCert, pki.ServerKey))
	master := kit.Start(t, mdir)
	admin := kit.Dial(t, master.Addr)
	if err := admin.Login(t, "admin", "adm"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create("orders", 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := admin.Pub("orders", kit.Record(nil, fmt.Sprint("m", i))); err != nil {
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
		kit.ReplConfig(t, dir, kit.FreePort(t), extra)
	}

	// Without the replication role: replication stops with the refusal,
	// and nothing is copied.
	ndir := t.TempDir()
	slaveCfg(ndir, "reader", "rd", false)
	denied := kit.StartReplSlave(t, ndir, mport, 0)
	denied.WaitLog(t, "REPLICATION STOPPED", 1)
	if !strings.Contains(denied.Out.String(), `permission denied: user \"reader\" may not replicate`) {
		t.Fatalf("the stop does not name the missing permission:\n%s", kit.Tail(denied.Out.String(), 3000))
	}
	if b := kit.ReplBinlog(t, filepath.Join(ndir, "data")); len(b) != 0 {
		t.Fatalf("a slave without the replication role copied %d binlog bytes", len(b))
	}

	// A wrong password: refused at login, retried (never copies anything).
	wdir := t.TempDir()
	slaveCfg(wdir, "slave", "wrong", false)
	wrong := kit.StartReplSlave(t, wdir, mport, 0)
	wrong.WaitLog(t, "authentication failed", 1)
	if b := kit.ReplBinlog(t, filepath.Join(wdir, "data")); len(b) != 0 {
		t.Fatalf("a slave with a wrong password copied %d binlog bytes", len(b))
	}

	// With the role, over the master's TLS listener.
	sdir := t.TempDir()
	slaveCfg(sdir, "slave", "sl", true)
	slave := kit.StartReplSlave(t, sdir, tport, 0)
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), slave, 30*time.Second)
	if got := kit.SubscribeAll(t, slave.Addr, "orders"); len(got) != 3 {
		t.Fatalf("the slave serves %d messages, want 3", len(got))
	}
	if strings.Contains(slave.Out.String(), "\"sl\"") || strings.Contains(master.Out.String(), "adm\"") {
		t.Fatal("a password reached a log")
	}
}
