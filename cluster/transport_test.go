package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/smssmq/smss/internal/smsstest"
)

// testCA issues certificates for 127.0.0.1, usable by servers and clients.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) issue(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// The raft transport under mutual TLS: the nodes with certificates of the
// cluster's CA form the cluster; a node whose certificate another CA
// signed is refused by both sides and never learns the state.
func TestTLSTransport(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	tweak := func(id string, o *Options) {
		signer := ca
		if id == "c" {
			signer = other
		}
		cert := signer.issue(t, id)
		o.ServerTLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
		o.ClientTLS = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
	}
	tc := newTestClusterWith(t, fastOptions(), tweak)
	for id := range tc.sim.nodes {
		tc.sim.set(id, func(s *simNode) { s.last = 10 })
	}
	tc.waitFor(10*time.Second, "a and b agreeing on a master", func() bool {
		a, b := tc.nodes["a"].State(), tc.nodes["b"].State()
		return a.Master != "" && a.Master == b.Master
	})
	if l, _ := tc.nodes["a"].Leader(); l == "c" {
		t.Fatal("c, with a foreign certificate, leads")
	}
	tc.rounds(3)
	if st := tc.nodes["c"].State(); st.Version != 0 {
		t.Fatalf("c, with a foreign certificate, has the state %+v", st)
	}
}

// The TLS listener hands raft only connections whose handshake verified a
// client certificate of the cluster's CA: a TLS client without one and a
// raw TCP client are closed and logged, never accepted, and an idle raw
// connection does not hold up a valid peer behind it.
func TestTLSTransportRefusesUnverified(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.issue(t, "a")
	server := &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	s, err := newStreamLayer("127.0.0.1:0", server, func() *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
	}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := s.Addr().String()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()

	// An idle raw connection first: it must not hold up the others.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()

	// A TLS client trusting the CA but without a certificate: refused
	// (under TLS 1.3 the client's handshake may complete before the
	// server's verification; its first read then fails).
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	anon := tls.Client(raw, &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	anon.SetDeadline(time.Now().Add(5 * time.Second))
	if err := anon.Handshake(); err == nil {
		if _, err := anon.Read(make([]byte, 1)); err == nil {
			t.Fatal("a client without a certificate read from the raft port")
		}
	}
	anon.Close()

	// A peer with the cluster's certificate dials through the transport.
	peer, err := s.Dial(raft.ServerAddress(addr), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	var got net.Conn
	select {
	case got = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the valid peer was not accepted behind an idle connection")
	}
	defer got.Close()
	tc, ok := got.(*trackedConn).Conn.(*tls.Conn)
	if !ok || len(tc.ConnectionState().PeerCertificates) == 0 {
		t.Fatalf("accepted %T without a verified client certificate", got)
	}
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	got.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := got.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("read %q, %v", buf, err)
	}
	select {
	case c := <-accepted:
		t.Fatalf("accepted a second connection from %v", c.RemoteAddr())
	default:
	}
	if !smsstest.Poll(5*time.Second, func() bool {
		return strings.Contains(logs.String(), "refused a connection to the raft port") &&
			strings.Contains(logs.String(), raw.LocalAddr().String())
	}) {
		t.Fatalf("the refusal of %v is not logged:\n%s", raw.LocalAddr(), logs.String())
	}
}
