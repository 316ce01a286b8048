package client

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/client/internal/testserver"
)

var tlsListenRe = regexp.MustCompile(`listening \(TLS\).*addr=(\S+)`)

// startSecure runs smss with authentication and a TLS listener; it returns
// the server, its TLS address and the PKI.
func startSecure(t *testing.T) (*testserver.Server, string, *authtest.PKI) {
	t.Helper()
	pki := authtest.NewPKI(t)
	users := filepath.Join(t.TempDir(), "users.json")
	authtest.WriteUsers(t, users,
		authtest.User{Name: "admin", Password: "adm", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "pubber", Password: "pub", Publish: []string{"orders"}},
		authtest.User{Name: "subber", Password: "sub", Subscribe: []string{"orders"}},
		authtest.User{Name: "slave", Password: "sl", Roles: []string{auth.RoleReplication}})
	srv := testserver.Start(t, fmt.Sprintf("timeout:\n  server:\n    alive: 300\nauth:\n  enabled: true\n  usersFile: %s\n"+
		"tls:\n  listen: 127.0.0.1:0\n  cert: %s\n  key: %s\n", users, pki.ServerCert, pki.ServerKey))
	m := tlsListenRe.FindStringSubmatch(srv.Log())
	if m == nil {
		t.Fatalf("no TLS listener:\n%s", srv.Log())
	}
	return srv, m[1], pki
}

func TestCredentialsAndPermissions(t *testing.T) {
	srv, tlsAddr, pki := startSecure(t)
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		addr string
		opts Options
	}{
		{"plain", srv.Addr, Options{}},
		{"tls", tlsAddr, Options{TLS: pki.ClientConfig(t, false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withCreds := func(user, pw string) Options {
				o := tc.opts
				o.Credentials = &Credentials{User: user, Password: pw}
				return o
			}
			admin := dialT(t, tc.addr, withCreds("admin", "adm"))
			if err := admin.CreateTopic(ctx, "orders"); err != nil && !errors.Is(err, ErrTopicExist) {
				t.Fatal(err)
			}
			// No credentials: the dial works (alive is allowed), calls fail.
			anon := dialT(t, tc.addr, tc.opts)
			if err := anon.Publish(ctx, "orders", NewMessage([]byte("x"))); !errors.Is(err, ErrAuthFailed) {
				t.Fatalf("anonymous publish: %v", err)
			}
			// Wrong password: the dial itself fails.
			if _, err := Dial(ctx, tc.addr, withCreds("admin", "nope")); !errors.Is(err, ErrAuthFailed) {
				t.Fatalf("dial with a wrong password: %v", err)
			}
			pub := dialT(t, tc.addr, withCreds("pubber", "pub"))
			if err := pub.Publish(ctx, "orders", NewMessage([]byte("hello "+tc.name))); err != nil {
				t.Fatal(err)
			}
			err := pub.DeleteTopic(ctx, "orders")
			if !errors.Is(err, ErrPermissionDenied) || !IsServerError(err) {
				t.Fatalf("delete by pubber: %v", err)
			}
			// The connection stayed usable after the refusal.
			if err := pub.Publish(ctx, "orders", NewMessage([]byte("again"))); err != nil {
				t.Fatal(err)
			}
			// A subscriber inherits TLS and credentials from its Client.
			sc := dialT(t, tc.addr, withCreds("subber", "sub"))
			got := make(chan string, 1)
			s, err := sc.NewSubscriber(SubscriberConfig{Topic: "orders", Who: "w-" + tc.name,
				Handler: func(_ context.Context, b []Delivery) AckAction {
					got <- string(b[0].Body)
					return AckAndStop
				}})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if m := <-got; m != "hello plain" {
				t.Fatalf("first message %q", m)
			}
			// pubber may not subscribe: a permanent refusal, not retried.
			s, _ = pub.NewSubscriber(SubscriberConfig{Topic: "orders", Who: "x", Handler: func(context.Context, []Delivery) AckAction { return Ack }})
			if err := s.Run(ctx); !errors.Is(err, ErrPermissionDenied) {
				t.Fatalf("subscribe by pubber: %v", err)
			}
			// Replication needs the replication role.
			rs, err := pub.OpenReplica(ctx, 0)
			if err == nil {
				_, err = rs.Next(ctx)
				rs.Close()
			}
			if !errors.Is(err, ErrPermissionDenied) {
				t.Fatalf("replica by pubber: %v", err)
			}
			sl := dialT(t, tc.addr, withCreds("slave", "sl"))
			rs, err = sl.OpenReplica(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			if b, err := rs.Next(ctx); err != nil || b.EventID != 1 {
				t.Fatalf("first replicated block %+v: %v", b, err)
			}
		})
	}
}

func TestCredentialsAgainstServerWithoutAuth(t *testing.T) {
	srv := testserver.Start(t, "")
	ctx := ctxT(t, 30*time.Second)
	_, err := Dial(ctx, srv.Addr, Options{Credentials: &Credentials{User: "a", Password: "b"}})
	if !errors.Is(err, ErrAuthUnsupported) {
		t.Fatalf("dial with credentials to a server without auth: %v", err)
	}
	if _, err := Dial(ctx, srv.Addr, Options{Credentials: &Credentials{User: "a"}}); err == nil {
		t.Fatal("empty password accepted")
	}
}

func TestUntrustedServerCertificateNotRetried(t *testing.T) {
	_, tlsAddr, _ := startSecure(t)
	other := authtest.NewPKI(t) // a CA that did not sign the server
	ctx := ctxT(t, 30*time.Second)
	if _, err := Dial(ctx, tlsAddr, Options{TLS: other.ClientConfig(t, false)}); err == nil {
		t.Fatal("a server signed by an unknown CA was accepted")
	}
	dial, err := SecureDialer(nil, other.ClientConfig(t, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSubscriber(tlsAddr, SubscriberConfig{Topic: "orders", Who: "w", DialContext: dial,
		MinBackoff: time.Hour, Handler: func(context.Context, []Delivery) AckAction { return Ack }})
	if err != nil {
		t.Fatal(err)
	}
	// With an hour of backoff, returning at all shows it was not retried.
	if err := s.Run(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("subscriber run: %v (ctx %v)", err, ctx.Err())
	}
}
