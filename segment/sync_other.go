//go:build !linux

package segment

// syncCurrent makes the current file's appends durable for Sync (the raw
// fdatasync of sync_linux.go is Linux-only).
func (l *Log) syncCurrent() error { return l.cur.Sync() }
