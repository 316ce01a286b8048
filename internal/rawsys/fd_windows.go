//go:build windows

package rawsys

// Enabled reports whether the calls of this package skip the scheduler:
// not here, where Conn and File make the ordinary calls.
const Enabled = false
