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
