package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/config"
)

// TestBrokerDefaultOptionsMatchConfig: broker.DefaultOptions is the
// shipped configuration as broker options, so each field that maps to a
// key must hold config.Default()'s value of that key (converted as cmd/smss
// converts it). Every exported field of broker.Options must be either
// compared here or listed in notKeys with the reason it has no key, so a
// field added later cannot drift unnoticed.
func TestBrokerDefaultOptionsMatchConfig(t *testing.T) {
	c := config.Default()
	d := broker.DefaultOptions()
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	maxOpen := c.Store.MaxOpenTopics
	if maxOpen == 0 { // 0: sized from the file limit, as cmd/smss passes it
		maxOpen = broker.DefaultMaxOpenTopics()
	}
	inline := c.Worker.InlineDeliveries
	if inline == 0 { // 0: off (cmd/smss inlineDeliveries)
		inline = -1
	}
	keys := map[string]struct {
		key       string
		pkg, conf any
	}{
		"MaxLogSize":             {"store.maxLogSize", d.MaxLogSize, c.Store.MaxLogSize},
		"FlushLevel":             {"store.flushLevel", d.FlushLevel, c.Store.FlushLevel},
		"FolderCount":            {"store.folderCount", d.FolderCount, c.Store.FolderCount},
		"NoCache":                {"store.noCache", d.NoCache, c.Store.NoCache},
		"MinFreeBytes":           {"store.minFreeMB", d.MinFreeBytes, c.Store.MinFreeMB << 20},
		"MaxOpenTopics":          {"store.maxOpenTopics", d.MaxOpenTopics, maxOpen},
		"BuffSize":               {"worker.buffSize", d.BuffSize, c.Worker.BuffSize},
		"MaxGroup":               {"worker.maxGroup", d.MaxGroup, c.Worker.MaxGroup},
		"MaxGroupBytes":          {"worker.maxGroupBytes", d.MaxGroupBytes, c.Worker.MaxGroupBytes},
		"GroupWait":              {"worker.groupWaitUs", d.GroupWait, time.Duration(c.Worker.GroupWaitUs) * time.Microsecond},
		"IdleWake":               {"worker.waitMsgTimeout", d.IdleWake, c.IdleWake()},
		"IdleLogSample":          {"worker.waitMsgTimeoutLogSample", d.IdleLogSample, c.Worker.WaitMsgTimeoutLogSample},
		"InlineDeliveries":       {"worker.inlineDeliveries", d.InlineDeliveries, inline},
		"LogSample":              {"log.sample", d.LogSample, c.Log.Sample},
		"MaxFrameBytes":          {"limit.maxFrameBytes", d.MaxFrameBytes, c.Limit.MaxFrameBytes},
		"MaxDelay":               {"delay.maxDelay", d.MaxDelay, c.MaxDelay()},
		"DedupeWindow":           {"dedupe.window", d.DedupeWindow, c.DedupeWindow()},
		"DedupeMaxIDs":           {"dedupe.maxIds", d.DedupeMaxIDs, c.Dedupe.MaxIDs},
		"CursorsOff":             {"cursor.enabled", d.CursorsOff, !c.Cursor.Enabled},
		"CursorFlushInterval":    {"cursor.flushMs", d.CursorFlushInterval, ms(c.Cursor.FlushMs)},
		"CursorSegmentBytes":     {"cursor.segmentBytes", d.CursorSegmentBytes, c.Cursor.SegmentBytes},
		"CursorSnapshotInterval": {"cursor.snapshotMinutes", d.CursorSnapshotInterval, c.CursorSnapshotInterval()},
		"CursorRetention":        {"cursor.retentionDays", d.CursorRetention, c.CursorRetention()},
		// Off by default on both sides: the shipped syncSlaves is 0.
		"ReadCommitted": {"replication.readCommitted with syncSlaves", d.ReadCommitted, c.Replication.ReadCommittedOn()},
		// Off by default: the shipped flushLevel is 1 and syncSlaves 0.
		"ReplicateBeforeSync": {"store.flushLevel 2 with syncSlaves", d.ReplicateBeforeSync, c.ReplicateBeforeSync()},
	}
	notKeys := map[string]string{
		"Dir":               "store.path: each server's own; DefaultOptions has none",
		"Slave":             "the role, from the command line",
		"Logger":            "the process's logger",
		"Now":               "the clock",
		"FlushInterval":     "the flushLevel 1 period, fixed by docs/protocol.md §6.4",
		"MinLifetime":       "protocol.MinLifetimeMs, fixed by docs/protocol.md §1.5.3",
		"OpenFile":          "a hook for tests",
		"DiskCheckInterval": "a tunable for tests",
		"Statfs":            "a hook for tests",
		"Metrics":           "the process's metrics",
	}
	for tt := range reflect.TypeFor[broker.Options]().Fields() {
		if !tt.IsExported() {
			continue
		}
		k, compared := keys[tt.Name]
		_, listed := notKeys[tt.Name]
		switch {
		case compared && listed:
			t.Errorf("broker.Options.%s is both compared and listed as having no key", tt.Name)
		case !compared && !listed:
			t.Errorf("broker.Options.%s is neither compared with a configuration key nor listed as having none", tt.Name)
		case compared && k.pkg != k.conf:
			t.Errorf("%s: broker.DefaultOptions().%s is %v (%T), config default %v (%T)", k.key, tt.Name, k.pkg, k.pkg, k.conf, k.conf)
		}
	}
	if d.Dir != "" {
		t.Errorf("DefaultOptions().Dir = %q, want none", d.Dir)
	}
	if d.FlushInterval != time.Second {
		t.Errorf("DefaultOptions().FlushInterval = %v, want the 1 s of docs/protocol.md §6.4", d.FlushInterval)
	}
}
