package config

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"
)

// Auth is the auth.* section: client authentication (SCRAM-SHA-256) and
// per-user permissions, read from a users file that smssctl user manages.
type Auth struct {
	// Enabled requires every client to log in; off by default.
	Enabled bool `yaml:"enabled"`
	// UsersFile is the users file (relative to the working directory
	// unless absolute). SIGHUP re-reads it.
	UsersFile string `yaml:"usersFile"`
	// MaxFailures failed logins from one address may come back to back;
	// from that one on, the address is locked out for LockoutMs, doubling
	// per further failure up to MaxLockoutMs.
	MaxFailures  int   `yaml:"maxFailures"`
	LockoutMs    int64 `yaml:"lockoutMs"`
	MaxLockoutMs int64 `yaml:"maxLockoutMs"`
	// MaxFailuresPerAddress is the same count for an address across all
	// the user names it tries (MaxFailures counts per address and user).
	MaxFailuresPerAddress int `yaml:"maxFailuresPerAddress"`
	// MaxStartsPerSecond is how many handshakes one address may start per
	// second (bursts of as many).
	MaxStartsPerSecond int `yaml:"maxStartsPerSecond"`
	// LoginTimeoutMs closes a connection that has not logged in this long
	// after it was accepted, whatever it sends meanwhile.
	LoginTimeoutMs int64 `yaml:"loginTimeoutMs"`
	// SecretFile holds the server's secret from which unknown users' fake
	// salts are derived, so that they stay the same across restarts; it is
	// created (32 random bytes, mode 0600) if missing. "" means
	// <store.path>/auth.secret.
	SecretFile string `yaml:"secretFile"`
}

// TLS is the tls.* section: an optional TLS listener beside the plain one.
// SIGHUP re-reads Cert, Key and ClientCA for new connections.
type TLS struct {
	// Listen is host:port of the TLS listener; "" means none.
	Listen string `yaml:"listen"`
	Cert   string `yaml:"cert"` // PEM certificate chain
	Key    string `yaml:"key"`  // PEM private key
	// ClientCA, when set, makes the TLS listener require client
	// certificates signed by one of the CAs in this PEM bundle.
	ClientCA string `yaml:"clientCA"`
}

// ReplicationClient is the replication.* section: how a slave connects to
// its master (-role slave). SIGHUP re-reads CA, Cert, Key and
// PasswordFile for the next connection.
type ReplicationClient struct {
	// User and PasswordFile log in to a master that requires
	// authentication; the user needs the replication role. The file holds
	// the password (trailing newlines ignored) and should be mode 0600.
	User         string `yaml:"user"`
	PasswordFile string `yaml:"passwordFile"`
	// UseTLS connects to the master's TLS listener (-port names it).
	UseTLS bool `yaml:"useTLS"`
	// CA verifies the master's certificate (system roots when empty);
	// ServerName is the name checked (the -host value when empty).
	CA         string `yaml:"ca"`
	ServerName string `yaml:"serverName"`
	// Cert and Key are the slave's client certificate, for a master that
	// requires one.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// LingerMs is master side: a busy replica stream (its last wake-up
	// found several blocks) writes at most once per LingerMs, so a slave
	// receives the commits of that time in one write instead of one per
	// commit (0 writes every commit at once).
	LingerMs int64 `yaml:"lingerMs"`
	// SyncSlaves is master side (semi-synchronous replication): a pub,
	// delay, create or delete is answered 200 only once this many
	// connected slaves confirmed its block (0: asynchronous, as the
	// original). SyncTimeoutMs bounds that wait; OnSyncTimeout says what
	// a write then gets (SyncFail: 400, SyncDegrade: 200 and asynchronous
	// until a slave caught up).
	SyncSlaves    int    `yaml:"syncSlaves"`
	SyncTimeoutMs int64  `yaml:"syncTimeoutMs"`
	OnSyncTimeout string `yaml:"onSyncTimeout"`
	// ReadCommitted (with SyncSlaves > 0) serves subscribers, on the
	// master and on its slaves, only what SyncSlaves slaves confirmed:
	// what a failover keeps (docs/protocol.md §4.6). false delivers every
	// committed write at once, as before, including writes a failover may
	// then drop.
	ReadCommitted bool `yaml:"readCommitted"`
	// RejoinMaxProbes is slave side: the most replica requests one search
	// for the common prefix of a divergent binlog may send (issue 16;
	// each is a connection to the master, and about 2·log2 of the
	// divergent eventIds are needed).
	RejoinMaxProbes int64 `yaml:"rejoinMaxProbes"`
	// PromoteQuietMs is slave side: a slave whose master sent it a block
	// less than this long ago (it is still streaming writes) refuses a
	// manual promote without --force, and status reports the stream
	// caughtUp once it was quiet this long (0: no such check).
	PromoteQuietMs int64 `yaml:"promoteQuietMs"`
}

// Values of replication.onSyncTimeout.
const (
	SyncFail    = "fail"
	SyncDegrade = "degrade"
)

// MaxSyncSlaves bounds replication.syncSlaves (far above any real setup).
const MaxSyncSlaves = 64

// ReadCommittedOn reports whether subscribers are limited to the commit
// point: replication.syncSlaves > 0 and replication.readCommitted.
func (r ReplicationClient) ReadCommittedOn() bool { return r.SyncSlaves > 0 && r.ReadCommitted }

// ReplicateBeforeSync reports whether a master sends each group's binlog
// blocks to its slaves before its own fsync (store.flushLevel 2 with
// replication.syncSlaves > 0, which a cluster requires): the slaves then
// write (and fsync) beside the master instead of after it. A 200 still
// waits for both; broker.Options.ReplicateBeforeSync.
func (c *Config) ReplicateBeforeSync() bool {
	return c.Store.FlushLevel >= 2 && c.Replication.SyncSlaves > 0
}

// SyncTimeout is replication.syncTimeoutMs.
func (c *Config) SyncTimeout() time.Duration { return ms(c.Replication.SyncTimeoutMs) }

// ReplicaLinger is replication.lingerMs as MasterOptions.Linger wants it
// (negative: off).
func (c *Config) ReplicaLinger() time.Duration {
	if c.Replication.LingerMs == 0 {
		return -1
	}
	return ms(c.Replication.LingerMs)
}

// Defaults of the security sections.
func defaultAuth() Auth {
	return Auth{MaxFailures: 5, LockoutMs: 1000, MaxLockoutMs: 300000,
		MaxFailuresPerAddress: 20, MaxStartsPerSecond: 100, LoginTimeoutMs: 10000}
}

// Defaults of the security keys outside the security sections (issue 18).
const (
	DefaultMaxConnsPerIP         = 1000
	DefaultAdminMaxConns         = 64
	DefaultAdminRequestTimeoutMs = 30000
	DefaultAdminMaxBodyBytes     = 65536
	DefaultAdminSessionTtlMs     = 43200000 // 12 hours
)

func setSecurityDefaults(c *Config) {
	c.Limit.MaxConnsPerIP = DefaultMaxConnsPerIP
	c.Admin.MaxConns = DefaultAdminMaxConns
	c.Admin.RequestTimeoutMs = DefaultAdminRequestTimeoutMs
	c.Admin.MaxBodyBytes = DefaultAdminMaxBodyBytes
	c.Admin.SessionTtlMs = DefaultAdminSessionTtlMs
}

// LoginTimeout is auth.loginTimeoutMs.
func (c *Config) LoginTimeout() time.Duration { return ms(c.Auth.LoginTimeoutMs) }

// AuthSecretFile is auth.secretFile, or auth.secret in store.path.
func (c *Config) AuthSecretFile() string {
	if c.Auth.SecretFile != "" {
		return c.Auth.SecretFile
	}
	return filepath.Join(c.Store.Path, "auth.secret")
}

// AdminRequestTimeout is admin.requestTimeoutMs.
func (c *Config) AdminRequestTimeout() time.Duration { return ms(c.Admin.RequestTimeoutMs) }

// AdminSessionTTL is admin.sessionTtlMs.
func (c *Config) AdminSessionTTL() time.Duration { return ms(c.Admin.SessionTtlMs) }

// Lockout is auth.lockoutMs.
func (c *Config) Lockout() time.Duration { return ms(c.Auth.LockoutMs) }

// MaxLockout is auth.maxLockoutMs.
func (c *Config) MaxLockout() time.Duration { return ms(c.Auth.MaxLockoutMs) }

func (c *Config) validateSecurity(v *validator) {
	a := c.Auth
	if a.Enabled && a.UsersFile == "" {
		v.add("auth.usersFile must be set when auth.enabled is true (create it with: smssctl user add --users-file PATH NAME)")
	}
	v.between("auth.maxFailures", int64(a.MaxFailures), 1, 1000000, "failed logins per address before lockouts")
	v.between("auth.lockoutMs", a.LockoutMs, 1, maxMs, "ms")
	v.between("auth.maxLockoutMs", a.MaxLockoutMs, 1, maxMs, "ms")
	if a.MaxLockoutMs < a.LockoutMs && a.LockoutMs >= 1 {
		v.add(fmt.Sprintf("auth.maxLockoutMs must be >= auth.lockoutMs (%d) (got %d)", a.LockoutMs, a.MaxLockoutMs))
	}
	v.between("auth.maxFailuresPerAddress", int64(a.MaxFailuresPerAddress), 1, 1000000, "failed logins per address, all users, before lockouts")
	v.between("auth.maxStartsPerSecond", int64(a.MaxStartsPerSecond), 1, 1000000, "handshakes one address may start per second")
	v.between("auth.loginTimeoutMs", a.LoginTimeoutMs, 100, 600000, "ms a connection may take to log in")

	// Above limit.maxConns it is capped (not refused): a config that lowered
	// maxConns before this key existed must still start.
	v.atLeast("limit.maxConnsPerIP", int64(c.Limit.MaxConnsPerIP), 1, "connections of one address; capped at limit.maxConns")
	ad := c.Admin
	v.between("admin.maxConns", int64(ad.MaxConns), 1, 100000, "open admin connections")
	v.between("admin.requestTimeoutMs", ad.RequestTimeoutMs, 1000, 30000, "ms to read a request's header and body; at most 30 s")
	v.between("admin.maxBodyBytes", ad.MaxBodyBytes, 1024, 1<<30, "bytes of a request body")
	v.between("admin.sessionTtlMs", ad.SessionTtlMs, 60000, maxMs, "ms a dashboard sign-in lasts")

	t := c.TLS
	if t.Listen != "" {
		if err := checkHostPort(t.Listen); err != "" {
			v.add("tls.listen " + err)
		}
		if t.Cert == "" || t.Key == "" {
			v.add("tls.cert and tls.key must be set when tls.listen is")
		}
		if p := portOf(t.Listen); p != 0 && p == c.Port && sameHost(hostOf(t.Listen), c.Host) {
			v.add(fmt.Sprintf("tls.listen must not use the plain port %d (got %q)", c.Port, t.Listen))
		}
	} else if t.Cert != "" || t.Key != "" || t.ClientCA != "" {
		v.add("tls.cert, tls.key and tls.clientCA need tls.listen (the TLS listener's host:port)")
	}

	r := c.Replication
	v.between("replication.lingerMs", r.LingerMs, 0, 1000, "ms; 0 sends every commit at once")
	v.between("replication.syncSlaves", int64(r.SyncSlaves), 0, MaxSyncSlaves, "0 answers without waiting for slaves")
	v.between("replication.syncTimeoutMs", r.SyncTimeoutMs, 1, 3600000, "ms")
	if r.OnSyncTimeout != SyncFail && r.OnSyncTimeout != SyncDegrade {
		v.add(fmt.Sprintf("replication.onSyncTimeout must be %q or %q (got %q)", SyncFail, SyncDegrade, r.OnSyncTimeout))
	}
	v.between("replication.rejoinMaxProbes", r.RejoinMaxProbes, 1, 1000, "replica requests per divergence search")
	v.between("replication.promoteQuietMs", r.PromoteQuietMs, 0, 600000, "ms; 0 promotes a slave whose master still streams")
	if (r.User == "") != (r.PasswordFile == "") {
		v.add("replication.user and replication.passwordFile must be set together")
	}
	if (r.Cert == "") != (r.Key == "") {
		v.add("replication.cert and replication.key must be set together")
	}
	if !r.UseTLS && (r.CA != "" || r.ServerName != "" || r.Cert != "") {
		v.add("replication.ca, replication.serverName and replication.cert need replication.useTLS: true")
	}
}

func checkHostPort(s string) string {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("must be host:port, e.g. 0.0.0.0:12302 (got %q)", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Sprintf("must have a port between 0 and 65535 (got %q)", s)
	}
	return ""
}

func hostOf(s string) string {
	h, _, _ := net.SplitHostPort(s)
	return h
}

func portOf(s string) int {
	_, p, _ := net.SplitHostPort(s)
	n, _ := strconv.Atoi(p)
	return n
}

func sameHost(a, b string) bool {
	return a == b || a == "" || a == "0.0.0.0" || a == "::" || b == "0.0.0.0" || b == "::"
}
