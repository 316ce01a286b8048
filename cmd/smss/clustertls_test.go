package main

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/cluster"
	"github.com/smssmq/smss/config"
)

// The consensus transport follows the tls.* and replication.* keys:
// neither is plain TCP, both with a client certificate and a CA is mutual
// TLS, and every other combination is refused naming the keys.
func TestRaftTransportDecision(t *testing.T) {
	listener := func(c *config.Config) { c.TLS = config.TLS{Listen: "127.0.0.1:12302", Cert: "n.pem", Key: "n-key.pem"} }
	repl := func(c *config.Config) {
		c.Replication.UseTLS, c.Replication.CA = true, "ca.pem"
		c.Replication.Cert, c.Replication.Key = "c.pem", "c-key.pem"
	}
	for _, tc := range []struct {
		name    string
		set     []func(*config.Config)
		want    string
		wantErr []string // every part must be in the error
	}{
		{name: "none", want: transportPlain},
		{name: "both", set: []func(*config.Config){listener, repl}, want: transportMutual},
		{name: "both with serverName and listener client CA", set: []func(*config.Config){listener, repl, func(c *config.Config) {
			c.Replication.ServerName, c.TLS.ClientCA = "node.example", "apps-ca.pem"
		}}, want: transportMutual},
		{name: "only the listener", set: []func(*config.Config){listener},
			wantErr: []string{"tls.listen", "replication.useTLS"}},
		{name: "only replication", set: []func(*config.Config){repl},
			wantErr: []string{"replication.useTLS", "tls.listen"}},
		{name: "no client certificate", set: []func(*config.Config){listener, repl, func(c *config.Config) {
			c.Replication.Cert, c.Replication.Key = "", ""
		}}, wantErr: []string{"replication.cert", "replication.key"}},
		{name: "no CA", set: []func(*config.Config){listener, repl, func(c *config.Config) { c.Replication.CA = "" }},
			wantErr: []string{"replication.ca"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			for _, f := range tc.set {
				f(cfg)
			}
			got, err := raftTransport(cfg)
			if tc.wantErr == nil {
				if err != nil || got != tc.want {
					t.Fatalf("got %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %q, want a refusal naming %v", got, tc.wantErr)
			}
			for _, k := range tc.wantErr {
				if !strings.Contains(err.Error(), k) {
					t.Errorf("the refusal %q does not name %s", err, k)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the refusal is not one line: %q", err)
			}
			var o cluster.Options
			if _, _, err := setupRaftTLS(cfg, &o); !isConfigError(err) || o.ServerTLS != nil {
				t.Errorf("setupRaftTLS: %v (a configuration error: %v), ServerTLS set: %v", err, isConfigError(err), o.ServerTLS != nil)
			}
		})
	}
}

// setupRaftTLS builds a server side that requires a client certificate of
// replication.ca and a client side that presents replication.cert; an
// unreadable file is a configuration error naming its key; SIGHUP's reload
// gives the next dial the new client certificate.
func TestRaftTLSSetup(t *testing.T) {
	pki := authtest.NewPKI(t)
	cfg := config.Default()
	cfg.TLS = config.TLS{Listen: "127.0.0.1:0", Cert: pki.ServerCert, Key: pki.ServerKey}
	cfg.Replication.UseTLS, cfg.Replication.CA = true, pki.CAFile
	cfg.Replication.Cert, cfg.Replication.Key = pki.ClientCert, pki.ClientKey
	var o cluster.Options
	transport, rt, err := setupRaftTLS(cfg, &o)
	if err != nil || transport != transportMutual || rt == nil {
		t.Fatalf("setupRaftTLS: %q, %v, %v", transport, rt, err)
	}
	if o.ServerTLS == nil || o.ClientTLS == nil || o.CurrentClientTLS == nil {
		t.Fatalf("TLS options not all set: %+v", o)
	}

	ln, err := tls.Listen("tcp", "127.0.0.1:0", o.ServerTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte("y"))
				}
			}()
		}
	}()
	dial := func(cfg *tls.Config) ([]*x509.Certificate, error) {
		cfg = cfg.Clone()
		cfg.ServerName = "127.0.0.1"
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			return nil, err
		}
		return c.ConnectionState().PeerCertificates, nil
	}
	if _, err := dial(o.CurrentClientTLS()); err != nil {
		t.Fatalf("a peer with replication.cert is refused: %v", err)
	}
	if _, err := dial(pki.ClientConfig(t, false)); err == nil {
		t.Fatal("a client without a certificate is served")
	}
	other := authtest.NewPKI(t)
	foreign, err := tls.LoadX509KeyPair(other.ClientCert, other.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	fc := pki.ClientConfig(t, false)
	fc.Certificates = []tls.Certificate{foreign}
	if _, err := dial(fc); err == nil {
		t.Fatal("a client whose certificate another CA signed is served")
	}

	// A reload: the next dial presents the new client certificate.
	before := o.CurrentClientTLS()
	cert2, key2 := pki.Issue(t, "client2", x509.ExtKeyUsageClientAuth)
	authtest.Install(t, pki.ClientCert, cert2)
	authtest.Install(t, pki.ClientKey, key2)
	var logs strings.Builder
	rt.reload(slog.New(slog.NewTextHandler(&logs, nil)))
	if !strings.Contains(logs.String(), "raft transport certificate reloaded") ||
		!strings.Contains(logs.String(), "raft transport client certificate reloaded") {
		t.Fatalf("the reload does not say so:\n%s", logs.String())
	}
	after := o.CurrentClientTLS()
	if after == before {
		t.Fatal("the reload did not give the next dial a new configuration")
	}
	leaf, err := x509.ParseCertificate(after.Certificates[0].Certificate[0])
	if err != nil || leaf.Subject.CommonName != "client2" {
		t.Fatalf("the next dial presents %v (%v), want client2", leaf.Subject, err)
	}
	if _, err := dial(after); err != nil {
		t.Fatalf("the reloaded certificate is refused: %v", err)
	}

	// An unreadable file names its key.
	for _, tc := range []struct {
		set func(c *config.Config, missing string)
		key string
	}{
		{func(c *config.Config, m string) { c.TLS.Cert = m }, "tls.cert"},
		{func(c *config.Config, m string) { c.Replication.CA = m }, "replication.ca"},
		{func(c *config.Config, m string) { c.Replication.Key = m }, "replication.key"},
	} {
		c := *cfg
		tc.set(&c, filepath.Join(t.TempDir(), "missing.pem"))
		_, _, err := setupRaftTLS(&c, &cluster.Options{})
		if !isConfigError(err) || !strings.Contains(err.Error(), tc.key+":") {
			t.Errorf("%s missing: %v (a configuration error: %v)", tc.key, err, isConfigError(err))
		}
	}
}
