package auth_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdg-go/scram"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/protocol"
)

// An unknown user's salt is the same after a restart (a new Authenticator
// reading the same secret file), as a real user's is; only the secret
// changes it.
func TestUnknownUserSaltStableAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	secretPath := filepath.Join(dir, "auth.secret")
	f := authtest.Users(t, authtest.User{Name: "alice", Password: "pw"})
	boot := func(secretPath string) *auth.Authenticator {
		t.Helper()
		secret, err := auth.LoadOrCreateSecret(secretPath)
		if err != nil {
			t.Fatal(err)
		}
		s, err := auth.NewStore(f)
		if err != nil {
			t.Fatal(err)
		}
		a, err := auth.NewAuthenticatorWithSecret(s, nil, secret)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	first := func(a *auth.Authenticator, user string) *saltIters {
		t.Helper()
		_, msg, err := a.Start(protocol.MechSCRAMSHA256, []byte("n,,n="+user+",r=abcdefgh"))
		if err != nil {
			t.Fatalf("start %s: %v", user, err)
		}
		return saltRe(append([]byte(","), msg...))
	}
	a1 := boot(secretPath)
	info, err := os.Stat(secretPath)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Fatalf("secret file mode %v, want 0600", perm)
	}
	a2 := boot(secretPath)
	k, u1, u2 := first(a1, "alice"), first(a1, "mallory"), first(a2, "mallory")
	if !bytes.Equal(u1.salt, u2.salt) {
		t.Fatal("an unknown user's salt changed across a restart")
	}
	if u1.iters != k.iters {
		t.Fatalf("unknown user offered %d iterations, real users have %d", u1.iters, k.iters)
	}
	other := boot(filepath.Join(dir, "other.secret"))
	if bytes.Equal(first(other, "mallory").salt, u1.salt) {
		t.Fatal("another secret gave the same fake salt")
	}

	// A secret other users may read is refused, as is a short one.
	if err := os.Chmod(secretPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadOrCreateSecret(secretPath); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable secret: %v", err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadOrCreateSecret(short); err == nil {
		t.Fatal("a 3-byte secret was accepted")
	}
}

// A users file other users may read (or others than its owner write) is
// refused, at start-up and at a reload; the users in force stay.
func TestUsersFileReadableByOthersRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.json")
	authtest.WriteUsers(t, path, authtest.User{Name: "alice", Password: "pw"})
	for _, mode := range []os.FileMode{0o644, 0o604, 0o620, 0o602} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := auth.OpenStore(path, nil); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("mode %v: open %v, want refused", mode, err)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o640, 0o400} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := auth.OpenStore(path, nil); err != nil {
			t.Fatalf("mode %v: %v", mode, err)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := auth.OpenStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	authtest.WriteUsers(t, path, authtest.User{Name: "bob", Password: "pw"})
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("reload of a world-readable users file succeeded")
	}
	if s.Lookup("alice") == nil || s.Lookup("bob") != nil {
		t.Fatal("a refused reload changed the users in force")
	}
}

// A proof checked against the credentials of the handshake's start does
// not log in as the account that replaced them before its end (a password
// change or a re-created user reloaded in between).
func TestCredentialsChangedDuringHandshake(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after authtest.User
		ok    bool
	}{
		{"password changed", authtest.User{Name: "alice", Password: "new"}, false},
		{"re-created", authtest.User{Name: "alice", Password: "old", Fresh: true}, false},
		{"grants changed", authtest.User{Name: "alice", Password: "old", Publish: []string{"x"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "users.json")
			authtest.WriteUsers(t, path, authtest.User{Name: "alice", Password: "old"})
			store, err := auth.OpenStore(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			a, err := auth.NewAuthenticator(store, nil)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := scram.SHA256.NewClient("alice", "old", "")
			if err != nil {
				t.Fatal(err)
			}
			cc := cl.NewConversation()
			first, _ := cc.Step("")
			conv, serverFirst, err := a.Start(protocol.MechSCRAMSHA256, []byte(first))
			if err != nil {
				t.Fatal(err)
			}
			final, err := cc.Step(string(serverFirst))
			if err != nil {
				t.Fatal(err)
			}
			authtest.WriteUsers(t, path, tc.after)
			if err := store.Reload(); err != nil {
				t.Fatal(err)
			}
			_, _, err = conv.Finish([]byte(final))
			if (err == nil) != tc.ok {
				t.Fatalf("finish after the reload: %v, want success=%v", err, tc.ok)
			}
		})
	}
}
