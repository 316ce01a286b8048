package config_test

import (
	"testing"
	"time"

	"github.com/smssmq/smss/admin"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/cluster"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/lifecycle"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
	"github.com/smssmq/smss/server"
)

// The packages that cmd/smss configures also default their zero Options,
// for tests and embedders. cmd/smss always passes every configured value, so
// these defaults never reach a running server; still, a package default
// that drifted from the shipped one would mislead a reader of that package.
// Each must equal config.Default()'s value of the key it documents.
//
// Deliberately not listed: broker.Options.GroupWait, whose zero value
// (never wait) is the package default while worker.groupWaitUs ships 500:
// a test or embedder that does not opt in to the flushLevel 2 group wait
// gets no added latency (see the field's comment).
func TestPackageDefaultsMatchConfig(t *testing.T) {
	c := config.Default()
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	tests := []struct {
		key       string
		pkg, conf any
	}{
		{"host", server.DefaultHost, c.Host},
		{"timeout.net.read", server.DefaultReadTimeout, ms(c.Timeout.Net.Read)},
		{"timeout.net.request", server.DefaultRequestTimeout, ms(c.Timeout.Net.Request)},
		{"timeout.net.reply", server.DefaultWriteTimeout, ms(c.Timeout.Net.Reply)},
		{"timeout.net.idle", server.DefaultIdleTimeout, ms(c.Timeout.Net.Idle)},
		{"timeout.net.write", server.DefaultAliveWriteTimeout, ms(c.Timeout.Net.Write)},
		{"timeout.server.alive", server.DefaultAliveInterval, ms(c.Timeout.Server.Alive)},
		{"timeout.server.alive (replication)", replication.DefaultAliveInterval, ms(c.Timeout.Server.Alive)},
		{"timeout.sub.defaultAck", server.DefaultSubAckTimeout, ms(c.Timeout.Sub.DefaultAck)},
		{"timeout.sub.maxAck", server.DefaultMaxAckTimeout, ms(c.Timeout.Sub.MaxAck)},
		{"limit.maxConns", server.DefaultMaxConns, c.Limit.MaxConns},
		{"limit.maxConnsPerIP", server.DefaultMaxConnsPerIP, c.Limit.MaxConnsPerIP},
		{"limit.maxFrameBytes", protocol.DefaultMaxFrameBytes, c.Limit.MaxFrameBytes},
		{"delay.maxDelay", broker.DefaultMaxDelay, ms(c.Delay.MaxDelay)},
		{"auth.loginTimeoutMs", server.DefaultLoginTimeout, ms(c.Auth.LoginTimeoutMs)},
		{"admin.maxConns", admin.DefaultMaxConns, c.Admin.MaxConns},
		{"admin.requestTimeoutMs", admin.DefaultRequestTimeout, ms(c.Admin.RequestTimeoutMs)},
		{"admin.maxBodyBytes", int64(admin.DefaultMaxBodyBytes), c.Admin.MaxBodyBytes},
		{"admin.sessionTtlMs", admin.DefaultSessionTTL, ms(c.Admin.SessionTtlMs)},
		{"store.maxDays", lifecycle.DefaultMaxDays, c.Store.MaxDays},
		{"store.clearInterval", lifecycle.DefaultRetentionInterval, time.Duration(c.Store.ClearInterval) * time.Second},
		{"store.maxSlaveKeepFiles", lifecycle.DefaultMaxSlaveKeepFiles, c.Store.MaxSlaveKeepFiles},
		{"dedupe.window", broker.DefaultDedupeWindow, ms(c.Dedupe.Window)},
		{"dedupe.maxIds", broker.DefaultDedupeMaxIDs, c.Dedupe.MaxIDs},
		{"worker.inlineDeliveries", broker.DefaultInlineDeliveries, c.Worker.InlineDeliveries},
		{"replication.lingerMs", replication.DefaultLinger, ms(c.Replication.LingerMs)},
		{"replication.syncTimeoutMs", replication.DefaultSyncTimeout, ms(c.Replication.SyncTimeoutMs)},
		{"replication.rejoinMaxProbes", int64(replication.DefaultMaxProbes), c.Replication.RejoinMaxProbes},
		{"cluster.failAfterMs", cluster.DefaultFailAfter, c.Cluster.FailAfter()},
		{"cluster.probeIntervalMs", cluster.DefaultProbeInterval, c.Cluster.ProbeInterval()},
		{"cluster.probeTimeoutMs", cluster.DefaultProbeTimeout, c.Cluster.ProbeTimeout()},
		{"cluster.leaseMs", cluster.DefaultLease, c.Cluster.Lease()},
		{"cluster.isrLagMs", cluster.DefaultISRLag, c.Cluster.ISRLag()},
		{"cluster.switchoverWaitMs", cluster.DefaultSwitchoverWait, c.Cluster.SwitchoverWait()},
		{"cluster.heartbeatMs", cluster.DefaultHeartbeatTimeout, c.Cluster.Heartbeat()},
		{"cluster.electionMs", cluster.DefaultElectionTimeout, c.Cluster.Election()},
	}
	for _, tt := range tests {
		if tt.pkg != tt.conf {
			t.Errorf("%s: package default %v (%T), config default %v (%T)", tt.key, tt.pkg, tt.pkg, tt.conf, tt.conf)
		}
	}
}
