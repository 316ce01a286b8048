package config

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		key    string // "" = must be valid
		got    string // the offending value as printed
	}{
		{"defaults", func(*Config) {}, "", ""},
		{"port 0 picks a free port", func(c *Config) { c.Port = 0 }, "", ""},
		{"port max", func(c *Config) { c.Port = 65535 }, "", ""},
		{"port negative", func(c *Config) { c.Port = -1 }, "port", "-1"},
		{"port too big", func(c *Config) { c.Port = 65536 }, "port", "65536"},
		{"host empty", func(c *Config) { c.Host = "" }, "host", ""},
		{"log path empty", func(c *Config) { c.Log.Path = "" }, "log.path", ""},
		{"log sample 0 ok", func(c *Config) { c.Log.Sample = 0 }, "", ""},
		{"log sample negative", func(c *Config) { c.Log.Sample = -1 }, "log.sample", "-1"},
		{"rotate maxSize 0 on console ok", func(c *Config) { c.Log.Rotate.MaxSize = 0 }, "", ""},
		{"rotate maxSize 0 with dir", func(c *Config) { c.Log.Path = "logs"; c.Log.Rotate.MaxSize = 0 }, "log.rotate.maxSize", "0"},
		{"rotate maxSize negative", func(c *Config) { c.Log.Rotate.MaxSize = -1 }, "log.rotate.maxSize", "-1"},
		{"rotate maxSize huge", func(c *Config) { c.Log.Path = "logs"; c.Log.Rotate.MaxSize = 1<<20 + 1 }, "log.rotate.maxSize", "1048577"},
		{"rotate maxBackups 0 ok", func(c *Config) { c.Log.Rotate.MaxBackups = 0 }, "", ""},
		{"rotate maxBackups negative", func(c *Config) { c.Log.Rotate.MaxBackups = -2 }, "log.rotate.maxBackups", "-2"},
		{"rotate maxAge negative", func(c *Config) { c.Log.Rotate.MaxAge = -1 }, "log.rotate.maxAge", "-1"},
		{"store path empty", func(c *Config) { c.Store.Path = "" }, "store.path", ""},
		{"maxLogSize small", func(c *Config) { c.Store.MaxLogSize = 1023 }, "store.maxLogSize", "1023"},
		{"maxLogSize 1024 ok", func(c *Config) { c.Store.MaxLogSize = 1024 }, "", ""},
		{"flushLevel negative", func(c *Config) { c.Store.FlushLevel = -1 }, "store.flushLevel", "-1"},
		{"flushLevel 3", func(c *Config) { c.Store.FlushLevel = 3 }, "store.flushLevel", "3"},
		{"flushLevel 0 ok", func(c *Config) { c.Store.FlushLevel = 0 }, "", ""},
		{"flushLevel 2 ok", func(c *Config) { c.Store.FlushLevel = 2 }, "", ""},
		{"maxDays 0", func(c *Config) { c.Store.MaxDays = 0 }, "store.maxDays", "0"},
		{"clearInterval 0", func(c *Config) { c.Store.ClearInterval = 0 }, "store.clearInterval", "0"},
		{"waitDelLock 0", func(c *Config) { c.Store.WaitDelLockTimeoutMs = 0 }, "store.waitDelLockTimeoutMs", "0"},
		{"folderCount 0", func(c *Config) { c.Store.FolderCount = 0 }, "store.folderCount", "0"},
		{"folderCount 10001", func(c *Config) { c.Store.FolderCount = 10001 }, "store.folderCount", "10001"},
		{"folderCount 10000 ok", func(c *Config) { c.Store.FolderCount = 10000 }, "", ""},
		{"maxSlaveKeepFiles 0 ok", func(c *Config) { c.Store.MaxSlaveKeepFiles = 0 }, "", ""},
		{"maxSlaveKeepFiles negative", func(c *Config) { c.Store.MaxSlaveKeepFiles = -1 }, "store.maxSlaveKeepFiles", "-1"},
		{"buffSize 0", func(c *Config) { c.Worker.BuffSize = 0 }, "worker.buffSize", "0"},
		{"waitMsgTimeout 0", func(c *Config) { c.Worker.WaitMsgTimeout = 0 }, "worker.waitMsgTimeout", "0"},
		{"idle log sample negative", func(c *Config) { c.Worker.WaitMsgTimeoutLogSample = -1 }, "worker.waitMsgTimeoutLogSample", "-1"},
		{"idle log sample 0 ok", func(c *Config) { c.Worker.WaitMsgTimeoutLogSample = 0 }, "", ""},
		{"maxGroup 0", func(c *Config) { c.Worker.MaxGroup = 0 }, "worker.maxGroup", "0"},
		{"maxGroupBytes small", func(c *Config) { c.Worker.MaxGroupBytes = 65535 }, "worker.maxGroupBytes", "65535"},
		{"groupWaitUs negative", func(c *Config) { c.Worker.GroupWaitUs = -1 }, "worker.groupWaitUs", "-1"},
		{"inlineDeliveries negative", func(c *Config) { c.Worker.InlineDeliveries = -1 }, "worker.inlineDeliveries", "-1"},
		{"inlineDeliveries too many", func(c *Config) { c.Worker.InlineDeliveries = 1025 }, "worker.inlineDeliveries", "1025"},
		{"inlineDeliveries 0 ok", func(c *Config) { c.Worker.InlineDeliveries = 0 }, "", ""},
		{"maxProcs negative", func(c *Config) { c.Server.MaxProcs = -1 }, "server.maxProcs", "-1"},
		{"maxProcs too many", func(c *Config) { c.Server.MaxProcs = 1025 }, "server.maxProcs", "1025"},
		{"maxProcs 1 ok", func(c *Config) { c.Server.MaxProcs = 1 }, "", ""},
		{"epollMinConns negative", func(c *Config) { c.Server.EpollMinConns = -1 }, "server.epollMinConns", "-1"},
		{"epollMinConns too many", func(c *Config) { c.Server.EpollMinConns = 1000001 }, "server.epollMinConns", "1000001"},
		{"epollMinConns 0 ok", func(c *Config) { c.Server.EpollMinConns = 0 }, "", ""},
		{"maxProcs 1024 ok", func(c *Config) { c.Server.MaxProcs = 1024 }, "", ""},
		{"net write 0", func(c *Config) { c.Timeout.Net.Write = 0 }, "timeout.net.write", "0"},
		{"net read 0", func(c *Config) { c.Timeout.Net.Read = 0 }, "timeout.net.read", "0"},
		{"net idle 0", func(c *Config) { c.Timeout.Net.Idle = 0 }, "timeout.net.idle", "0"},
		{"net reply negative", func(c *Config) { c.Timeout.Net.Reply = -5 }, "timeout.net.reply", "-5"},
		{"net read overflow", func(c *Config) { c.Timeout.Net.Read = maxMs + 1 }, "timeout.net.read", "9223372036855"},
		{"alive 0", func(c *Config) { c.Timeout.Server.Alive = 0 }, "timeout.server.alive", "0"},
		{"alive 35000", func(c *Config) { c.Timeout.Server.Alive = 35000 }, "timeout.server.alive", "35000"},
		{"alive 34999 ok", func(c *Config) { c.Timeout.Server.Alive = 34999 }, "", ""},
		{"maxAck 0", func(c *Config) { c.Timeout.Sub.MaxAck = 0; c.Timeout.Sub.DefaultAck = 0 }, "timeout.sub.maxAck", "0"},
		{"defaultAck 0", func(c *Config) { c.Timeout.Sub.DefaultAck = 0 }, "timeout.sub.defaultAck", "0"},
		{"defaultAck above cap", func(c *Config) { c.Timeout.Sub.DefaultAck = c.Timeout.Sub.MaxAck + 1 }, "timeout.sub.defaultAck", "600001"},
		{"scan 0", func(c *Config) { c.Background.DefaultScanSecond = 0 }, "background.defaultScanSecond", "0"},
		{"firstExec negative ok", func(c *Config) { c.Background.FirstExecSecond = -10 }, "", ""},
		{"firstExec overflow", func(c *Config) { c.Background.FirstExecSecond = int(maxSeconds) + 1 }, "background.firstExecSecond", "9223372037"},
		{"maxPayload 0", func(c *Config) { c.Limit.MaxPayload = 0 }, "limit.maxPayload", "0"},
		{"maxWho 0", func(c *Config) { c.Limit.MaxWho = 0 }, "limit.maxWho", "0"},
		{"maxRecords 0", func(c *Config) { c.Limit.MaxRecords = 0 }, "limit.maxRecords", "0"},
		{"maxConns 0", func(c *Config) { c.Limit.MaxConns = 0 }, "limit.maxConns", "0"},
		{"maxDelay 999", func(c *Config) { c.Delay.MaxDelay = 999 }, "delay.maxDelay", "999"},
		{"maxDelay 1000 ok", func(c *Config) { c.Delay.MaxDelay = 1000 }, "", ""},
		{"maxDelay 100 years ok", func(c *Config) { c.Delay.MaxDelay = 3153600000000 }, "", ""},
		{"maxDelay over 100 years", func(c *Config) { c.Delay.MaxDelay = 3153600000001 }, "delay.maxDelay", "3153600000001"},
		{"cursor flushMs 9", func(c *Config) { c.Cursor.FlushMs = 9 }, "cursor.flushMs", "9"},
		{"cursor segmentBytes 1", func(c *Config) { c.Cursor.SegmentBytes = 1 }, "cursor.segmentBytes", "1"},
		{"cursor snapshotMinutes 0", func(c *Config) { c.Cursor.SnapshotMinutes = 0 }, "cursor.snapshotMinutes", "0"},
		{"cursor off ok", func(c *Config) { c.Cursor.Enabled = false }, "", ""},
		{"cursor retentionDays -1", func(c *Config) { c.Cursor.RetentionDays = -1 }, "cursor.retentionDays", "-1"},
		{"cursor retentionDays 0 ok", func(c *Config) { c.Cursor.RetentionDays = 0 }, "", ""},
		{"queue maxGroups 0", func(c *Config) { c.Queue.MaxGroups = 0 }, "queue.maxGroups", "0"},
		{"queue snapshotRecords 5", func(c *Config) { c.Queue.SnapshotRecords = 5 }, "queue.snapshotRecords", "5"},
		{"queue snapshotMinutes 0", func(c *Config) { c.Queue.SnapshotMinutes = 0 }, "queue.snapshotMinutes", "0"},
		{"queue off ok", func(c *Config) { c.Queue.Enabled = false }, "", ""},
		{"admin off ok", func(c *Config) { c.Admin.Listen = "" }, "", ""},
		{"admin loopback ok", func(c *Config) { c.Admin.Listen = "127.0.0.1:12380" }, "", ""},
		{"admin port 0 ok", func(c *Config) { c.Admin.Listen = "127.0.0.1:0" }, "", ""},
		{"admin all interfaces ok", func(c *Config) { c.Admin.Listen = ":12380" }, "", ""},
		{"admin ipv6 ok", func(c *Config) { c.Admin.Listen = "[::1]:12380" }, "", ""},
		{"admin no port", func(c *Config) { c.Admin.Listen = "127.0.0.1" }, "admin.listen", `"127.0.0.1"`},
		{"admin bad port", func(c *Config) { c.Admin.Listen = "127.0.0.1:http" }, "admin.listen", `"127.0.0.1:http"`},
		{"admin port too big", func(c *Config) { c.Admin.Listen = "127.0.0.1:70000" }, "admin.listen", `"127.0.0.1:70000"`},
		{"admin on the client port", func(c *Config) { c.Admin.Listen = "127.0.0.1:12301" }, "admin.listen", `"127.0.0.1:12301"`},
		{"admin client port 0 ok", func(c *Config) { c.Port = 0; c.Admin.Listen = "127.0.0.1:0" }, "", ""},
		{"token ok", func(c *Config) { c.Admin.Token = "0123456789abcdef" }, "", ""},
		{"token short", func(c *Config) { c.Admin.Token = "short" }, "admin.token", "5"},
		{"token with space", func(c *Config) { c.Admin.Token = "0123456789 abcdef" }, "admin.token", ""},
		{"token with newline", func(c *Config) { c.Admin.Token = "0123456789abcdef\n" }, "admin.token", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(c)
			err := c.Validate()
			if tc.key == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error for bad %s", tc.key)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "config: "+tc.key+" must") {
				t.Errorf("error %q does not start with %q", msg, "config: "+tc.key+" must")
			}
			if tc.got != "" && !strings.Contains(msg, "(got "+tc.got+")") {
				t.Errorf("error %q does not show the value %s", msg, tc.got)
			}
		})
	}
}

// Every bad key is reported, one line each, so one run fixes them all.
func TestValidateReportsAllProblems(t *testing.T) {
	c := Default()
	c.Store.FolderCount = 0
	c.Log.Sample = -1
	c.Timeout.Server.Alive = 40000
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %q", lines)
	}
	for i, key := range []string{"log.sample", "store.folderCount", "timeout.server.alive"} {
		if !strings.HasPrefix(lines[i], "config: "+key+" ") {
			t.Errorf("line %d %q does not name %s", i, lines[i], key)
		}
	}
}

// Values parsed from YAML go through the same rules (zero is not silently
// replaced by a default once written explicitly).
func TestExplicitZeroFromFileIsRejected(t *testing.T) {
	c, err := Parse([]byte("store:\n  folderCount: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil || err.Error() != "config: store.folderCount must be between 1 and 10000 (got 0)" {
		t.Fatalf("got %v", err)
	}
}
