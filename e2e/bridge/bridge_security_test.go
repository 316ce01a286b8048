package bridge

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

// TestBridgeSecured: the bridge logs in like a slave, over TLS, as a user
// with the replication role, and mirrors; as a user without it, the
// master refuses, the bridge says why and keeps retrying, and mirrors
// nothing.
func TestBridgeSecured(t *testing.T) {
	bin := buildBridge(t)
	pki := authtest.NewPKI(t)
	mdir := t.TempDir()
	users := filepath.Join(mdir, "users.json")
	authtest.WriteUsers(t, users,
		authtest.User{Name: "admin", Password: "adm", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "reader", Password: "rd", Subscribe: []string{"*"}},
		authtest.User{Name: "bridge", Password: "br", Roles: []string{auth.RoleReplication}})
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
	for i := range 5 {
		if err := admin.Pub("orders", kit.Record([][2]string{{"traceId", fmt.Sprint("t", i)}}, fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}

	run := func(user, pw, stream string) (*smsstest.SyncBuffer, string) {
		dir := t.TempDir()
		pwFile := filepath.Join(dir, "pw")
		os.WriteFile(pwFile, []byte(pw+"\n"), 0o600)
		ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		if !ns.ReadyForConnections(20 * time.Second) {
			t.Fatal("nats not ready")
		}
		t.Cleanup(ns.Shutdown)
		cfg := filepath.Join(dir, "bridge.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("source:\n  useTLS: true\n  ca: %s\n  serverName: localhost\n  user: %s\n  passwordFile: %s\n  minBackoffMs: 50\n  maxBackoffMs: 200\n",
			pki.CAFile, user, pwFile)), 0o644)
		out := &smsstest.SyncBuffer{}
		p := startBridge(t, bin, out, "--config", cfg, "--master", fmt.Sprintf("127.0.0.1:%d", tport), "--nats", ns.ClientURL(), "--stream", stream)
		t.Cleanup(func() {
			p.kill()
			if t.Failed() {
				t.Logf("bridge (%s) output:\n%s", user, kit.Tail(out.String(), 4000))
			}
		})
		return out, ns.ClientURL()
	}

	out, url := run("bridge", "br", "OK")
	var got []mirrored
	if !smsstest.Poll(30*time.Second, func() bool { got = readJetStream(t, url, "OK"); return len(got) == 5 }) {
		t.Fatalf("the bridge mirrored %d of 5 messages over TLS with a login", len(got))
	}
	for i, m := range got {
		if m.body != fmt.Sprint("m", i) || m.topic != "orders" {
			t.Fatalf("message %d: %v", i, m)
		}
	}
	_ = out

	denied, url2 := run("reader", "rd", "NO")
	if !smsstest.Poll(30*time.Second, func() bool {
		return strings.Count(denied.String(), "refuses") >= 2 && strings.Contains(denied.String(), "may not replicate")
	}) {
		t.Fatalf("a bridge without the replication role did not report the refusal repeatedly:\n%s", kit.Tail(denied.String(), 3000))
	}
	if n := len(readJetStream(t, url2, "NO")); n != 0 {
		t.Fatalf("a bridge without the replication role mirrored %d messages", n)
	}
}
