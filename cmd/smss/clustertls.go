package main

// The consensus transport's security (issue 31): the raft connections
// between the nodes of a cluster reuse the credentials the nodes already
// use between themselves.
//
//   - No tls.listen and no replication.useTLS: plain TCP, as before, with
//     a warning at start (whoever reaches a raft port can take part).
//   - Both: mutual TLS. The raft listener presents tls.cert/tls.key (the
//     node's certificate, as its TLS listener does) and requires a client
//     certificate that replication.ca verifies; a node dials its peers with
//     replication.cert/key, verifying them against replication.ca as
//     replication.serverName or, when that is empty, the peer's raft host.
//   - One of the two, no client certificate (replication.cert/key) or no
//     replication.ca: refused at start (exit 2), naming the keys.
//
// Why replication.ca and not tls.clientCA for the peers' client
// certificates: replication.ca is what this node already trusts to say
// "this is one of the cluster's nodes" (it verifies every peer it
// replicates from or probes), while tls.clientCA admits whatever clients
// the TLS listener serves, typically the applications' certificates, and
// an application's certificate must not be a ticket into the consensus.
// Both directions of a raft connection thus verify against the same CA,
// and the system roots are never used (any certificate a public CA issued
// would do): replication.ca is required.
//
// SIGHUP re-reads the raft transport's files too (reloader.raft): new raft
// connections use the new certificate and CAs, open ones keep theirs.

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/cluster"
	"github.com/smssmq/smss/config"
)

// configError marks a refusal of the configuration by startAuto: the
// process exits 2, as for the other configuration errors.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// isConfigError reports whether err is a refusal of the configuration.
func isConfigError(err error) bool {
	var ce *configError
	return errors.As(err, &ce)
}

// Consensus transports, as status and the log name them.
const (
	transportPlain  = "tcp"
	transportMutual = "mutual-tls"
)

// raftServerKeys are the keys of the raft listener's files: the node's
// certificate and the CA the peers' client certificates must chain to.
var raftServerKeys = tlsKeys{cert: "tls.cert", key: "tls.key", ca: "replication.ca"}

// raftTransport decides the consensus transport from the configuration
// alone: transportPlain or transportMutual, or why the combination is
// refused (one line naming the keys).
func raftTransport(cfg *config.Config) (string, error) {
	listener, repl := cfg.TLS.Listen != "", cfg.Replication.UseTLS
	switch {
	case !listener && !repl:
		return transportPlain, nil
	case listener && !repl:
		return "", errors.New("cluster: tls.listen is set but replication.useTLS is not: the consensus (raft) transport uses mutual TLS with both (the node's tls.cert, its peers verified with replication.ca and replication.cert) and plain TCP with neither")
	case !listener:
		return "", errors.New("cluster: replication.useTLS is set but tls.listen is not: the consensus (raft) transport uses mutual TLS with both (the node's tls.cert, its peers verified with replication.ca and replication.cert) and plain TCP with neither")
	case cfg.Replication.Cert == "" || cfg.Replication.Key == "":
		return "", errors.New("cluster: replication.cert and replication.key must be set with tls.listen and replication.useTLS: the consensus (raft) transport is mutual TLS and a node presents that client certificate to its peers")
	case cfg.Replication.CA == "":
		return "", errors.New("cluster: replication.ca must be set with tls.listen and replication.useTLS: the consensus (raft) transport verifies the peers' certificates against it (the system roots would admit any certificate a public CA issued)")
	}
	return transportMutual, nil
}

// raftTLS is the raft transport's TLS material, reloadable.
type raftTLS struct {
	server *auth.ServerTLS
	client *auth.ClientTLS
}

// setupRaftTLS fills o's TLS options per raftTransport and returns the
// transport and the material (nil for plain TCP). Every error wraps
// errClusterConfig.
func setupRaftTLS(cfg *config.Config, o *cluster.Options) (string, *raftTLS, error) {
	transport, err := raftTransport(cfg)
	if err != nil {
		return "", nil, &configError{err}
	}
	if transport == transportPlain {
		return transport, nil, nil
	}
	r := cfg.Replication
	st, err := auth.NewServerTLS(cfg.TLS.Cert, cfg.TLS.Key, r.CA)
	if err != nil {
		return "", nil, &configError{fmt.Errorf("cluster: the raft transport: %s: %w", raftServerKeys.of(err), err)}
	}
	ct, err := auth.NewClientTLS(r.CA, r.ServerName, r.Cert, r.Key)
	if err != nil {
		return "", nil, &configError{fmt.Errorf("cluster: the raft transport: %s: %w", masterKeys.of(err), err)}
	}
	o.ServerTLS, o.ClientTLS, o.CurrentClientTLS = st.Config(), ct.Config(), ct.Config
	return transport, &raftTLS{server: st, client: ct}, nil
}

// logRaftTransport says at start which transport the consensus uses.
func logRaftTransport(logger *slog.Logger, transport, raftAddr string) {
	if transport == transportPlain {
		logger.Warn("the consensus (raft) transport is plain TCP: it authenticates nobody, so whoever reaches the raft port can take part in the consensus; set tls.* and replication.useTLS, ca, cert and key for mutual TLS, or keep the raft ports on a closed network",
			"raft", raftAddr, "transport", transport)
		return
	}
	logger.Info("the consensus (raft) transport is mutual TLS", "raft", raftAddr, "transport", transport,
		"cert", raftServerKeys.cert, "peersVerifiedWith", raftServerKeys.ca, "clientCert", masterKeys.cert)
}

// reload re-reads both sides' files; a failed side keeps its material.
func (t *raftTLS) reload(log *slog.Logger) {
	if err := t.server.Reload(); err != nil {
		log.Error("SIGHUP: raft transport certificate not reloaded; the previous certificate, key and CAs stay in force",
			"key", raftServerKeys.of(err), "err", err)
	} else {
		log.Info("SIGHUP: raft transport certificate reloaded; new raft connections use it",
			"key", raftServerKeys.cert, "notAfter", t.server.Leaf().NotAfter.UTC().Format(time.RFC3339))
	}
	if err := t.client.Reload(); err != nil {
		log.Error("SIGHUP: raft transport client certificate not reloaded; the previous certificate and CAs stay in force",
			"key", masterKeys.of(err), "err", err)
	} else {
		log.Info("SIGHUP: raft transport client certificate reloaded; new raft connections use it",
			"key", masterKeys.cert, "notAfter", t.client.Leaf().NotAfter.UTC().Format(time.RFC3339))
	}
}
