package auth_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
)

func TestWriteFileAtomic0600AndRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "users.json")
	f := authtest.Users(t,
		authtest.User{Name: "alice", Password: "pw-a", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "bob", Password: "pw-b", Publish: []string{"orders", "invoice.*"}, Disabled: true})
	if err := f.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	// Overwrite once more: the rename must replace the file in place.
	if err := f.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Fatalf("mode %v, want 0600", perm)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries (temporary file left?): %v", len(ents), ents)
	}
	got, err := auth.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Users) != 2 || got.Lookup("bob") == nil || !got.Lookup("bob").Disabled ||
		got.Lookup("bob").Publish[1] != "invoice.*" || !got.Lookup("alice").HasRole(auth.RoleAdmin) {
		t.Fatalf("round trip lost data: %+v", got.Users)
	}
	data, _ := os.ReadFile(path)
	for _, secret := range []string{"pw-a", "pw-b"} {
		if strings.Contains(string(data), secret) {
			t.Fatalf("users file contains the password %q", secret)
		}
	}
}

func TestParseFileStrict(t *testing.T) {
	creds := `"scram":{"iterations":4096,"salt":"c2FsdA==","storedKey":"` + b32 + `","serverKey":"` + b32 + `"}`
	cases := []struct {
		name, json, want string
	}{
		{"ok", `{"version":1,"users":[{"name":"a",` + creds + `}]}`, ""},
		{"version", `{"version":2,"users":[]}`, "version 2"},
		{"unknown field", `{"version":1,"users":[{"name":"a","publsh":["x"],` + creds + `}]}`, "unknown field"},
		{"unknown role", `{"version":1,"users":[{"name":"a","roles":["root"],` + creds + `}]}`, `unknown role "root"`},
		{"bad pattern", `{"version":1,"users":[{"name":"a","publish":["ord*"],` + creds + `}]}`, "only alone"},
		{"bad topic", `{"version":1,"users":[{"name":"a","manage":["a b"],` + creds + `}]}`, `pattern "a b"`},
		{"duplicate", `{"version":1,"users":[{"name":"a",` + creds + `},{"name":"a",` + creds + `}]}`, "listed twice"},
		{"bad name", `{"version":1,"users":[{"name":"a,b",` + creds + `}]}`, "user name"},
		{"few iterations", `{"version":1,"users":[{"name":"a","scram":{"iterations":10,"salt":"c2FsdA==","storedKey":"` + b32 + `","serverKey":"` + b32 + `"}}]}`, "iterations 10"},
		{"short key", `{"version":1,"users":[{"name":"a","scram":{"iterations":4096,"salt":"c2FsdA==","storedKey":"c2FsdA==","serverKey":"` + b32 + `"}}]}`, "storedKey has 4 bytes"},
		{"trailing", `{"version":1,"users":[]} {}`, "after the users object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := auth.ParseFile([]byte(tc.json))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// b32 is 32 zero bytes in base64.
var b32 = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

func TestPermissions(t *testing.T) {
	f := authtest.Users(t,
		authtest.User{Name: "pub", Password: "x", Publish: []string{"orders", "inv.*"}},
		authtest.User{Name: "sub", Password: "x", Subscribe: []string{"*"}},
		authtest.User{Name: "mgr", Password: "x", Manage: []string{"tmp.*"}},
		authtest.User{Name: "root", Password: "x", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "slave", Password: "x", Roles: []string{auth.RoleReplication}},
		authtest.User{Name: "off", Password: "x", Roles: []string{auth.RoleAdmin}, Disabled: true})
	s, err := auth.NewStore(f)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		user  string
		perm  auth.Permission
		topic string
		want  bool
	}{
		{"pub", auth.PermPublish, "orders", true},
		{"pub", auth.PermPublish, "orders2", false},
		{"pub", auth.PermPublish, "inv.a", true},
		{"pub", auth.PermPublish, "inv.", false},
		{"pub", auth.PermPublish, "inv", false},
		{"pub", auth.PermPublish, "invx.a", false},
		{"pub", auth.PermSubscribe, "orders", false},
		{"pub", auth.PermManage, "orders", false},
		{"pub", auth.PermDescribe, "orders", true},
		{"pub", auth.PermDescribe, "other", false},
		{"pub", auth.PermReplication, "", false},
		{"sub", auth.PermSubscribe, "anything", true},
		{"sub", auth.PermPublish, "anything", false},
		{"mgr", auth.PermManage, "tmp.x", true},
		{"mgr", auth.PermManage, "orders", false},
		{"mgr", auth.PermPublish, "tmp.x", false},
		{"root", auth.PermManage, "x", true},
		{"root", auth.PermReplication, "", true},
		{"slave", auth.PermReplication, "", true},
		{"slave", auth.PermSubscribe, "orders", false},
		{"root", auth.PermAdmin, "", true},
		{"slave", auth.PermAdmin, "", false},
		{"sub", auth.PermAdmin, "", false},
		{"off", auth.PermPublish, "orders", false},
		{"off", auth.PermNone, "", false},
	}
	for _, tc := range cases {
		if got := s.Lookup(tc.user).Allowed(tc.perm, tc.topic); got != tc.want {
			t.Errorf("%s %v %q: got %v want %v", tc.user, tc.perm, tc.topic, got, tc.want)
		}
	}
	if s.Lookup("nobody") != nil {
		t.Fatal("unknown user found")
	}
	if got := auth.Denied("bob", auth.PermPublish, "orders").Error(); got != `permission denied: user "bob" may not publish to "orders"` {
		t.Fatalf("denied text %q", got)
	}
}

func TestStoreReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.json")
	authtest.WriteUsers(t, path, authtest.User{Name: "a", Password: "x", Publish: []string{"t1"}})
	s, err := auth.OpenStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	gen := s.Generation()
	old := s.Lookup("a")
	authtest.WriteUsers(t, path, authtest.User{Name: "a", Password: "x", Publish: []string{"t2"}})
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if s.Generation() != gen+1 || s.Lookup("a").Allowed(auth.PermPublish, "t1") || !s.Lookup("a").Allowed(auth.PermPublish, "t2") {
		t.Fatal("reload did not apply the new grants")
	}
	if !old.Allowed(auth.PermPublish, "t1") {
		t.Fatal("a snapshot taken before the reload changed")
	}
	if err := os.WriteFile(path, []byte(`{"version":1,"users":[{"name":"a"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("a broken file was accepted")
	}
	if !s.Lookup("a").Allowed(auth.PermPublish, "t2") || s.Generation() != gen+1 {
		t.Fatal("a failed reload changed the users in force")
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte(`{"version":1,"users":[{"name":"a","publish":["x.*"],"scram":{"iterations":4096,"salt":"c2FsdA==","storedKey":"` + b32 + `","serverKey":"` + b32 + `"}}]}`))
	f.Add([]byte(`{"version":1,"users":[]}`))
	f.Add([]byte(`{"version":1,"users":[{"name":""}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := auth.ParseFile(data)
		if err != nil {
			return
		}
		out, err := file.Marshal()
		if err != nil {
			t.Fatalf("a parsed file does not marshal: %v", err)
		}
		if _, err := auth.ParseFile(out); err != nil {
			t.Fatalf("a marshalled file does not parse: %v", err)
		}
		if _, err := auth.NewStore(file); err != nil {
			t.Fatalf("a parsed file makes no store: %v", err)
		}
	})
}
