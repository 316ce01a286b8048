package auth

import (
	"crypto/tls"
	"crypto/x509"
	"sync"
	"sync/atomic"
	"time"
)

// ServerTLS is a TLS listener's configuration whose certificate, key and
// client CA bundle Reload re-reads from their files, so certificates can
// be rotated without a restart. Every handshake uses the material of the
// last successful load; established connections keep what they
// negotiated. Whether clients must present a certificate is fixed when it
// is created.
type ServerTLS struct {
	certFile, keyFile, clientCAFile string

	base *tls.Config
	mu   sync.Mutex // serialises reloads, so an older read never wins
	cur  atomic.Pointer[material]
}

// NewServerTLS loads the files as ServerTLSConfig does. It accepts a
// certificate outside its validity period (the caller may warn): refusing
// to start would not serve anyone better.
func NewServerTLS(certFile, keyFile, clientCAFile string) (*ServerTLS, error) {
	m, err := loadServer(certFile, keyFile, clientCAFile, time.Time{})
	if err != nil {
		return nil, err
	}
	s := &ServerTLS{certFile: certFile, keyFile: keyFile, clientCAFile: clientCAFile}
	s.cur.Store(m)
	s.base = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: AEADCipherSuites,
		ClientAuth:   m.cfg.ClientAuth, // for those who inspect it; the handshake uses cur's
		// The returned configuration replaces this one for the whole
		// handshake. Session tickets stay encrypted with this one's
		// rotating keys (crypto/tls uses the original configuration's
		// keys when the returned one sets none), so resumption survives a
		// reload, and a resumed client certificate is verified again
		// against the current ClientCAs.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().cfg, nil
		},
	}
	return s, nil
}

// Config is the configuration for tls.NewListener. Do not modify it.
func (s *ServerTLS) Config() *tls.Config { return s.base }

// Leaf is the certificate new handshakes present.
func (s *ServerTLS) Leaf() *x509.Certificate { return s.cur.Load().leaf }

// Reload re-reads the certificate, key and client CA bundle. Nothing
// changes unless all of them load: on error (a *TLSFileError naming the
// file, or a certificate outside its validity period, ErrCertValidity)
// the previous material stays in force.
func (s *ServerTLS) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := loadServer(s.certFile, s.keyFile, s.clientCAFile, time.Now())
	if err != nil {
		return err
	}
	s.cur.Store(m)
	return nil
}

// ClientTLS is a client configuration whose CA bundle and client
// certificate Reload re-reads from their files. Config returns the
// material of the last successful load, for the next connection.
type ClientTLS struct {
	caFile, serverName, certFile, keyFile string

	mu  sync.Mutex // serialises reloads
	cur atomic.Pointer[material]
}

// NewClientTLS loads the files as ClientTLSConfig does, accepting a client
// certificate outside its validity period.
func NewClientTLS(caFile, serverName, certFile, keyFile string) (*ClientTLS, error) {
	m, err := loadClient(caFile, serverName, certFile, keyFile, time.Time{})
	if err != nil {
		return nil, err
	}
	c := &ClientTLS{caFile: caFile, serverName: serverName, certFile: certFile, keyFile: keyFile}
	c.cur.Store(m)
	return c, nil
}

// Config is the configuration of the last successful load; a reload
// returns a different pointer. Do not modify it.
func (c *ClientTLS) Config() *tls.Config { return c.cur.Load().cfg }

// Leaf is the client certificate, nil without one.
func (c *ClientTLS) Leaf() *x509.Certificate { return c.cur.Load().leaf }

// Reload re-reads the CA bundle and the client certificate and key, with
// ServerTLS.Reload's rules: all or nothing.
func (c *ClientTLS) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := loadClient(c.caFile, c.serverName, c.certFile, c.keyFile, time.Now())
	if err != nil {
		return err
	}
	c.cur.Store(m)
	return nil
}
