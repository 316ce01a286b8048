package server

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/internal/smsstest"
)

func startTLS(t *testing.T, clientCA bool) (*testServer, *authtest.PKI) {
	t.Helper()
	pki := authtest.NewPKI(t)
	ts := startServer(t, newFakeBackend(), func(o *Options) {
		o.Security = Security{TLS: pki.ServerConfig(t, clientCA), TLSListen: "127.0.0.1:0"}
		o.ReadTimeout = 2 * time.Second
	})
	return ts, pki
}

func tlsDial(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: testDeadline}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(testDeadline))
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func TestPlainAndTLSListenersSideBySide(t *testing.T) {
	ts, pki := startTLS(t, false)
	if ts.TLSAddr() == nil || ts.TLSAddr().String() == ts.Addr().String() {
		t.Fatalf("TLS address %v, plain %v", ts.TLSAddr(), ts.Addr())
	}
	plain := ts.dial(t)
	send(t, plain, createReq("orders", 0))
	expect(t, plain, okReply())
	c, err := tlsDial(t, ts.TLSAddr().String(), pki.ClientConfig(t, false))
	if err != nil {
		t.Fatal(err)
	}
	send(t, c, pubReq("orders", record("over tls")))
	expect(t, c, okReply())
	send(t, c, aliveReq())
	expect(t, c, aliveReply())
	if got := c.ConnectionState().Version; got < tls.VersionTLS12 {
		t.Fatalf("TLS version %x", got)
	}
	// An untrusted server certificate is refused by the client.
	if _, err := tlsDial(t, ts.TLSAddr().String(), &tls.Config{ServerName: "localhost"}); err == nil {
		t.Fatal("a client without the CA accepted the server")
	}
	// Plain bytes on the TLS port are not served as requests.
	raw := ts.dialAddr(t, ts.TLSAddr().String())
	send(t, raw, aliveReq())
	buf := make([]byte, 64)
	n, _ := raw.Read(buf)
	if n >= 2 && buf[0] == 0xc9 && buf[1] == 0 {
		t.Fatal("the TLS listener answered a plain request")
	}
}

func TestTLSClientCertificateRequired(t *testing.T) {
	ts, pki := startTLS(t, true)
	// Without a client certificate: with TLS 1.3 the client's handshake may
	// complete before the server refuses, so the refusal shows on I/O.
	c, err := tlsDial(t, ts.TLSAddr().String(), pki.ClientConfig(t, false))
	if err == nil {
		c.Write(aliveReq())
		_, err = c.Read(make([]byte, 10))
	}
	if err == nil {
		t.Fatal("a client without a certificate was served")
	}
	// With one signed by the CA.
	c, err = tlsDial(t, ts.TLSAddr().String(), pki.ClientConfig(t, true))
	if err != nil {
		t.Fatal(err)
	}
	send(t, c, aliveReq())
	expect(t, c, aliveReply())
	// The server logs the failure after sending its alert, on the refused
	// connection's goroutine, which may not have run yet.
	smsstest.WaitFor(t, testDeadline, "the refused handshake to be logged", func() bool {
		return strings.Contains(ts.logs.String(), "TLS handshake failed")
	})
}

func TestTLSHandshakeTimeout(t *testing.T) {
	ts, _ := startTLS(t, false)
	// A client that connects and says nothing is dropped after ReadTimeout.
	raw := ts.dialAddr(t, ts.TLSAddr().String())
	raw.SetDeadline(time.Now().Add(testDeadline))
	start := time.Now()
	if _, err := raw.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from a silent TLS connection")
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("silent TLS client held for %v", d)
	}
}

func (ts *testServer) dialAddr(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, testDeadline)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(testDeadline))
	t.Cleanup(func() { c.Close() })
	return c
}
