package config

import "time"

// Cursor is the cursor.* section: stored consumer positions (issue 22,
// broker/cursor.go).
type Cursor struct {
	// Enabled stores the position of every (topic, who) at each ack and
	// serves sub from eventId -1 and the cursor commands.
	Enabled bool `yaml:"enabled"`
	// FlushMs is how often changed positions are written (also at once
	// when a subscription ends). A crash loses at most this much progress:
	// those messages are delivered again.
	FlushMs int64 `yaml:"flushMs"`
	// SegmentBytes is the file size at which the __cursors topic rolls;
	// compaction removes whole files.
	SegmentBytes int64 `yaml:"segmentBytes"`
	// SnapshotMinutes is the longest time between two snapshots of every
	// position (while positions change).
	SnapshotMinutes int64 `yaml:"snapshotMinutes"`
	// RetentionDays forgets a position whose who neither acknowledged
	// nor was subscribed for this many days; 0 keeps positions until
	// their topic is deleted or they are reset.
	RetentionDays int64 `yaml:"retentionDays"`
}

func defaultCursor() Cursor {
	return Cursor{Enabled: true, FlushMs: 1000, SegmentBytes: 4 << 20, SnapshotMinutes: 60, RetentionDays: 30}
}

// CursorFlushInterval is cursor.flushMs.
func (c *Config) CursorFlushInterval() time.Duration { return ms(c.Cursor.FlushMs) }

// CursorSnapshotInterval is cursor.snapshotMinutes.
func (c *Config) CursorSnapshotInterval() time.Duration {
	return time.Duration(c.Cursor.SnapshotMinutes) * time.Minute
}

// CursorRetention is cursor.retentionDays (0: forever).
func (c *Config) CursorRetention() time.Duration {
	return time.Duration(c.Cursor.RetentionDays) * 24 * time.Hour
}

func (c *Config) validateCursor(v *validator) {
	v.between("cursor.flushMs", c.Cursor.FlushMs, 10, 600000, "ms")
	v.between("cursor.segmentBytes", c.Cursor.SegmentBytes, 64<<10, 1<<30, "bytes")
	v.between("cursor.snapshotMinutes", c.Cursor.SnapshotMinutes, 1, 7*24*60, "minutes")
	v.between("cursor.retentionDays", c.Cursor.RetentionDays, 0, 36500, "days; 0 keeps positions forever")
}
