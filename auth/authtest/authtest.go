// Package authtest provides test fixtures for authentication and TLS: a
// throwaway certificate authority with server and client certificates, and
// users files with cheap credentials. It is meant for tests only.
package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
)

// PKI is a CA and certificates issued by it, written as PEM files in Dir.
// The server certificate is valid for 127.0.0.1, ::1 and "localhost".
type PKI struct {
	Dir                   string
	CAFile                string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	CA                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
}

// NewPKI creates the CA, a server and a client certificate in a temporary
// directory of t.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir()}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "smss test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p.CA, err = x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p.caKey = key
	p.CAFile = filepath.Join(p.Dir, "ca.pem")
	writePEM(t, p.CAFile, "CERTIFICATE", der)
	p.ServerCert, p.ServerKey = p.Issue(t, "server", x509.ExtKeyUsageServerAuth)
	p.ClientCert, p.ClientKey = p.Issue(t, "client", x509.ExtKeyUsageClientAuth)
	return p
}

// Issue writes a certificate and key named name.pem and name-key.pem,
// signed by the CA, for the given usage, valid from an hour ago for a day
// (so servers under test warn that it expires soon).
func (p *PKI) Issue(t testing.TB, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	return p.IssueValid(t, name, usage, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// IssueValid is Issue with the given validity period (expired or not yet
// valid certificates for tests of their refusal). The subject's common
// name is name.
func (p *PKI) IssueValid(t testing.TB, name string, usage x509.ExtKeyUsage, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.CA, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(p.Dir, name+".pem")
	keyFile = filepath.Join(p.Dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return certFile, keyFile
}

// ServerConfig is the server's TLS configuration; with clientCA the server
// requires client certificates from this CA.
func (p *PKI) ServerConfig(t testing.TB, clientCA bool) *tls.Config {
	t.Helper()
	ca := ""
	if clientCA {
		ca = p.CAFile
	}
	cfg, err := auth.ServerTLSConfig(p.ServerCert, p.ServerKey, ca)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ClientConfig trusts the CA; withCert adds the client certificate.
func (p *PKI) ClientConfig(t testing.TB, withCert bool) *tls.Config {
	t.Helper()
	cert, key := "", ""
	if withCert {
		cert, key = p.ClientCert, p.ClientKey
	}
	cfg, err := auth.ClientTLSConfig(p.CAFile, "localhost", cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// User describes a users-file entry for Users: Password is turned into
// credentials with the minimum iteration count (fast tests).
type User struct {
	Name, Password string
	Disabled       bool
	Roles          []string
	Publish        []string
	Subscribe      []string
	Manage         []string
	// Fresh derives new credentials (a new salt) even when this name and
	// password were written before: the user was removed and added again.
	// Otherwise a name and password keep their credentials from one file
	// to the next, as an edit of a user's grants does, so the server sees
	// the same account (auth.Principal.Identity).
	Fresh bool
}

// credsCache holds the credentials derived per name and password.
var credsCache sync.Map // [2]string{name, password} -> auth.Credentials

func credentials(u User) (auth.Credentials, error) {
	key := [2]string{u.Name, u.Password}
	if c, ok := credsCache.Load(key); ok && !u.Fresh {
		return c.(auth.Credentials), nil
	}
	c, err := auth.NewCredentials(u.Password, auth.MinIterations)
	if err == nil {
		credsCache.Store(key, c)
	}
	return c, err
}

// Users returns a users file holding us.
func Users(t testing.TB, us ...User) *auth.File {
	t.Helper()
	f := &auth.File{Version: auth.FileVersion}
	for _, u := range us {
		creds, err := credentials(u)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Add(auth.User{Name: u.Name, Disabled: u.Disabled, Roles: u.Roles, Publish: u.Publish,
			Subscribe: u.Subscribe, Manage: u.Manage, SCRAM: creds}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// WriteUsers writes a users file holding us to path.
func WriteUsers(t testing.TB, path string, us ...User) {
	t.Helper()
	if err := Users(t, us...).WriteFile(path); err != nil {
		t.Fatal(err)
	}
}

// ServeTLS runs a TLS server on a loopback port with cfg until the test
// ends and returns its address. Each connection gets deadline for
// everything, completes its handshake, and is handed to handle with the
// handshake's error; the connection is closed when handle returns, and
// every one still open when the test ends.
func ServeTLS(t testing.TB, cfg *tls.Config, deadline time.Duration, handle func(c *tls.Conn, handshakeErr error)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				tc := tls.Server(nc, cfg)
				tc.SetDeadline(time.Now().Add(deadline))
				handle(tc, tc.Handshake())
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// Install replaces dst by a copy of src the way an operator should rotate
// a file: a temporary file renamed over the old one, so a reload never
// reads half a file.
func Install(t testing.TB, dst, src string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	InstallBytes(t, dst, data)
}

// InstallBytes is Install with the new content given.
func InstallBytes(t testing.TB, dst string, data []byte) {
	t.Helper()
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}
