package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/server"
)

// setupSecurity builds the server's authentication and TLS listener from
// the auth.* and tls.* keys. An unreadable users file or certificate is a
// configuration error.
func setupSecurity(cfg *config.Config, logger *slog.Logger) (server.Security, error) {
	var sec server.Security
	if cfg.Auth.Enabled {
		store, err := auth.OpenStore(cfg.Auth.UsersFile, logger.With("component", "auth"))
		if err != nil {
			return sec, fmt.Errorf("auth.usersFile: %w", err)
		}
		lim := auth.NewLimiter(auth.LimiterOptions{Free: cfg.Auth.MaxFailures, BaseDelay: cfg.Lockout(),
			MaxDelay: cfg.MaxLockout()})
		if sec.Auth, err = auth.NewAuthenticator(store, lim); err != nil {
			return sec, err
		}
	}
	if cfg.TLS.Listen != "" {
		tc, err := auth.ServerTLSConfig(cfg.TLS.Cert, cfg.TLS.Key, cfg.TLS.ClientCA)
		if err != nil {
			return sec, fmt.Errorf("tls.cert/tls.key/tls.clientCA: %w", err)
		}
		sec.TLS, sec.TLSListen = tc, cfg.TLS.Listen
	}
	return sec, nil
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

// reloadOnHUP re-reads the users file on every SIGHUP until the returned
// stop is called. Without authentication SIGHUP keeps its default action.
func reloadOnHUP(srv *server.Server, authOn bool, logger *slog.Logger) (stop func()) {
	if !authOn {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-hup:
				if err := srv.ReloadUsers(); err != nil {
					logger.Error("SIGHUP: users file not reloaded; the previous users stay in force", "err", err)
				} else {
					logger.Info("SIGHUP: users file reloaded")
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-exited
	}
}

// masterDialer opens a slave's connection to its master per the
// replication.* keys: TLS (verified as masterHost unless serverName is
// set) and a login. nil means a plain connection.
func masterDialer(cfg *config.Config, masterHost string, logger *slog.Logger) (client.DialFunc, error) {
	r := cfg.Replication
	var tc *tls.Config
	if r.UseTLS {
		name := r.ServerName
		if name == "" {
			name = masterHost
		}
		c, err := auth.ClientTLSConfig(r.CA, name, r.Cert, r.Key)
		if err != nil {
			return nil, fmt.Errorf("replication.ca/cert/key: %w", err)
		}
		tc = c
	}
	var creds *client.Credentials
	if r.User != "" {
		pw, err := readPasswordFile(r.PasswordFile, logger)
		if err != nil {
			return nil, fmt.Errorf("replication.passwordFile: %w", err)
		}
		creds = &client.Credentials{User: r.User, Password: pw}
	}
	if tc == nil && creds == nil {
		return nil, nil
	}
	return client.SecureDialer(nil, tc, creds)
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
