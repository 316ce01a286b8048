package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// listenTLSLocked binds the TLS listener when Security.TLS is set. s.mu is
// held.
func (s *Server) listenTLSLocked() error {
	sec := s.opts.Security
	if sec.TLS == nil {
		return nil
	}
	if sec.TLSListen == "" {
		return errors.New("server: Security.TLSListen is required with Security.TLS")
	}
	ln, err := net.Listen("tcp", sec.TLSListen)
	if err != nil {
		return fmt.Errorf("listen (TLS) on %s: %w", sec.TLSListen, err)
	}
	s.tlsLn = tls.NewListener(ln, sec.TLS)
	s.log.Info("listening (TLS)", "addr", ln.Addr().String(), "clientCert", sec.TLS.ClientAuth == tls.RequireAndVerifyClientCert)
	return nil
}

// TLSAddr is the bound address of the TLS listener, nil without one.
func (s *Server) TLSAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tlsLn == nil {
		return nil
	}
	return s.tlsLn.Addr()
}

// serveTLS runs the TLS listener's accept loop beside Serve's. If it fails
// for any reason but Shutdown it closes the plain listener, so that Serve
// reports the failure instead of running half the service.
func (s *Server) serveTLS(tlsLn, plain net.Listener) {
	if tlsLn == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.acceptLoop(tlsLn); !errors.Is(err, ErrServerClosed) {
			s.log.Error("TLS listener failed; stopping the plain listener too", "err", err)
			plain.Close()
		}
	}()
}

// handshakeTLS completes a TLS connection's handshake within ReadTimeout,
// before any request is read, so that a silent client holds nothing longer
// and handshake failures are logged as such. Plain connections pass.
func (c *conn) handshakeTLS() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return true
	}
	limit := time.Now().Add(c.s.opts.ReadTimeout)
	if login := c.readUntil(); !login.IsZero() && login.Before(limit) {
		limit = login // the handshake counts toward the login deadline
	}
	ctx, cancel := context.WithDeadline(c.s.ctx, limit)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.log.Info("TLS handshake failed; closing the connection", "err", err)
		return false
	}
	st := tc.ConnectionState()
	attrs := []any{"version", tls.VersionName(st.Version), "cipher", tls.CipherSuiteName(st.CipherSuite)}
	if len(st.PeerCertificates) > 0 {
		attrs = append(attrs, "clientCert", st.PeerCertificates[0].Subject.String())
	}
	c.log.Debug("TLS established", attrs...)
	return true
}
