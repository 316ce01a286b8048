package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"
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
