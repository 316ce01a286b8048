package segment

import (
	"errors"
	"fmt"
	"os"
)

// The functions in this file are for start-up recovery, before the writer
// runs: they may change files other than the current one.

// Scan decodes every block from pos to the end of the newest file, calling
// fn with each block's position. It stops at the first bad bytes and returns
// the position after the last whole block together with a *CorruptError.
func (l *Log) Scan(from Position, fn func(pos Position, first, last int64, block []byte) error) (Position, error) {
	end := from
	for _, id := range l.Files() {
		if id < from.FileID {
			continue
		}
		start := int64(0)
		if id == from.FileID {
			start = from.Offset
		}
		off, err := l.scan(id, start, -1, func(off, first, last int64, b []byte) error {
			return fn(Position{FileID: id, Offset: off}, first, last, b)
		})
		end = Position{FileID: id, Offset: off}
		if err != nil {
			return end, err
		}
	}
	return end, nil
}

// ScanTail decodes the blocks at the end of the newest non-empty file,
// starting from its last verifiable index entry, so that checking a tail
// costs O(index interval) rather than O(file). It returns the end of the
// last whole block and a *CorruptError if bytes follow it.
func (l *Log) ScanTail(fn func(pos Position, first, last int64, block []byte) error) (Position, error) {
	files := l.Files()
	for i := len(files) - 1; i >= 0; i-- {
		id := files[i]
		st, err := os.Stat(l.Path(id))
		if err != nil {
			return Position{}, fmt.Errorf("segment: stat %s: %w", l.Path(id), err)
		}
		if st.Size() == 0 {
			continue
		}
		start, _ := l.lastIndexed(id, st.Size())
		off, err := l.scan(id, start, st.Size(), func(off, first, last int64, b []byte) error {
			return fn(Position{FileID: id, Offset: off}, first, last, b)
		})
		return Position{FileID: id, Offset: off}, err
	}
	if len(files) == 0 {
		return Position{}, nil
	}
	return Position{FileID: files[0]}, nil
}

// lastIndexed returns the offset of the last index entry of file id that
// points at a real block boundary, or 0, and whether that entry is the
// index's last one.
func (l *Log) lastIndexed(id, size int64) (int64, bool) {
	r, err := openIndex(l.indexPath(id))
	if err != nil {
		return 0, false
	}
	defer r.close()
	for i := r.n - 1; i >= 0 && i >= r.n-4; i-- {
		e, err := r.at(i)
		if err != nil || e.off >= size || e.off < 0 {
			continue
		}
		if l.verifyEntry(id, e, size) {
			return e.off, i == r.n-1
		}
	}
	return 0, false
}

// TruncateTo cuts the log at pos: file pos.FileID is truncated to
// pos.Offset (removed if that leaves it empty) and every later file is
// removed, indexes included. The next append creates the file after the
// last one kept.
func (l *Log) TruncateTo(pos Position) error {
	if l.cur != nil {
		return errors.New("segment: TruncateTo while a file is open for appending")
	}
	files := l.Files()
	for i := len(files) - 1; i >= 0; i-- {
		id := files[i]
		if id < pos.FileID {
			break
		}
		if id > pos.FileID || pos.Offset == 0 {
			if err := l.removeFile(id); err != nil {
				return err
			}
			continue
		}
		if err := os.Truncate(l.Path(id), pos.Offset); err != nil {
			return fmt.Errorf("segment: truncate %s to %d: %w", l.Path(id), pos.Offset, err)
		}
		if err := truncateIndexFile(l.indexPath(id), pos.Offset); err != nil {
			os.Remove(l.indexPath(id))
		}
		f, err := os.OpenFile(l.Path(id), os.O_WRONLY, 0)
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			return fmt.Errorf("%w: fsync %s after truncation: %v", ErrFatal, l.Path(id), err)
		}
	}
	l.resetAfterRecovery()
	return syncDir(l.opts.Dir)
}

// DropEmptyTail removes empty files at the end of the log (a crash between
// creating a file and the first write leaves one).
func (l *Log) DropEmptyTail() error {
	files := l.Files()
	for i := len(files) - 1; i >= 0; i-- {
		st, err := os.Stat(l.Path(files[i]))
		if err != nil {
			return fmt.Errorf("segment: stat %s: %w", l.Path(files[i]), err)
		}
		if st.Size() > 0 {
			break
		}
		if err := l.removeFile(files[i]); err != nil {
			return err
		}
	}
	l.resetAfterRecovery()
	return nil
}

func (l *Log) removeFile(id int64) error {
	if err := os.Remove(l.Path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("segment: remove %s: %w", l.Path(id), err)
	}
	os.Remove(l.indexPath(id))
	l.mu.Lock()
	for i, f := range l.files {
		if f == id {
			l.files = append(l.files[:i], l.files[i+1:]...)
			break
		}
	}
	delete(l.firstIDs, id)
	l.mu.Unlock()
	return nil
}

func (l *Log) resetAfterRecovery() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.files); n > 0 {
		last := l.files[n-1]
		l.curID = last + 1
		size := int64(0)
		if st, err := os.Stat(l.Path(last)); err == nil {
			size = st.Size()
		}
		l.committed = Position{FileID: last, Offset: size}
		delete(l.firstIDs, last)
	} else {
		l.committed = Position{}
		if l.curID > 0 {
			// Keep ids increasing even when every file went away, so a
			// reader's remembered file id never names different data.
			l.committed = Position{FileID: l.curID}
		}
	}
	l.curSize = 0
}

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

// LastBlock returns a copy of the last whole block of file id (nil if it has
// none), found from the file's last verifiable index entry rather than by
// reading the whole file. Retention uses it to learn a file's newest time,
// and the operator views a log's last eventId. When the index of a file
// the writer is done with is missing, lies at its end or falls short of the
// log, the one full read that finds the block also rebuilds the index, so
// it is not repeated at every call.
func (l *Log) LastBlock(id int64) ([]byte, error) {
	committed := l.Committed()
	if id > committed.FileID {
		return nil, nil
	}
	size, err := l.sizeOf(id, committed)
	if err != nil {
		return nil, err
	}
	var last []byte
	start, sound := l.lastIndexed(id, size)
	rebuild := l.indexable(id)
	if !sound && rebuild && size > 0 {
		return l.lastBlockRebuilding(id, size)
	}
	gap := l.gapCheck(start)
	_, err = l.scan(id, start, size, func(off, _, _ int64, b []byte) error {
		if rebuild {
			if err := gap(off); err != nil {
				return err
			}
		}
		last = append(last[:0], b...)
		return nil
	})
	if errors.Is(err, errIndexGap) {
		return l.lastBlockRebuilding(id, size)
	}
	return last, err
}

// lastBlockRebuilding is LastBlock by a full read of the file that rebuilds
// its index on the way.
func (l *Log) lastBlockRebuilding(id, size int64) ([]byte, error) {
	l.log.Warn("segment index missing or short of its log; rebuilding", "file", l.indexPath(id))
	var last []byte
	err := l.buildIndex(id, size, func(_ int64, b []byte) { last = append(last[:0], b...) })
	var iwe *indexWriteError
	if errors.As(err, &iwe) {
		// The block was found; only the index is missing still.
		l.log.Warn("segment index not rebuilt", "file", l.indexPath(id), "err", err)
		return last, nil
	}
	return last, err
}
