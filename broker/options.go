package broker

import (
	"log/slog"
	"os"
	"time"

	"github.com/smssmq/smss/broker/msgcount"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
)

// Options configure a Broker. A zero field takes its DefaultOptions value,
// but where zero is a setting of its own (see DefaultOptions).
type Options struct {
	Dir           string        // store.path; required
	MaxLogSize    int64         // store.maxLogSize, default 1 GiB
	FlushLevel    int           // store.flushLevel 0, 1 or 2
	FolderCount   int           // store.folderCount, default 10
	NoCache       bool          // store.noCache
	BuffSize      int           // worker.buffSize, default 1000
	MaxGroup      int           // worker.maxGroup: commands per group commit, default 512
	MaxGroupBytes int           // worker.maxGroupBytes, default 4 MiB
	IdleWake      time.Duration // worker.waitMsgTimeout, default 1 s
	IdleLogSample int           // worker.waitMsgTimeoutLogSample
	Slave         bool          // start as a slave: refuse client writes (until Promote)
	Logger        *slog.Logger
	LogSample     int // log 1 in LogSample writes
	// FlushInterval is the flushLevel 1 period, default 1 s (docs/protocol.md §6.4).
	FlushInterval time.Duration
	// GroupWait (worker.groupWaitUs) applies at flushLevel 2 only: how long
	// a group may wait for the requests the writer expects next (the
	// connections it just answered, and those that were queued behind the
	// last fsync) so that they share one fsync instead of alternating
	// between two half-size groups. It never exceeds half the last fsync's
	// duration. Zero never waits, and Open keeps a zero: tests and
	// embedders that do not opt in get no added latency. DefaultOptions
	// holds the shipped worker.groupWaitUs of 500, which cmd/smss passes.
	GroupWait time.Duration
	// Now is the clock in ms; tests replace it.
	Now func() int64
	// MaxDelay (delay.maxDelay) is the longest delay PublishDelay accepts,
	// default DefaultMaxDelay; above protocol.MaxDelayMs it is that.
	MaxDelay time.Duration
	// MinLifetime is the shortest lifetime CreateTopic accepts: an
	// expireAt sooner than this from Now is refused with
	// protocol.ErrExpireTooSoon, like a negative one. cmd/smss passes
	// protocol.MinLifetimeMs (§1.5.3); zero (the default here) refuses only
	// a negative expireAt, so that tests can create short-lived topics.
	MinLifetime time.Duration
	// OpenFile opens the binlog and topic files appends go to; tests
	// inject disk faults through it. Default os.OpenFile.
	OpenFile func(path string, flag int, perm os.FileMode) (segment.File, error)
	// DedupeWindow is how long the message ids of committed pub and
	// delay requests are remembered (dedupe.window, default 2 min); a
	// negative value turns dedupe off. DedupeMaxIDs bounds the ids held
	// over all topics (dedupe.maxIds, default 1,000,000).
	DedupeWindow time.Duration
	DedupeMaxIDs int
	// MaxFrameBytes (limit.maxFrameBytes) bounds the message bytes one
	// Subscription.Next appends (a subscription frame's length field); a
	// single larger message is still delivered alone. Default
	// protocol.DefaultMaxFrameBytes.
	MaxFrameBytes int
	// InlineDeliveries (worker.inlineDeliveries) is how many waiting
	// subscribers of a topic the goroutine that committed a group to it
	// may serve itself, right after the commit, instead of waking their
	// own goroutines (subinline.go). Default DefaultInlineDeliveries; a
	// negative value turns inline delivery off (every subscriber waits in
	// Subscription.Next).
	InlineDeliveries int
	// MaxOpenTopics (store.maxOpenTopics) bounds the topics whose current
	// file (and its index: two descriptors) the writer keeps open; the
	// least recently appended one is closed beyond it. Default
	// DefaultMaxOpenTopics() (from the process's file limit).
	MaxOpenTopics int
	// MinFreeBytes (store.minFreeMB) is the free space of the data
	// directory's filesystem below which pub, delay and create are refused
	// and replicated blocks wait (disk.go); 0 turns the guard off.
	MinFreeBytes int64
	// DiskCheckInterval is how often the free space is read, default
	// DefaultDiskCheckInterval. Statfs reads it; tests replace it (and
	// then no reserve file is kept: see diskGuard).
	DiskCheckInterval time.Duration
	Statfs            func(dir string) (freeBytes uint64, err error)
	// Metrics receives the writer's recordings (group commits, fsyncs,
	// publishes, storage errors); nil records nothing.
	Metrics *metrics.Metrics
	// Stored consumer positions (cursor.go): CursorsOff disables them
	// (cursor.enabled false); CursorFlushInterval is how often changed
	// positions are written (cursor.flushMs, default 1 s);
	// CursorSegmentBytes is the file size at which __cursors rolls
	// (cursor.segmentBytes, default 4 MiB); CursorSnapshotInterval is the
	// longest time between two snapshots (cursor.snapshotMinutes, 1 h).
	CursorsOff             bool
	CursorFlushInterval    time.Duration
	CursorSegmentBytes     int64
	CursorSnapshotInterval time.Duration
	// CursorRetention forgets positions idle this long (not subscribed,
	// no ack) at the next snapshot (cursor.retentionDays); 0 never.
	CursorRetention time.Duration
	// ReadCommitted limits subscribers to the commit point
	// (commitpoint.go): set with replication.syncSlaves > 0 unless
	// replication.readCommitted is false.
	ReadCommitted bool
	// ReplicateBeforeSync (flushLevel 2 with semi-synchronous replication,
	// config.ReplicateBeforeSync) lets a master's replica streams read a
	// group's binlog blocks before the group's fsync (stage "replicate",
	// pipeline.go), so that the slaves' write and fsync run beside the
	// master's instead of after it. The writer still answers the group's
	// commands after its fsync, topic readers still see it only then, and
	// the commit point never passes what the master synced (SetDurableHook).
	ReplicateBeforeSync bool

	// counts sets the message counts' tunables, for tests (startCounts
	// fills in the rest).
	counts msgcount.Options
	// removeTrash removes one trash entry, default os.RemoveAll; tests
	// slow it down.
	removeTrash func(path string) error
}

// DefaultOptions returns the options of a server started with the
// shipped configuration (config.Default, config/config.yaml) but Dir,
// which has none: every field that maps to a configuration key holds that
// key's default, and the others what cmd/smss passes or Open fills in.
// config's TestBrokerDefaultOptionsMatchConfig compares them key by key,
// so the two cannot drift.
//
// Open fills a zero field in from DefaultOptions only where zero is not a
// setting of its own. These keep their zero: FlushLevel (level 0),
// NoCache, Slave, GroupWait (no group wait), MinFreeBytes (no free-space
// guard), MinLifetime (any lifetime), LogSample and IdleLogSample (no
// sampled logs), CursorsOff, CursorRetention (positions kept forever),
// and the hooks (OpenFile, Statfs, Metrics).
func DefaultOptions() Options {
	return Options{
		MaxLogSize:             1 << 30,
		FlushLevel:             1,
		FolderCount:            10,
		BuffSize:               1000,
		MaxGroup:               512,
		MaxGroupBytes:          4 << 20,
		IdleWake:               time.Second,
		IdleLogSample:          30,
		Logger:                 slog.Default(),
		LogSample:              10000,
		FlushInterval:          time.Second,
		GroupWait:              500 * time.Microsecond,
		Now:                    func() int64 { return time.Now().UnixMilli() },
		MaxDelay:               DefaultMaxDelay,
		MinLifetime:            protocol.MinLifetimeMs * time.Millisecond,
		DedupeWindow:           DefaultDedupeWindow,
		DedupeMaxIDs:           DefaultDedupeMaxIDs,
		MaxFrameBytes:          protocol.DefaultMaxFrameBytes,
		InlineDeliveries:       DefaultInlineDeliveries,
		MaxOpenTopics:          DefaultMaxOpenTopics(),
		MinFreeBytes:           256 << 20,
		DiskCheckInterval:      DefaultDiskCheckInterval,
		CursorFlushInterval:    time.Second,
		CursorSegmentBytes:     4 << 20,
		CursorSnapshotInterval: time.Hour,
		CursorRetention:        30 * 24 * time.Hour,
	}
}

// setDefaults fills the zero fields in from DefaultOptions, but the ones
// whose zero is a setting of their own (DefaultOptions).
func (o *Options) setDefaults() {
	d := DefaultOptions()
	if o.MaxLogSize <= 0 {
		o.MaxLogSize = d.MaxLogSize
	}
	if o.FolderCount <= 0 {
		o.FolderCount = d.FolderCount
	}
	if o.BuffSize <= 0 {
		o.BuffSize = d.BuffSize
	}
	if o.MaxGroup <= 0 {
		o.MaxGroup = d.MaxGroup
	}
	if o.MaxGroupBytes <= 0 {
		o.MaxGroupBytes = d.MaxGroupBytes
	}
	if o.InlineDeliveries == 0 {
		o.InlineDeliveries = d.InlineDeliveries
	}
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = d.MaxFrameBytes
	}
	if o.MaxOpenTopics <= 0 {
		o.MaxOpenTopics = d.MaxOpenTopics
	}
	if o.DiskCheckInterval <= 0 {
		o.DiskCheckInterval = d.DiskCheckInterval
	}
	if o.IdleWake <= 0 {
		o.IdleWake = d.IdleWake
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = d.FlushInterval
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = d.MaxDelay
	}
	if o.DedupeWindow == 0 {
		o.DedupeWindow = d.DedupeWindow
	}
	if o.DedupeMaxIDs <= 0 {
		o.DedupeMaxIDs = d.DedupeMaxIDs
	}
	if o.Logger == nil {
		o.Logger = d.Logger
	}
	if o.Now == nil {
		o.Now = d.Now
	}
	if o.CursorFlushInterval <= 0 {
		o.CursorFlushInterval = d.CursorFlushInterval
	}
	if o.CursorSegmentBytes <= 0 {
		o.CursorSegmentBytes = d.CursorSegmentBytes
	}
	if o.CursorSnapshotInterval <= 0 {
		o.CursorSnapshotInterval = d.CursorSnapshotInterval
	}
	if o.removeTrash == nil {
		o.removeTrash = os.RemoveAll
	}
}
