package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/smssmq/smss/client"
)

// tlsProbeTimeout bounds the TLS handshake tlsHint tries after a failure.
const tlsProbeTimeout = 2 * time.Second

// tlsHint explains a connection failure caused by the wrong kind of
// listener: a plain client on a TLS port only sees the connection close
// (the server's TLS stack drops a first record that is no handshake), so
// after such a failure each address is probed with a TLS handshake, and a
// TLS client on a plain port is told that it is one. It returns "" when it
// has nothing to add.
func tlsHint(g *globals, err error) string {
	var se *client.ServerError
	if errors.As(err, &se) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.Canceled) {
		return ""
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return ""
	}
	if g.sec.opts != nil && g.sec.opts.TLS != nil {
		if strings.Contains(err.Error(), "does not look like a TLS handshake") {
			return " (the server does not speak TLS on this port: is it the plain port? Connect without --tls/--ca or to tls.listen)"
		}
		return ""
	}
	for _, a := range g.addrs() {
		if speaksTLS(a) {
			return " (" + a + " is a TLS listener: connect with --tls, or --ca FILE to verify its certificate)"
		}
	}
	return ""
}

// speaksTLS reports whether addr completes a TLS handshake, or answers
// one with a TLS alert (a server that requires a client certificate).
func speaksTLS(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), tlsProbeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	// The probe only identifies the protocol; nothing is sent after the
	// handshake, so not verifying the certificate exposes nothing.
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // protocol probe only
	err = tc.HandshakeContext(ctx)
	// A TLS alert from the peer (e.g. a required client certificate)
	// arrives as a "remote error: tls: ..." operation error.
	return err == nil || strings.Contains(err.Error(), "remote error: tls:")
}
