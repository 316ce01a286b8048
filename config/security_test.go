package config

import (
	"strings"
	"testing"
)

func TestSecurityValidation(t *testing.T) {
	cases := []struct {
		name, yaml, want string // want "" = valid
	}{
		{"off by default", "", ""},
		{"auth on", "auth:\n  enabled: true\n  usersFile: users.json\n", ""},
		{"auth without file", "auth:\n  enabled: true\n", "auth.usersFile must be set"},
		{"lockouts", "auth:\n  lockoutMs: 5000\n  maxLockoutMs: 10\n", "auth.maxLockoutMs must be >= auth.lockoutMs"},
		{"failures", "auth:\n  maxFailures: 0\n", "auth.maxFailures must be between"},
		{"per-address failures", "auth:\n  maxFailuresPerAddress: 0\n", "auth.maxFailuresPerAddress must be between"},
		{"start rate", "auth:\n  maxStartsPerSecond: 0\n", "auth.maxStartsPerSecond must be between"},
		{"login timeout", "auth:\n  loginTimeoutMs: 0\n", "auth.loginTimeoutMs must be between"},
		{"login timeout long", "auth:\n  loginTimeoutMs: 600001\n", "auth.loginTimeoutMs must be between"},
		{"conns per ip", "limit:\n  maxConnsPerIP: 0\n", "limit.maxConnsPerIP must be >= 1"},
		// An older config that lowered maxConns starts; the per-address
		// cap is capped with it.
		{"conns lowered", "limit:\n  maxConns: 10\n", ""},
		{"admin conns", "admin:\n  maxConns: 0\n", "admin.maxConns must be between"},
		{"admin request timeout", "admin:\n  requestTimeoutMs: 30001\n", "admin.requestTimeoutMs must be between"},
		{"admin body", "admin:\n  maxBodyBytes: 10\n", "admin.maxBodyBytes must be between"},
		{"admin session", "admin:\n  sessionTtlMs: 1000\n", "admin.sessionTtlMs must be between"},
		{"hardening keys", "limit:\n  maxConnsPerIP: 5\nauth:\n  loginTimeoutMs: 2000\n  secretFile: /x\nstore:\n  groupReadable: true\n", ""},
		{"linger negative", "replication:\n  lingerMs: -1\n", "replication.lingerMs must be between"},
		{"linger too long", "replication:\n  lingerMs: 1001\n", "replication.lingerMs must be between"},
		{"sync on", "replication:\n  syncSlaves: 2\n  syncTimeoutMs: 300\n  onSyncTimeout: degrade\n", ""},
		{"sync slaves negative", "replication:\n  syncSlaves: -1\n", "replication.syncSlaves must be between"},
		{"sync slaves too many", "replication:\n  syncSlaves: 65\n", "replication.syncSlaves must be between"},
		{"sync timeout zero", "replication:\n  syncTimeoutMs: 0\n", "replication.syncTimeoutMs must be between"},
		{"sync timeout too long", "replication:\n  syncTimeoutMs: 3600001\n", "replication.syncTimeoutMs must be between"},
		{"on sync timeout", "replication:\n  onSyncTimeout: ignore\n", "replication.onSyncTimeout must be"},
		{"on sync timeout empty", "replication:\n  onSyncTimeout: \"\"\n", "replication.onSyncTimeout must be"},
		{"rejoin probes zero", "replication:\n  rejoinMaxProbes: 0\n", "replication.rejoinMaxProbes must be between"},
		{"rejoin probes", "replication:\n  rejoinMaxProbes: 200\n", ""},
		{"tls", "tls:\n  listen: 0.0.0.0:12302\n  cert: c.pem\n  key: k.pem\n  clientCA: ca.pem\n", ""},
		{"tls without cert", "tls:\n  listen: 0.0.0.0:12302\n", "tls.cert and tls.key must be set"},
		{"tls bad listen", "tls:\n  listen: nope\n  cert: c\n  key: k\n", "tls.listen must be host:port"},
		{"tls same port", "port: 12301\ntls:\n  listen: 127.0.0.1:12301\n  cert: c\n  key: k\n", "must not use the plain port"},
		{"cert without listen", "tls:\n  cert: c.pem\n", "need tls.listen"},
		{"repl user alone", "replication:\n  user: slave\n", "replication.user and replication.passwordFile"},
		{"repl cert alone", "replication:\n  useTLS: true\n  cert: c\n", "replication.cert and replication.key"},
		{"repl ca without tls", "replication:\n  ca: ca.pem\n", "need replication.useTLS: true"},
		{"repl full", "replication:\n  user: s\n  passwordFile: p\n  useTLS: true\n  ca: ca\n  serverName: m\n  cert: c\n  key: k\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
