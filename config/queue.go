package config

import "time"

// Queue configures the work-queue groups (issue 33; package queue).
type Queue struct {
	// Enabled serves the queue commands (41..44) on a master; false
	// refuses them and leaves __queues untouched.
	Enabled bool `yaml:"enabled"`
	// MaxGroups bounds the groups of the server.
	MaxGroups int `yaml:"maxGroups"`
	// SnapshotRecords: after this many records of __queues every group's
	// state is written as one snapshot and the files before it removed.
	SnapshotRecords int `yaml:"snapshotRecords"`
	// SnapshotMinutes is the longest time between two snapshots while
	// records are written.
	SnapshotMinutes int64 `yaml:"snapshotMinutes"`
}

func defaultQueue() Queue {
	return Queue{Enabled: true, MaxGroups: 1000, SnapshotRecords: 10000, SnapshotMinutes: 60}
}

// QueueSnapshotInterval is queue.snapshotMinutes.
func (c *Config) QueueSnapshotInterval() time.Duration {
	return time.Duration(c.Queue.SnapshotMinutes) * time.Minute
}

func (c *Config) validateQueue(v *validator) {
	v.between("queue.maxGroups", int64(c.Queue.MaxGroups), 1, 100000, "groups")
	v.between("queue.snapshotRecords", int64(c.Queue.SnapshotRecords), 100, 10000000, "records")
	v.between("queue.snapshotMinutes", c.Queue.SnapshotMinutes, 1, 7*24*60, "minutes")
}
