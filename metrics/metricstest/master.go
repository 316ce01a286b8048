package metricstest

import (
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// Master is a fake master with two live topics, an expired and a deleted
// one, two subscribers, one slave and three delayed messages: the fixture
// of the admin server's tests and of its terminal client's (adminclient).
func Master() State {
	now := time.Now().UnixMilli()
	d := metrics.NewDelayStats()
	d.Add(now, now+1000)
	d.Add(now, now+5*60_000)
	d.Add(now, now+30*24*3600_000)
	return State{
		Topics: []protocol.TopicInfo{
			{Name: "audit", CreateTime: now - 5000, CreateEventID: 2, TopicRoot: "3/7/audit"},
			{Name: "orders", CreateTime: now - 9000, CreateEventID: 1, TopicRoot: "1/2/orders"},
			{Name: "tmp", CreateTime: now - 1000, ExpireAt: now - 10, CreateEventID: 3},
			{Name: "old", State: protocol.TopicStateDeleted, StateChangeTime: now - 100},
		},
		Stats: map[string]metrics.TopicStats{
			"orders": {Bytes: 10 << 20, Files: 2, Messages: 5000, FirstEventID: 10, LastEventID: 6000},
			"audit":  {Bytes: 4096, Files: 1, Messages: 3, FirstEventID: 20, LastEventID: 22},
			"tmp":    {Bytes: 0, Files: 0, Messages: 0},
		},
		Subscribers: []metrics.SubscriberInfo{
			{Topic: "orders", Who: "billing", RemoteAddr: "10.0.0.9:5000", Position: 5990, Delivered: 5995, Lag: 10},
			{Topic: "orders", Who: "shipping", RemoteAddr: "10.0.0.8:5000", Position: 5000, Delivered: 5100, Lag: 1000},
			{Topic: "audit", Who: "archiver", RemoteAddr: "10.0.0.7:5000", Position: 22},
		},
		Replication: metrics.ReplicationInfo{Role: metrics.RoleMaster, LastEventID: 6000,
			Slaves: []metrics.SlaveInfo{{RemoteAddr: "10.0.0.2:41000", Since: now - 60_000, Position: 5900, LagEvents: 100}}},
		Delays: d,
		Info: metrics.ServerInfo{Version: "1.0.0", Role: metrics.RoleMaster, ListenAddr: "127.0.0.1:12301", DataDir: "data",
			StartTime: now - 3_600_000, LastEventID: 6000, BinlogBytes: 1 << 30, BinlogFiles: 1,
			Config: map[string]any{"store.flushLevel": 1, "admin.token": "<redacted>"}},
	}
}
