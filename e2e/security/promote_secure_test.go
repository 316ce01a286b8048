package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

// With authentication and TLS on every node: promote and follow need the
// admin role, the promoted node serves its slaves over TLS with a login,
// and a re-pointed slave logs in to its new master (replication.* as
// configured), learns its epoch through the same dialer and ends with the
// new master's binlog.
func TestSecurityPromoteAndFollow(t *testing.T) {
	pki := authtest.NewPKI(t)
	users := filepath.Join(t.TempDir(), "users.json")
	authtest.WriteUsers(t, users,
		authtest.User{Name: "admin", Password: "adm", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "ops", Password: "ops", Publish: []string{"*"}, Subscribe: []string{"*"}, Manage: []string{"*"}},
		authtest.User{Name: "slave", Password: "sl", Roles: []string{auth.RoleReplication}})
	type node struct {
		dir          string
		port, tlsPrt int
	}
	mk := func() node {
		n := node{dir: t.TempDir(), port: kit.FreePort(t), tlsPrt: kit.FreePort(t)}
		pw := filepath.Join(n.dir, "master.pw")
		if err := os.WriteFile(pw, []byte("sl\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		kit.ReplConfig(t, n.dir, n.port, fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\ntls:\n  listen: 127.0.0.1:%d\n  cert: %s\n  key: %s\n"+
			"replication:\n  user: slave\n  passwordFile: %s\n  useTLS: true\n  ca: %s\n  serverName: localhost\n",
			users, n.tlsPrt, pki.ServerCert, pki.ServerKey, pw, pki.CAFile))
		return n
	}
	m, n1, n2 := mk(), mk(), mk()
	master := kit.StartArgs(t, m.dir)
	c := kit.Dial(t, master.Addr)
	if err := c.Login(t, "ops", "ops"); err != nil {
		t.Fatal(err)
	}
	if err := c.Create("orders", 0); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := c.Pub("orders", kit.Record(nil, fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	s1 := kit.StartReplSlave(t, n1.dir, m.tlsPrt, 0)
	s2 := kit.StartReplSlave(t, n2.dir, m.tlsPrt, 0)
	mdata, s1data, s2data := filepath.Join(m.dir, "data"), filepath.Join(n1.dir, "data"), filepath.Join(n2.dir, "data")
	kit.WaitReplicated(t, mdata, s1data, s1, 30*time.Second)
	kit.WaitReplicated(t, mdata, s2data, s2, 30*time.Second)
	master.Kill()

	ops := []string{"SMSS_USER=ops", "SMSS_PASSWORD=ops"}
	admin := []string{"SMSS_USER=admin", "SMSS_PASSWORD=adm"}
	kit.WaitMasterGone(t, s1.Addr, admin...)
	const denied = `permission denied: user "ops" may not promote or re-point this node (needs the admin role)`
	if _, errOut, code := kit.SmssctlEnv(t, ops, s1.Addr, "promote"); code != 1 || !strings.Contains(errOut, denied) {
		t.Fatalf("promote as ops: exit %d %s", code, errOut)
	}
	if out, _, code := kit.SmssctlEnv(t, ops, s1.Addr, "status"); code != 0 || !strings.Contains(out, "slave, epoch 0") {
		t.Fatalf("status as ops: exit %d %s", code, out)
	}
	if out, errOut, code := kit.SmssctlEnv(t, admin, s1.Addr, "promote"); code != 0 || !strings.Contains(out, "epoch 1") {
		t.Fatalf("promote as admin: exit %d %s%s", code, out, errOut)
	}
	newMaster := "127.0.0.1:" + strconv.Itoa(n1.tlsPrt)
	if _, errOut, code := kit.SmssctlEnv(t, ops, s2.Addr, "follow", newMaster); code != 1 || !strings.Contains(errOut, denied) {
		t.Fatalf("follow as ops: exit %d %s", code, errOut)
	}
	if out, errOut, code := kit.SmssctlEnv(t, admin, s2.Addr, "follow", newMaster); code != 0 {
		t.Fatalf("follow as admin: exit %d %s%s", code, out, errOut)
	}
	c1 := kit.Dial(t, s1.Addr)
	if err := c1.Login(t, "ops", "ops"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := c1.Pub("orders", kit.Record(nil, fmt.Sprint("n", i))); err != nil {
			t.Fatal(err)
		}
	}
	kit.WaitReplicated(t, s1data, s2data, s2, 30*time.Second)
	if !smsstest.Poll(10*time.Second, func() bool {
		out, _, _ := kit.SmssctlEnv(t, ops, s2.Addr, "status")
		return strings.Contains(out, "slave, epoch 1") && strings.Contains(out, "following "+newMaster)
	}) {
		out, errOut, _ := kit.SmssctlEnv(t, ops, s2.Addr, "status")
		t.Fatalf("the re-pointed slave's status: %s%s\n%s", out, errOut, kit.Tail(s2.Out.String(), 3000))
	}
}
