package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// TLSFile names the part of a TLS configuration a TLSFileError is about.
type TLSFile string

// The files of a TLS configuration.
const (
	TLSCert TLSFile = "certificate" // PEM certificate chain, leaf first
	TLSKey  TLSFile = "key"         // PEM private key of the leaf
	TLSCA   TLSFile = "CA bundle"   // PEM CA certificates
)

// TLSFileError says which file of a TLS configuration could not be used,
// so that the caller can name its configuration key.
type TLSFileError struct {
	File TLSFile
	Path string
	Err  error
}

func (e *TLSFileError) Error() string {
	return fmt.Sprintf("%s file %s: %v", e.File, e.Path, e.Err)
}

func (e *TLSFileError) Unwrap() error { return e.Err }

// ErrCertValidity means a certificate is expired or not yet valid. Only a
// reload refuses such a certificate (see ServerTLS.Reload): at start-up
// the caller decides.
var ErrCertValidity = errors.New("certificate outside its validity period")

// ServerTLSConfig loads a server certificate and key (PEM). With clientCA
// set, every client must present a certificate signed by one of the CAs in
// that PEM bundle. TLS 1.2 is the minimum. The configuration is fixed; see
// NewServerTLS for one that can be reloaded.
func ServerTLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	m, err := loadServer(certFile, keyFile, clientCAFile, time.Time{})
	if err != nil {
		return nil, err
	}
	return m.cfg, nil
}

// ClientTLSConfig returns a client configuration: the server is verified
// against the CAs in caFile (the system roots when empty) under serverName
// (the dialled host when empty); certFile and keyFile, when set, are the
// client certificate for servers that verify clients. The configuration is
// fixed; see NewClientTLS for one that can be reloaded.
func ClientTLSConfig(caFile, serverName, certFile, keyFile string) (*tls.Config, error) {
	m, err := loadClient(caFile, serverName, certFile, keyFile, time.Time{})
	if err != nil {
		return nil, err
	}
	return m.cfg, nil
}

// material is one load of a configuration's files.
type material struct {
	cfg  *tls.Config
	leaf *x509.Certificate // nil for a client without a certificate
}

// AEADCipherSuites are the TLS 1.2 cipher suites smss offers and accepts:
// ECDHE key exchange (forward secrecy) with an AEAD cipher only; CBC
// suites (Lucky13-style padding oracles) and RSA key exchange are left
// out. TLS 1.3's suites are all AEAD and not configurable.
var AEADCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// loadServer reads a server's files; a non-zero at refuses a certificate
// that is not valid at that time.
func loadServer(certFile, keyFile, clientCAFile string, at time.Time) (*material, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: both a certificate and a key file are required")
	}
	cert, err := loadKeyPair(certFile, keyFile, at)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, CipherSuites: AEADCipherSuites}
	if clientCAFile != "" {
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return &material{cfg: cfg, leaf: cert.Leaf}, nil
}

// loadClient reads a client's files; a non-zero at refuses a client
// certificate that is not valid at that time.
func loadClient(caFile, serverName, certFile, keyFile string, at time.Time) (*material, error) {
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12, CipherSuites: AEADCipherSuites}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	m := &material{cfg: cfg}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := loadKeyPair(certFile, keyFile, at)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
		m.leaf = cert.Leaf
	case certFile != "" || keyFile != "":
		return nil, errors.New("tls: a client certificate needs both the certificate and the key file")
	}
	return m, nil
}

// loadKeyPair is tls.LoadX509KeyPair with each failure charged to the file
// that causes it: the certificate file when it cannot be read, holds no
// certificate or (at non-zero) one outside its validity period; the key
// file otherwise, including a key that does not match the certificate.
func loadKeyPair(certFile, keyFile string, at time.Time) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, &TLSFileError{TLSCert, certFile, readError(err)}
	}
	leaf, err := parseLeaf(certPEM)
	if err != nil {
		return tls.Certificate{}, &TLSFileError{TLSCert, certFile, err}
	}
	if !at.IsZero() {
		if err := checkValidity(leaf, at); err != nil {
			return tls.Certificate{}, &TLSFileError{TLSCert, certFile, err}
		}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, &TLSFileError{TLSKey, keyFile, readError(err)}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, &TLSFileError{TLSKey, keyFile, err}
	}
	cert.Leaf = leaf // the same first CERTIFICATE block X509KeyPair used
	return cert, nil
}

// parseLeaf parses the first CERTIFICATE block, the one a handshake
// presents as the leaf.
func parseLeaf(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("holds no PEM certificate")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

func checkValidity(c *x509.Certificate, at time.Time) error {
	switch {
	case at.After(c.NotAfter):
		return fmt.Errorf("%w: %q expired at %s", ErrCertValidity, c.Subject.String(), c.NotAfter.UTC().Format(time.RFC3339))
	case at.Before(c.NotBefore):
		return fmt.Errorf("%w: %q is not valid before %s", ErrCertValidity, c.Subject.String(), c.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

func loadPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &TLSFileError{TLSCA, path, readError(err)}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, &TLSFileError{TLSCA, path, errors.New("holds no PEM certificate")}
	}
	return pool, nil
}

// readError drops the path from a read error: TLSFileError names it.
func readError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}
