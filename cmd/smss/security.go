package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/server"
)

// setupSecurity builds the server's authentication and TLS listener from
// the auth.* and tls.* keys. An unreadable users file or certificate is a
// configuration error. The returned ServerTLS (nil without tls.listen) is
// the listener's material, which SIGHUP reloads.
func setupSecurity(cfg *config.Config, logger *slog.Logger) (server.Security, *auth.ServerTLS, error) {
	var sec server.Security
	if cfg.Auth.Enabled {
		store, err := auth.OpenStore(cfg.Auth.UsersFile, logger.With("component", "auth"))
		if err != nil {
			return sec, nil, fmt.Errorf("auth.usersFile: %w", err)
		}
		lim := auth.NewLimiter(auth.LimiterOptions{Free: cfg.Auth.MaxFailures, BaseDelay: cfg.Lockout(),
			MaxDelay: cfg.MaxLockout()})
		if sec.Auth, err = auth.NewAuthenticator(store, lim); err != nil {
			return sec, nil, err
		}
	}
	if cfg.TLS.Listen == "" {
		return sec, nil, nil
	}
	st, err := auth.NewServerTLS(cfg.TLS.Cert, cfg.TLS.Key, cfg.TLS.ClientCA)
	if err != nil {
		return sec, nil, fmt.Errorf("%s: %w", listenerKeys.of(err), err)
	}
	logCertificate(logger, "TLS certificate loaded", listenerKeys.cert, st.Leaf(), time.Now())
	sec.TLS, sec.TLSListen = st.Config(), cfg.TLS.Listen
	return sec, st, nil
}

// warnExposure logs the listeners reachable from other hosts without
// authentication (spec §10 item 24).
func warnExposure(logger *slog.Logger, srv *server.Server, authOn bool) {
	if authOn {
		return
	}
	if warning := exposure(srv.Addr()); warning != "" {
		logger.Warn(warning, "addr", srv.Addr().String(), "key", "host")
	}
	if a := srv.TLSAddr(); a != nil {
		if warning := exposure(a); warning != "" {
			logger.Warn("TLS listener: "+warning, "addr", a.String(), "key", "tls.listen")
		}
	}
}

// masterDialer opens a slave's connection to its master per the
// replication.* keys: TLS (verified as masterHost unless serverName is
// set) and a login. nil means a plain connection. The returned ClientTLS
// (nil without replication.useTLS) is the TLS material, which SIGHUP
// reloads for the next connection.
func masterDialer(cfg *config.Config, masterHost string, logger *slog.Logger) (client.DialFunc, *auth.ClientTLS, error) {
	r := cfg.Replication
	var ct *auth.ClientTLS
	if r.UseTLS {
		name := r.ServerName
		if name == "" {
			name = masterHost
		}
		var err error
		if ct, err = auth.NewClientTLS(r.CA, name, r.Cert, r.Key); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", masterKeys.of(err), err)
		}
		if leaf := ct.Leaf(); leaf != nil {
			logCertificate(logger, "replication client certificate loaded", masterKeys.cert, leaf, time.Now())
		}
	}
	var creds *client.Credentials
	if r.User != "" {
		pw, err := readPasswordFile(r.PasswordFile, logger)
		if err != nil {
			return nil, nil, fmt.Errorf("replication.passwordFile: %w", err)
		}
		creds = &client.Credentials{User: r.User, Password: pw}
	}
	if ct == nil {
		if creds == nil {
			return nil, nil, nil
		}
		dial, err := client.SecureDialer(nil, nil, creds)
		return dial, nil, err
	}
	link := &masterLink{tls: ct, creds: creds}
	if _, err := link.dialer(); err != nil {
		return nil, nil, err
	}
	return link.DialContext, ct, nil
}

// masterLink dials the master with the TLS material in force: a reload
// gives the next connection a dialer built on the new configuration.
type masterLink struct {
	tls   *auth.ClientTLS
	creds *client.Credentials

	mu   sync.Mutex
	cfg  *tls.Config // what dial was built on
	dial client.DialFunc
}

func (m *masterLink) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	dial, err := m.dialer()
	if err != nil {
		return nil, err
	}
	return dial(ctx, network, addr)
}

func (m *masterLink) dialer() (client.DialFunc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cfg := m.tls.Config(); cfg != m.cfg {
		// A new dialer repeats the login's key derivation once.
		dial, err := client.SecureDialer(nil, cfg, m.creds)
		if err != nil {
			return nil, err
		}
		m.cfg, m.dial = cfg, dial
	}
	return m.dial, nil
}

// readPasswordFile returns the file's content without trailing newlines.
func readPasswordFile(path string, logger *slog.Logger) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if info.Mode().Perm()&0o077 != 0 {
		logger.Warn("password file is readable by other users; chmod 600 it", "path", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	pw := string(bytes.TrimRight(data, "\r\n"))
	if pw == "" {
		return "", errors.New(path + " is empty")
	}
	return pw, nil
}
