package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/protocol"
)

// sendHUP delivers a real SIGHUP to this test process. The guard keeps
// SIGHUP caught for the rest of the test, so a handler that failed to
// register shows as a missing log line instead of killing the test binary.
func sendHUP(t *testing.T) {
	t.Helper()
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(guard) })
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

func tlsDial(t *testing.T, addr string, cfg *tls.Config) *tls.Conn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: waitLimit}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(waitLimit))
	return c
}

func servedCN(c *tls.Conn) string { return c.ConnectionState().PeerCertificates[0].Subject.CommonName }

// TestSIGHUPReloadsListenerCertificate runs the server with a TLS listener,
// rotates its certificate and delivers a real SIGHUP: new connections get
// the new certificate, the open one keeps working, and a broken key file
// is refused with the previous certificate kept.
func TestSIGHUPReloadsListenerCertificate(t *testing.T) {
	pki := authtest.NewPKI(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	authtest.Install(t, certFile, pki.ServerCert)
	authtest.Install(t, keyFile, pki.ServerKey)
	in := start(t, "tls:\n  listen: 127.0.0.1:0\n  cert: "+strconv.Quote(certFile)+"\n  key: "+strconv.Quote(keyFile)+"\n")

	// PKI certificates live a day: the start-up warns about it.
	if line := in.out.waitLine(t, `msg="TLS certificate loaded"`); !strings.Contains(line, "key=tls.cert") ||
		!strings.Contains(line, "subject=\"CN=server\"") || !strings.Contains(line, "notAfter=") {
		t.Fatalf("start-up certificate line: %s", line)
	}
	if line := in.out.waitLine(t, "TLS certificate expires soon"); !strings.Contains(line, "level=WARN") ||
		!strings.Contains(line, "subject=\"CN=server\"") {
		t.Fatalf("expiry warning: %s", line)
	}
	m := addrRe.FindStringSubmatch(in.out.waitLine(t, `msg="listening (TLS)"`))
	if m == nil {
		t.Fatalf("no TLS address:\n%s", in.out.String())
	}
	tlsAddr := m[1]
	client := pki.ClientConfig(t, false)
	old := tlsDial(t, tlsAddr, client)
	alive, err := protocol.AppendAlive(nil, nil)
	if err := roundTrip(t, old, alive, err); err != nil {
		t.Fatal(err)
	}
	if got := servedCN(old); got != "server" {
		t.Fatalf("served %q", got)
	}

	// A 90-day certificate: no expiry warning for it.
	cert2, key2 := pki.IssueValid(t, "server2", x509.ExtKeyUsageServerAuth, time.Now().Add(-time.Hour), time.Now().Add(90*24*time.Hour))
	authtest.Install(t, certFile, cert2)
	authtest.Install(t, keyFile, key2)
	sendHUP(t)
	if line := in.out.waitLine(t, `msg="SIGHUP: TLS listener certificate reloaded"`); !strings.Contains(line, "level=INFO") ||
		!strings.Contains(line, "subject=\"CN=server2\"") || !strings.Contains(line, "key=tls.cert") {
		t.Fatalf("reload line: %s", line)
	}
	if got := servedCN(tlsDial(t, tlsAddr, client)); got != "server2" {
		t.Fatalf("a connection after SIGHUP was served %q", got)
	}
	if err := roundTrip(t, old, alive, nil); err != nil {
		t.Fatalf("the connection made before the reload: %v", err)
	}

	authtest.InstallBytes(t, keyFile, []byte("not a key"))
	sendHUP(t)
	line := in.out.waitLine(t, `msg="SIGHUP: TLS listener certificate not reloaded`)
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "key=tls.key") || !strings.Contains(line, keyFile) {
		t.Fatalf("failed reload line: %s", line)
	}
	c := tlsDial(t, tlsAddr, client)
	if got := servedCN(c); got != "server2" {
		t.Fatalf("after a failed reload a connection was served %q", got)
	}
	if err := roundTrip(t, c, alive, nil); err != nil {
		t.Fatal(err)
	}
	// Only the start-up certificate was close to expiry; the failure line
	// is logged after any warning about server2 would have been.
	if n := strings.Count(in.out.String(), "expires soon"); n != 1 {
		t.Fatalf("%d expiry warnings:\n%s", n, in.out.String())
	}
	if code := in.stop(t, syscall.SIGTERM); code != exitOK {
		t.Fatalf("exit %d", code)
	}
}

// peerServer is a master's TLS listener requiring client certificates: it
// reports the common name each connection presented, then echoes.
func peerServer(t *testing.T, cfg *tls.Config) (addr string, peers <-chan string) {
	t.Helper()
	ch := make(chan string, 16)
	addr = authtest.ServeTLS(t, cfg, waitLimit, func(tc *tls.Conn, err error) {
		if err != nil {
			ch <- "handshake failed: " + err.Error()
			return
		}
		ch <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
		io.Copy(tc, tc)
	})
	return addr, ch
}

func nextPeer(t *testing.T, peers <-chan string) string {
	t.Helper()
	select {
	case p := <-peers:
		return p
	case <-time.After(waitLimit):
		t.Fatal("the master saw no connection")
		return ""
	}
}

// TestReloadSlaveTLS: the slave's client certificate, key and CA bundle
// are re-read by the reload and used for the next connection to the
// master; a broken file keeps the previous ones.
func TestReloadSlaveTLS(t *testing.T) {
	pki := authtest.NewPKI(t)
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	authtest.Install(t, caFile, pki.CAFile)
	authtest.Install(t, certFile, pki.ClientCert)
	authtest.Install(t, keyFile, pki.ClientKey)
	cfg := config.Default()
	cfg.Replication.UseTLS, cfg.Replication.CA, cfg.Replication.Cert, cfg.Replication.Key = true, caFile, certFile, keyFile
	logs := newSink()
	logger := slog.New(slog.NewTextHandler(logs, nil))
	link, err := masterDialer(cfg, "127.0.0.1", logger)
	if err != nil || link == nil || link.tls == nil {
		t.Fatalf("masterDialer: %v, %v", link, err)
	}
	dial := link.DialContext
	logs.waitLine(t, `msg="replication client certificate loaded" key=replication.cert subject="CN=client"`)
	r := &reloader{log: logger, master: link}
	if r.empty() {
		t.Fatal("a slave with TLS has nothing to reload")
	}
	addr, peers := peerServer(t, pki.ServerConfig(t, true))
	connect := func() net.Conn {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		nc, err := dial(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		nc.SetDeadline(time.Now().Add(waitLimit))
		return nc
	}
	echo := func(nc net.Conn) {
		t.Helper()
		buf := make([]byte, 4)
		if _, err := nc.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(nc, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo %q, %v", buf, err)
		}
	}
	old := connect()
	if p := nextPeer(t, peers); p != "client" {
		t.Fatalf("master saw %q", p)
	}

	cert2, key2 := pki.Issue(t, "client2", x509.ExtKeyUsageClientAuth)
	authtest.Install(t, certFile, cert2)
	authtest.Install(t, keyFile, key2)
	r.reload()
	logs.waitLine(t, `level=INFO msg="SIGHUP: replication TLS material reloaded; the next connection to the master uses it" key=replication.cert subject="CN=client2"`)
	connect()
	if p := nextPeer(t, peers); p != "client2" {
		t.Fatalf("after the reload the master saw %q", p)
	}
	echo(old)

	authtest.InstallBytes(t, keyFile, []byte("garbage"))
	r.reload()
	line := logs.waitLine(t, `msg="SIGHUP: replication TLS material not reloaded`)
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "key=replication.key") {
		t.Fatalf("failed reload line: %s", line)
	}
	connect()
	if p := nextPeer(t, peers); p != "client2" {
		t.Fatalf("after a failed reload the master saw %q", p)
	}
	if strings.Contains(logs.String(), "password file") {
		t.Fatalf("a password reload without replication.user:\n%s", logs.String())
	}
}

// TestReloadListenerErrorsNameTheKey: each broken file of the listener is
// reported under its configuration key.
func TestReloadListenerErrorsNameTheKey(t *testing.T) {
	pki := authtest.NewPKI(t)
	for _, tc := range []struct {
		name, key string
		breakIt   func(t *testing.T, cert, key, ca string)
	}{
		{"cert", "tls.cert", func(t *testing.T, cert, key, ca string) { os.Remove(cert) }},
		{"key", "tls.key", func(t *testing.T, cert, key, ca string) { authtest.InstallBytes(t, key, []byte("x")) }},
		{"ca", "tls.clientCA", func(t *testing.T, cert, key, ca string) { authtest.InstallBytes(t, ca, []byte("x")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cert, key, ca := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), filepath.Join(dir, "ca.pem")
			authtest.Install(t, cert, pki.ServerCert)
			authtest.Install(t, key, pki.ServerKey)
			authtest.Install(t, ca, pki.CAFile)
			cfg := config.Default()
			cfg.TLS = config.TLS{Listen: "127.0.0.1:0", Cert: cert, Key: key, ClientCA: ca}
			logs := newSink()
			logger := slog.New(slog.NewTextHandler(logs, nil))
			sec, st, err := setupSecurity(cfg, logger)
			if err != nil || st == nil || sec.TLS != st.Config() {
				t.Fatalf("setupSecurity: %v", err)
			}
			tc.breakIt(t, cert, key, ca)
			(&reloader{log: logger, listener: st}).reload()
			line := logs.waitLine(t, "SIGHUP: TLS listener certificate not reloaded")
			if !strings.Contains(line, "key="+tc.key+" ") {
				t.Fatalf("line does not name %s: %s", tc.key, line)
			}
			// The same file broken at start-up is a configuration error
			// naming the same key.
			if _, _, err := setupSecurity(cfg, logger); err == nil || !strings.HasPrefix(err.Error(), tc.key+": ") {
				t.Fatalf("start-up error %v", err)
			}
		})
	}
}

// TestExpiryWarning covers the thresholds of the expiry warning.
func TestExpiryWarning(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name                string
		notBefore, notAfter time.Time
		want                string // "" for no warning
	}{
		{"expired", now.Add(-time.Hour), now.Add(-time.Minute), "TLS certificate has expired"},
		{"in a week", now.Add(-time.Hour), now.Add(7 * 24 * time.Hour), "expires soon"},
		{"in 13 days 23 hours", now.Add(-time.Hour), now.Add(certExpiryWarning - time.Hour), "expires soon"},
		{"in 14 days 1 hour", now.Add(-time.Hour), now.Add(certExpiryWarning + time.Hour), ""},
		{"not yet valid", now.Add(time.Hour), now.Add(90 * 24 * time.Hour), "not valid yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := newSink()
			leaf := &x509.Certificate{NotBefore: tc.notBefore, NotAfter: tc.notAfter}
			warnExpiry(slog.New(slog.NewTextHandler(logs, nil)), "tls.cert", leaf, now)
			got := logs.String()
			if tc.want == "" && got != "" || tc.want != "" && (!strings.Contains(got, tc.want) || !strings.Contains(got, "level=WARN")) {
				t.Fatalf("logged %q, want %q", got, tc.want)
			}
		})
	}
}

// hupChildEnv selects TestSIGHUPHelperProcess's role in a child process.
const hupChildEnv = "SMSS_TEST_HUP_CHILD"

// hupIgnored is the child's answer when it inherited an ignored SIGHUP.
const hupIgnored = "SIGHUP-IGNORED-AT-START"

// hupReloaded is the line TestSIGHUPHelperProcess waits for, by mode.
var hupReloaded = map[string]string{
	"empty":    "SIGHUP: nothing to reload",
	"tls":      "SIGHUP: TLS listener certificate reloaded",
	"password": "SIGHUP: replication password file reloaded",
}

// TestSIGHUPDefaultAction runs a child process that sends itself SIGHUP:
// with nothing to reload it is caught and logged (it must never end the
// server); with a TLS listener or a slave's password file configured it is
// caught and reloads.
func TestSIGHUPDefaultAction(t *testing.T) {
	for _, mode := range []string{"empty", "tls", "password"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSIGHUPHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), hupChildEnv+"="+mode)
			out, err := cmd.CombinedOutput()
			if strings.Contains(string(out), hupIgnored) {
				t.Skip("SIGHUP is ignored by this process's parent (nohup?): the default action cannot be observed")
			}
			if err != nil || !strings.Contains(string(out), hupReloaded[mode]) {
				t.Fatalf("child: %v\n%s", err, out)
			}
		})
	}
}

// TestSIGHUPHelperProcess is the child of TestSIGHUPDefaultAction; it does
// nothing in a normal run.
func TestSIGHUPHelperProcess(t *testing.T) {
	mode := os.Getenv(hupChildEnv)
	if mode == "" {
		t.Skip("helper process of TestSIGHUPDefaultAction")
	}
	if mode == "empty" && signal.Ignored(syscall.SIGHUP) {
		os.Stdout.WriteString(hupIgnored + "\n")
		return
	}
	logs := newSink()
	r := &reloader{log: slog.New(slog.NewTextHandler(logs, nil))}
	switch mode {
	case "tls":
		pki := authtest.NewPKI(t)
		st, err := auth.NewServerTLS(pki.ServerCert, pki.ServerKey, "")
		if err != nil {
			t.Fatal(err)
		}
		r.listener = st
	case "password":
		cfg := config.Default()
		cfg.Replication.User, cfg.Replication.PasswordFile = "repl", filepath.Join(t.TempDir(), "password")
		authtest.InstallBytes(t, cfg.Replication.PasswordFile, []byte("secret"))
		link, err := masterDialer(cfg, "127.0.0.1", r.log)
		if err != nil {
			t.Fatal(err)
		}
		r.master = link
	}
	defer reloadOnHUP(r)()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString(logs.waitLine(t, hupReloaded[mode]) + "\n")
}
