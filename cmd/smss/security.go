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
	"github.com/smssmq/smss/internal/fsmode"
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
			MaxDelay: cfg.MaxLockout(), AddressFree: cfg.Auth.MaxFailuresPerAddress,
			StartRate: float64(cfg.Auth.MaxStartsPerSecond)})
		secret, err := auth.LoadOrCreateSecret(cfg.AuthSecretFile())
		if err != nil {
			return sec, nil, fmt.Errorf("auth.secretFile: %w", err)
		}
		if sec.Auth, err = auth.NewAuthenticatorWithSecret(store, lim, secret); err != nil {
			return sec, nil, err
		}
		sec.LoginTimeout = cfg.LoginTimeout()
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
// authentication (docs/protocol.md §10 item 24).
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

// passwordKey is the configuration key of the replication password file.
const passwordKey = "replication.passwordFile"

// masterDialer opens a slave's connection to its master per the
// replication.* keys: TLS (verified as masterHost unless serverName is
// set) and a login. A nil link means a plain connection, with nothing to
// reload; otherwise dial with link.DialContext, and SIGHUP reloads the
// link's TLS material and password for the next connection.
func masterDialer(cfg *config.Config, masterHost string, logger *slog.Logger) (*masterLink, error) {
	r := cfg.Replication
	if !r.UseTLS && r.User == "" {
		return nil, nil
	}
	link := &masterLink{user: r.User, passwordFile: r.PasswordFile, log: logger}
	if r.UseTLS {
		name := r.ServerName
		if name == "" {
			name = masterHost
		}
		ct, err := auth.NewClientTLS(r.CA, name, r.Cert, r.Key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", masterKeys.of(err), err)
		}
		if leaf := ct.Leaf(); leaf != nil {
			logCertificate(logger, "replication client certificate loaded", masterKeys.cert, leaf, time.Now())
		}
		link.tls = ct
	}
	if r.User != "" {
		pw, err := readPasswordFile(r.PasswordFile, logger)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", passwordKey, err)
		}
		link.password = pw
	}
	if _, err := link.dialer(); err != nil {
		return nil, err
	}
	return link, nil
}

// masterLink dials the master with the TLS material and the password in
// force: a reload of either gives the next connection a dialer built on
// the new one, while open connections keep what they negotiated.
type masterLink struct {
	tls          *auth.ClientTLS // nil without replication.useTLS
	user         string          // "" without a login
	passwordFile string
	log          *slog.Logger

	// mu guards what the dialer was built on; a password reload holds it
	// from reading the file to installing the new dialer, so reloads are
	// serialised and an older read never wins.
	mu       sync.Mutex
	password string
	cfg      *tls.Config
	dial     client.DialFunc
}

func (m *masterLink) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	dial, err := m.dialer()
	if err != nil {
		return nil, err
	}
	return dial(ctx, network, addr)
}

// dialer returns the dialer for the material in force, building a new one
// after a TLS reload.
func (m *masterLink) dialer() (client.DialFunc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cfg := m.tlsConfig(); m.dial == nil || cfg != m.cfg {
		dial, err := m.build(cfg, m.password)
		if err != nil {
			return nil, err
		}
		m.cfg, m.dial = cfg, dial
	}
	return m.dial, nil
}

// reloadPassword re-reads replication.passwordFile for the next
// connection. On error the password in force stays.
func (m *masterLink) reloadPassword() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	pw, err := readPasswordFile(m.passwordFile, m.log)
	if err != nil {
		return err
	}
	// A login's keys are derived once per dialer: a new password needs a
	// new one. Building it now reports a password the login cannot use
	// (SASLprep) here rather than on every reconnect.
	cfg := m.tlsConfig()
	dial, err := m.build(cfg, pw)
	if err != nil {
		return err
	}
	m.password, m.cfg, m.dial = pw, cfg, dial
	return nil
}

func (m *masterLink) tlsConfig() *tls.Config {
	if m.tls == nil {
		return nil
	}
	return m.tls.Config()
}

func (m *masterLink) build(cfg *tls.Config, password string) (client.DialFunc, error) {
	var creds *client.Credentials
	if m.user != "" {
		creds = &client.Credentials{User: m.user, Password: password}
	}
	dial, err := client.SecureDialer(nil, cfg, creds)
	if err != nil {
		return nil, fmt.Errorf("replication.user/%s: %w", passwordKey, err)
	}
	return dial, nil
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

// secureDataDir selects the data files' modes (store.groupReadable) and
// makes store.path itself private (0700, or 0750): that covers the files
// an original server or the meta store created with wider modes too. Not
// being able to tighten an existing directory (not its owner) is a
// warning, not an error.
func secureDataDir(cfg *config.Config, logger *slog.Logger) error {
	fsmode.SetGroupReadable(cfg.Store.GroupReadable)
	dir := cfg.Store.Path
	if err := os.MkdirAll(dir, fsmode.Dir()); err != nil {
		return err
	}
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if perm := info.Mode().Perm(); perm&^fsmode.Dir() != 0 {
		if err := os.Chmod(dir, perm&fsmode.Dir()); err != nil {
			logger.Warn("store.path is readable by other users and cannot be made private; chmod it", "path", dir,
				"mode", perm.String(), "err", err)
			return nil
		}
		logger.Info("store.path made private", "path", dir, "was", perm.String(), "now", (perm & fsmode.Dir()).String())
	}
	return nil
}
