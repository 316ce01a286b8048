package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/protocol"
)

// DialFunc opens a connection, like net.Dialer.DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Credentials log connections in with SCRAM-SHA-256: the password never
// crosses the wire, and the server proves it holds the user's credentials
// (a server that cannot is refused with auth.ErrServerProof).
type Credentials struct {
	User     string
	Password string
}

// ErrAuthUnsupported means Credentials were configured but the server does
// not do authentication (it answered the handshake with "don't support
// action" or "authentication is not enabled on this server"). The client
// refuses to continue unauthenticated: the server may not be the expected
// one.
var ErrAuthUnsupported = errors.New("server does not support authentication")

// SecureDialer wraps base (nil means a net.Dialer) so that each connection
// is TLS when tlsConf is set (server name from the address unless
// tlsConf.ServerName is set) and logged in when creds is set, before it is
// handed out. The TLS handshake and the login are bounded by ctx. The
// PBKDF2 step of the login is computed once per SecureDialer, not per
// connection.
func SecureDialer(base DialFunc, tlsConf *tls.Config, creds *Credentials) (DialFunc, error) {
	if base == nil {
		base = (&net.Dialer{}).DialContext
	}
	var login *auth.Client
	if creds != nil {
		var err error
		if login, err = auth.NewClient(creds.User, creds.Password); err != nil {
			return nil, err
		}
	}
	if tlsConf == nil && login == nil {
		return base, nil
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := base(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := secure(ctx, &nc, addr, tlsConf, login); err != nil {
			nc.Close()
			return nil, err
		}
		return nc, nil
	}, nil
}

// secure runs the TLS handshake (replacing *nc by the TLS connection) and
// the login on a fresh connection.
func secure(ctx context.Context, nc *net.Conn, addr string, tlsConf *tls.Config, login *auth.Client) error {
	if dl, ok := ctx.Deadline(); ok {
		(*nc).SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { (*nc).SetDeadline(aLongTimeAgo) })
	defer stop()
	if tlsConf != nil {
		cfg := tlsConf
		if cfg.ServerName == "" {
			cfg = tlsConf.Clone()
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			cfg.ServerName = host
		}
		tc := tls.Client(*nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			var cv *tls.CertificateVerificationError
			if errors.As(err, &cv) {
				// Reconnecting cannot make an untrusted certificate trusted.
				return permanentError{fmt.Errorf("TLS handshake with %s: %w", addr, err)}
			}
			return fmt.Errorf("TLS handshake with %s: %w", addr, ctxCause(ctx, err))
		}
		*nc = tc
	}
	if login != nil {
		if err := login.Login(*nc); err != nil {
			var be *protocol.BizError
			switch {
			case errors.Is(err, protocol.ErrNotSupported), errors.Is(err, protocol.ErrAuthDisabled):
				err = permanentError{fmt.Errorf("%w (%w)", ErrAuthUnsupported, err)}
			case errors.As(err, &be):
				err = newServerError(be.Msg, "")
			case errors.Is(err, auth.ErrServerProof):
				err = permanentError{err}
			default:
				err = ctxCause(ctx, err)
			}
			return fmt.Errorf("log in to %s as %q: %w", addr, login.User(), err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	(*nc).SetDeadline(time.Time{})
	return nil
}
