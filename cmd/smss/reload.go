package main

import (
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/smssmq/smss/auth"
)

// certExpiryWarning: a certificate this close to its NotAfter, or past it,
// is logged at warn level at start-up and on every reload.
const certExpiryWarning = 14 * 24 * time.Hour

// tlsKeys are the configuration keys of one TLS configuration's files.
type tlsKeys struct{ cert, key, ca string }

var (
	listenerKeys = tlsKeys{cert: "tls.cert", key: "tls.key", ca: "tls.clientCA"}
	masterKeys   = tlsKeys{cert: "replication.cert", key: "replication.key", ca: "replication.ca"}
)

// of is the key of the file err is about; errors about no single file
// name all three.
func (k tlsKeys) of(err error) string {
	var fe *auth.TLSFileError
	if errors.As(err, &fe) {
		switch fe.File {
		case auth.TLSCert:
			return k.cert
		case auth.TLSKey:
			return k.key
		case auth.TLSCA:
			return k.ca
		}
	}
	return k.cert + "/" + k.key + "/" + k.ca
}

// reloader re-reads the files the server can swap while it runs.
type reloader struct {
	log *slog.Logger
	// users re-reads the users file (Server.ReloadUsers); nil without
	// authentication.
	users func() error
	// listener is the TLS listener's material (tls.listen); nil without
	// one.
	listener *auth.ServerTLS
	// master is a slave's link to its master: its TLS material
	// (replication.useTLS) and password (replication.user); nil on a
	// master or when the slave has neither.
	master *masterLink
	// masterNow, when set, returns the link in use at the time of the
	// signal (follow replaces it; nil after a promotion).
	masterNow func() *masterLink
	// raft is a cluster node's consensus transport material; nil outside
	// a cluster or over plain TCP.
	raft *raftTLS
}

// empty reports whether there is nothing to reload.
func (r *reloader) empty() bool {
	return r.users == nil && r.listener == nil && r.master == nil && r.raft == nil
}

// reload re-reads everything configured and logs each outcome. A failed
// part keeps its previous state and does not stop the others.
func (r *reloader) reload() {
	if r.masterNow != nil {
		r.master = r.masterNow()
	}
	if r.empty() {
		// A logrotate-style "kill -HUP" must not end the server; say that
		// it was seen and that nothing changed.
		r.log.Info("SIGHUP: nothing to reload (no auth.enabled, tls.listen, replication.useTLS or replication.user configured); the server keeps running unchanged")
		return
	}
	if r.users != nil {
		if err := r.users(); err != nil {
			r.log.Error("SIGHUP: users file not reloaded; the previous users stay in force", "err", err)
		} else {
			r.log.Info("SIGHUP: users file reloaded")
		}
	}
	if r.listener != nil {
		if err := r.listener.Reload(); err != nil {
			r.log.Error("SIGHUP: TLS listener certificate not reloaded; the previous certificate, key and client CAs stay in force",
				"key", listenerKeys.of(err), "err", err)
			warnExpiry(r.log, listenerKeys.cert, r.listener.Leaf(), time.Now())
		} else {
			logCertificate(r.log, "SIGHUP: TLS listener certificate reloaded", listenerKeys.cert, r.listener.Leaf(), time.Now())
		}
	}
	if r.master != nil && r.master.tls != nil {
		r.reloadMasterTLS(r.master.tls)
	}
	if r.raft != nil {
		r.raft.reload(r.log)
	}
	if r.master != nil && r.master.user != "" {
		if err := r.master.reloadPassword(); err != nil {
			r.log.Error("SIGHUP: replication password file not reloaded; the previous password stays in force",
				"key", passwordKey, "err", err)
		} else {
			r.log.Info("SIGHUP: replication password file reloaded; the next connection to the master logs in with it",
				"key", passwordKey)
		}
	}
}

func (r *reloader) reloadMasterTLS(ct *auth.ClientTLS) {
	const ok = "SIGHUP: replication TLS material reloaded; the next connection to the master uses it"
	err := ct.Reload()
	leaf := ct.Leaf()
	switch {
	case err != nil:
		r.log.Error("SIGHUP: replication TLS material not reloaded; the previous CAs and client certificate stay in force",
			"key", masterKeys.of(err), "err", err)
		if leaf != nil {
			warnExpiry(r.log, masterKeys.cert, leaf, time.Now())
		}
	case leaf != nil:
		logCertificate(r.log, ok, masterKeys.cert, leaf, time.Now())
	default: // no client certificate: the CA bundle (or the system roots)
		r.log.Info(ok, "key", masterKeys.ca)
	}
}

// reloadOnHUP calls r.reload on every SIGHUP until the returned stop is
// called, with or without anything to reload: SIGHUP never ends the server
// (main catches it for the whole life of the process, so a SIGHUP before
// or after this window is dropped rather than fatal).
func reloadOnHUP(r *reloader) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-hup:
				r.reload()
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

// logCertificate logs the certificate in force at info level, and at warn
// level too when it expires soon.
func logCertificate(logger *slog.Logger, msg, key string, leaf *x509.Certificate, now time.Time) {
	logger.Info(msg, "key", key, "subject", leaf.Subject.String(), "notAfter", leaf.NotAfter.UTC().Format(time.RFC3339))
	warnExpiry(logger, key, leaf, now)
}

// warnExpiry warns when leaf has expired, expires within
// certExpiryWarning or is not valid yet: peers refuse it.
func warnExpiry(logger *slog.Logger, key string, leaf *x509.Certificate, now time.Time) {
	attrs := []any{"key", key, "subject", leaf.Subject.String(), "notAfter", leaf.NotAfter.UTC().Format(time.RFC3339)}
	switch left := leaf.NotAfter.Sub(now); {
	case now.Before(leaf.NotBefore):
		logger.Warn("TLS certificate is not valid yet: peers refuse it until notBefore",
			append(attrs, "notBefore", leaf.NotBefore.UTC().Format(time.RFC3339))...)
	case left <= 0:
		logger.Warn("TLS certificate has expired: peers refuse it; replace the files and send SIGHUP", attrs...)
	case left < certExpiryWarning:
		logger.Warn("TLS certificate expires soon; replace the files and send SIGHUP",
			append(attrs, "expiresIn", left.Round(time.Minute).String())...)
	}
}
