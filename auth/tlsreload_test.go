package auth_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
)

const tlsTestDeadline = 10 * time.Second

// serveTLS runs a TLS server on cfg: each connection completes the
// handshake, sends the common name of the client certificate ("-" without
// one) on a line, then echoes. A failed handshake closes the connection.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	return authtest.ServeTLS(t, cfg, tlsTestDeadline, func(tc *tls.Conn, err error) {
		if err != nil {
			return
		}
		peer := "-"
		if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
			peer = pc[0].Subject.CommonName
		}
		if _, err := io.WriteString(tc, peer+"\n"); err != nil {
			return
		}
		io.Copy(tc, tc)
	})
}

// tlsConn is a client connection to serveTLS.
type tlsConn struct {
	*tls.Conn
	r    *bufio.Reader
	Peer string // the client certificate the server saw
}

// dialTLS connects and reads the server's first line. With TLS 1.3 a
// refused client certificate shows only there, so any failure up to it is
// returned.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) (*tlsConn, error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: tlsTestDeadline}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(tlsTestDeadline))
	tc := &tlsConn{Conn: c, r: bufio.NewReader(c)}
	line, err := tc.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	tc.Peer = strings.TrimSuffix(line, "\n")
	return tc, nil
}

func mustDial(t *testing.T, addr string, cfg *tls.Config) *tlsConn {
	t.Helper()
	c, err := dialTLS(t, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// echo checks that the connection still carries data both ways.
func (c *tlsConn) echo(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		t.Fatalf("write on an established connection: %v", err)
	}
	got, err := c.r.ReadString('\n')
	if err != nil || got != msg+"\n" {
		t.Fatalf("echo %q, %v", got, err)
	}
}

// served is the common name of the server certificate c was shown.
func (c *tlsConn) served() string {
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// serverFiles copies the PKI's server certificate and key (and the CA as
// the client CA bundle) into a directory of their own.
func serverFiles(t *testing.T, pki *authtest.PKI) (cert, key, ca string) {
	t.Helper()
	dir := t.TempDir()
	cert, key, ca = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	authtest.Install(t, cert, pki.ServerCert)
	authtest.Install(t, key, pki.ServerKey)
	authtest.Install(t, ca, pki.CAFile)
	return cert, key, ca
}

func TestServerTLSReloadRotatesCertificate(t *testing.T) {
	pki := authtest.NewPKI(t)
	certFile, keyFile, _ := serverFiles(t, pki)
	st, err := auth.NewServerTLS(certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, st.Config())
	client := pki.ClientConfig(t, false)

	old := mustDial(t, addr, client)
	if old.served() != "server" || st.Leaf().Subject.CommonName != "server" {
		t.Fatalf("served %q, leaf %q", old.served(), st.Leaf().Subject.CommonName)
	}
	old.echo(t, "before")

	cert2, key2 := pki.Issue(t, "server2", x509.ExtKeyUsageServerAuth)
	authtest.Install(t, certFile, cert2)
	authtest.Install(t, keyFile, key2)
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := st.Leaf().Subject.CommonName; got != "server2" {
		t.Fatalf("leaf after reload %q", got)
	}
	if got := mustDial(t, addr, client).served(); got != "server2" {
		t.Fatalf("a new connection was served %q after the reload", got)
	}
	// The connection made before the reload is untouched.
	old.echo(t, "after")
	if old.served() != "server" {
		t.Fatalf("old connection's certificate changed to %q", old.served())
	}
}

func TestServerTLSFailedReloadKeepsPrevious(t *testing.T) {
	pki := authtest.NewPKI(t)
	now := time.Now()
	expiredCert, expiredKey := pki.IssueValid(t, "expired", x509.ExtKeyUsageServerAuth, now.Add(-48*time.Hour), now.Add(-time.Hour))
	futureCert, futureKey := pki.IssueValid(t, "future", x509.ExtKeyUsageServerAuth, now.Add(time.Hour), now.Add(48*time.Hour))
	otherCert, _ := pki.Issue(t, "other", x509.ExtKeyUsageServerAuth)
	goodCert, goodKey := pki.Issue(t, "server2", x509.ExtKeyUsageServerAuth)

	for _, tc := range []struct {
		name     string
		breakIt  func(t *testing.T, cert, key, ca string)
		file     auth.TLSFile
		is       error // errors.Is target, nil for none
		inReason string
	}{
		{name: "certificate missing", file: auth.TLSCert, is: fs.ErrNotExist,
			breakIt: func(t *testing.T, cert, key, ca string) { os.Remove(cert) }},
		{name: "certificate not PEM", file: auth.TLSCert, inReason: "no PEM certificate",
			breakIt: func(t *testing.T, cert, key, ca string) { authtest.InstallBytes(t, cert, []byte("not a certificate")) }},
		{name: "key not PEM", file: auth.TLSKey,
			breakIt: func(t *testing.T, cert, key, ca string) { authtest.InstallBytes(t, key, []byte("not a key")) }},
		{name: "key of another certificate", file: auth.TLSKey, inReason: "does not match",
			breakIt: func(t *testing.T, cert, key, ca string) { authtest.Install(t, cert, otherCert) }},
		{name: "expired certificate", file: auth.TLSCert, is: auth.ErrCertValidity, inReason: "expired at",
			breakIt: func(t *testing.T, cert, key, ca string) {
				authtest.Install(t, cert, expiredCert)
				authtest.Install(t, key, expiredKey)
			}},
		{name: "certificate not yet valid", file: auth.TLSCert, is: auth.ErrCertValidity, inReason: "not valid before",
			breakIt: func(t *testing.T, cert, key, ca string) {
				authtest.Install(t, cert, futureCert)
				authtest.Install(t, key, futureKey)
			}},
		// A good certificate does not go into force beside a bad CA bundle.
		{name: "client CA not PEM", file: auth.TLSCA, inReason: "no PEM certificate",
			breakIt: func(t *testing.T, cert, key, ca string) {
				authtest.Install(t, cert, goodCert)
				authtest.Install(t, key, goodKey)
				authtest.InstallBytes(t, ca, []byte("-----BEGIN NOTHING-----\n"))
			}},
		{name: "client CA missing", file: auth.TLSCA, is: fs.ErrNotExist,
			breakIt: func(t *testing.T, cert, key, ca string) { os.Remove(ca) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certFile, keyFile, caFile := serverFiles(t, pki)
			st, err := auth.NewServerTLS(certFile, keyFile, caFile)
			if err != nil {
				t.Fatal(err)
			}
			addr := serveTLS(t, st.Config())
			client := pki.ClientConfig(t, true)
			old := mustDial(t, addr, client)

			tc.breakIt(t, certFile, keyFile, caFile)
			err = st.Reload()
			var fe *auth.TLSFileError
			if !errors.As(err, &fe) {
				t.Fatalf("Reload: %v (%T), want a *TLSFileError", err, err)
			}
			wantPath := map[auth.TLSFile]string{auth.TLSCert: certFile, auth.TLSKey: keyFile, auth.TLSCA: caFile}[tc.file]
			if fe.File != tc.file || fe.Path != wantPath {
				t.Fatalf("error names %s %s, want %s %s: %v", fe.File, fe.Path, tc.file, wantPath, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v is not %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.inReason) || !strings.Contains(err.Error(), wantPath) {
				t.Fatalf("error %q lacks %q or the path", err, tc.inReason)
			}

			// The previous certificate and CA bundle stay in force.
			if got := st.Leaf().Subject.CommonName; got != "server" {
				t.Fatalf("leaf after a failed reload %q", got)
			}
			c := mustDial(t, addr, client)
			if c.served() != "server" || c.Peer != "client" {
				t.Fatalf("after a failed reload: served %q, client seen as %q", c.served(), c.Peer)
			}
			old.echo(t, "still up")

			// Repaired files load again.
			authtest.Install(t, certFile, goodCert)
			authtest.Install(t, keyFile, goodKey)
			authtest.Install(t, caFile, pki.CAFile)
			if err := st.Reload(); err != nil {
				t.Fatal(err)
			}
			if got := mustDial(t, addr, client).served(); got != "server2" {
				t.Fatalf("served %q after the repair", got)
			}
		})
	}
}

// TestServerTLSReloadClientCA: a new client CA bundle decides which client
// certificates new handshakes accept, resumed sessions included, while
// connections made before stay up.
func TestServerTLSReloadClientCA(t *testing.T) {
	pki1, pki2 := authtest.NewPKI(t), authtest.NewPKI(t)
	certFile, keyFile, caFile := serverFiles(t, pki1)
	st, err := auth.NewServerTLS(certFile, keyFile, caFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, st.Config())

	client1 := pki1.ClientConfig(t, true)
	client1.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	old := mustDial(t, addr, client1)
	old.echo(t, "ticket") // reading processes the session ticket
	resumed := mustDial(t, addr, client1)
	if !resumed.ConnectionState().DidResume {
		t.Fatal("the second connection did not resume: the check below would prove nothing")
	}
	resumed.echo(t, "resumed")

	authtest.Install(t, caFile, pki2.CAFile)
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	if c, err := dialTLS(t, addr, client1); err == nil {
		t.Fatalf("a client certificate of the replaced CA was accepted (resumed %v)", c.ConnectionState().DidResume)
	}
	client2 := pki1.ClientConfig(t, false)
	cert, err := tls.LoadX509KeyPair(pki2.ClientCert, pki2.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	client2.Certificates = []tls.Certificate{cert}
	if c := mustDial(t, addr, client2); c.Peer != "client" {
		t.Fatalf("server saw %q", c.Peer)
	}
	old.echo(t, "still up")
}

func TestClientTLSReload(t *testing.T) {
	pki := authtest.NewPKI(t)
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	authtest.Install(t, caFile, pki.CAFile)
	authtest.Install(t, certFile, pki.ClientCert)
	authtest.Install(t, keyFile, pki.ClientKey)
	ct, err := auth.NewClientTLS(caFile, "localhost", certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, pki.ServerConfig(t, true))
	cfg1 := ct.Config()
	if c := mustDial(t, addr, cfg1); c.Peer != "client" {
		t.Fatalf("server saw %q", c.Peer)
	}

	cert2, key2 := pki.Issue(t, "client2", x509.ExtKeyUsageClientAuth)
	authtest.Install(t, certFile, cert2)
	authtest.Install(t, keyFile, key2)
	if err := ct.Reload(); err != nil {
		t.Fatal(err)
	}
	cfg2 := ct.Config()
	if cfg2 == cfg1 || ct.Leaf().Subject.CommonName != "client2" {
		t.Fatalf("reload kept the configuration (leaf %q)", ct.Leaf().Subject.CommonName)
	}
	if c := mustDial(t, addr, cfg2); c.Peer != "client2" {
		t.Fatalf("server saw %q after the reload", c.Peer)
	}

	// Failed reloads change nothing.
	expCert, expKey := pki.IssueValid(t, "expired", x509.ExtKeyUsageClientAuth, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	authtest.Install(t, certFile, expCert)
	authtest.Install(t, keyFile, expKey)
	var fe *auth.TLSFileError
	if err := ct.Reload(); !errors.As(err, &fe) || fe.File != auth.TLSCert || !errors.Is(err, auth.ErrCertValidity) {
		t.Fatalf("reload of an expired client certificate: %v", err)
	}
	authtest.Install(t, certFile, cert2)
	authtest.InstallBytes(t, keyFile, []byte("garbage"))
	if err := ct.Reload(); !errors.As(err, &fe) || fe.File != auth.TLSKey || fe.Path != keyFile {
		t.Fatalf("reload of a broken key: %v", err)
	}
	if ct.Config() != cfg2 || ct.Leaf().Subject.CommonName != "client2" {
		t.Fatal("a failed reload replaced the configuration")
	}
	authtest.Install(t, keyFile, key2)

	// The master moves to another CA: trusted once the bundle is replaced.
	pki2 := authtest.NewPKI(t)
	addr2 := serveTLS(t, pki2.ServerConfig(t, false))
	if _, err := dialTLS(t, addr2, ct.Config()); err == nil {
		t.Fatal("a server of an unknown CA was trusted")
	}
	authtest.Install(t, caFile, pki2.CAFile)
	if err := ct.Reload(); err != nil {
		t.Fatal(err)
	}
	mustDial(t, addr2, ct.Config()).echo(t, "trusted")
}
