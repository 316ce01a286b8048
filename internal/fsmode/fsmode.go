// Package fsmode holds the permission bits of the files and directories
// the server creates in its data directory (store.path).
//
// By default they are private to the server's user (files 0600,
// directories 0700): messages must not be readable by other local users
// past the server's access control. store.groupReadable widens them to
// 0640 and 0750 for a group that must read them (a backup job, say). The
// process umask still applies on top.
package fsmode

import (
	"io/fs"
	"sync/atomic"
)

var groupReadable atomic.Bool

// SetGroupReadable selects the group-readable modes (store.groupReadable);
// call it once at start-up, before anything is created.
func SetGroupReadable(on bool) { groupReadable.Store(on) }

// GroupReadable reports the setting.
func GroupReadable() bool { return groupReadable.Load() }

// File is the mode of new data files: 0600, or 0640.
func File() fs.FileMode {
	if groupReadable.Load() {
		return 0o640
	}
	return 0o600
}

// Dir is the mode of new data directories (and of store.path itself):
// 0700, or 0750.
func Dir() fs.FileMode {
	if groupReadable.Load() {
		return 0o750
	}
	return 0o700
}
