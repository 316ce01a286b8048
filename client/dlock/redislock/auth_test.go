package redislock

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/client/dlock"
	"github.com/smssmq/smss/client/internal/testserver"
)

// authTTL is long: the TTL plays no part in these tests, and each acquire
// gets TTL/3 (10 s), which a TLS handshake on a loaded machine never needs.
const authTTL = 30 * time.Second

// A group store on a Redis that requires AUTH: the lock takes whatever
// *redis.Client the caller configured, with Username/Password (ACL users)
// or Password alone (requirepass).
func TestGroupWithRedisAuth(t *testing.T) {
	rs := testserver.StartRedis(t)
	ctx := ctxT(t, 30*time.Second)
	setup := redisClient(t, rs.Addr)
	// An ACL user limited to the smss keys, then requirepass for the rest.
	if err := setup.Do(ctx, "ACL", "SETUSER", "locker", "on", ">lock-pw", "~smss:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := setup.Do(ctx, "CONFIG", "SET", "requirepass", "default-pw").Err(); err != nil {
		t.Fatal(err)
	}

	anon := redisClient(t, rs.Addr)
	if _, err := NewGroup(anon, "orders", "billing", Options{TTL: authTTL}).TryAcquire(ctx); err == nil ||
		!strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("acquire without AUTH: %v", err)
	}
	for _, opts := range []*redis.Options{
		{Addr: rs.Addr, Username: "locker", Password: "lock-pw", ContextTimeoutEnabled: true},
		{Addr: rs.Addr, Password: "default-pw", ContextTimeoutEnabled: true},
	} {
		rdb := redis.NewClient(opts)
		t.Cleanup(func() { rdb.Close() })
		g := NewGroup(rdb, "orders", "billing-"+opts.Username, Options{TTL: authTTL})
		lease, err := g.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("acquire as %q: %v", opts.Username, err)
		}
		if err := g.SaveProgress(ctx, lease, 42); err != nil {
			t.Fatal(err)
		}
		if id, ok, err := g.Progress(ctx); err != nil || !ok || id != 42 {
			t.Fatalf("progress %d %v %v", id, ok, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The ACL user cannot touch keys outside its pattern.
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: "locker", Password: "lock-pw"})
	defer rdb.Close()
	if _, err := NewGroup(rdb, "orders", "billing", Options{TTL: authTTL, KeyPrefix: "other:"}).TryAcquire(ctx); err == nil ||
		!strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("acquire outside the ACL key pattern: %v", err)
	}
}

// A group store over TLS with a client certificate and a password.
func TestGroupWithRedisTLS(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skipf("redis-server not installed: %v", err)
	}
	pki := authtest.NewPKI(t)
	port := testserver.FreePort(t)
	var out bytes.Buffer
	cmd := exec.Command("redis-server", "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", pki.ServerCert, "--tls-key-file", pki.ServerKey, "--tls-ca-cert-file", pki.CAFile,
		"--tls-auth-clients", "yes", "--requirepass", "tls-pw", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	newClient := func(cfg *tls.Config, pw string) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Password: pw, TLSConfig: cfg, ContextTimeoutEnabled: true,
			DialTimeout: time.Second, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	rdb := newClient(pki.ClientConfig(t, true), "tls-pw")
	ctx := ctxT(t, 30*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("redis-server exited:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis over TLS not ready: %v\n%s", err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	g := NewGroup(rdb, "orders", "billing", Options{TTL: authTTL})
	lease, err := g.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SaveProgress(ctx, lease, 7); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Without the client certificate, or the password, nothing works.
	if _, err := NewGroup(newClient(pki.ClientConfig(t, false), "tls-pw"), "orders", "b2", Options{TTL: authTTL}).TryAcquire(ctx); err == nil {
		t.Fatal("acquired without a client certificate")
	}
	_, err = NewGroup(newClient(pki.ClientConfig(t, true), ""), "orders", "b3", Options{TTL: authTTL}).TryAcquire(ctx)
	if err == nil || errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("acquire without the password: %v", err)
	}
}
