package segment

import (
	"errors"
	"fmt"
	"os"
)

// Removing whole files while the log is in use: retention and the cursor
// RemoveOldBinlogFile and RemoveOldTopicFile) and the cursor log's
// compaction. Start-up recovery's removals are in recover.go.

// ErrLogClosed is returned by RemoveFile on a closed log: its directory may
// already belong to a new topic of the same name.
var ErrLogClosed = errors.New("segment: log closed")

// RemoveFile deletes the oldest file (retention), never the newest one, so
// the files stay contiguous. It holds the log's lock throughout, and Close
// takes that lock, so a file is never removed from a directory that a
// deleted topic already handed over.
func (l *Log) RemoveFile(id int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return fmt.Errorf("%w: not removing %s", ErrLogClosed, l.Path(id))
	case id >= l.committed.FileID:
		return fmt.Errorf("segment: refusing to remove %s: it is the newest file", l.Path(id))
	case len(l.files) == 0 || l.files[0] != id:
		return fmt.Errorf("segment: refusing to remove %s: only the oldest file may go (files stay contiguous)", l.Path(id))
	}
	if err := os.Remove(l.Path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("segment: remove %s: %w", l.Path(id), err)
	}
	os.Remove(l.indexPath(id))
	l.files = l.files[1:]
	delete(l.firstIDs, id)
	return nil
}
