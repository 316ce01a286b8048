package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/smssmq/smss/internal/rawsys"
	"io"
	"os"

	"github.com/smssmq/smss/internal/fsmode"
)

const entrySize = 16

type entry struct {
	eventID int64
	off     int64
}

func appendEntry(dst []byte, eventID, off int64) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(eventID))
	return binary.LittleEndian.AppendUint64(dst, uint64(off))
}

// indexReader gives random access to the entries of one index file.
type indexReader struct {
	f *os.File
	n int64 // number of whole entries
}

func openIndex(path string) (*indexReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &indexReader{f: f, n: st.Size() / entrySize}, nil
}

func (r *indexReader) close() { r.f.Close() }

func (r *indexReader) at(i int64) (entry, error) {
	var b [entrySize]byte
	if _, err := r.f.ReadAt(b[:], i*entrySize); err != nil {
		return entry{}, err
	}
	return entry{eventID: int64(binary.LittleEndian.Uint64(b[:])), off: int64(binary.LittleEndian.Uint64(b[8:]))}, nil
}

// search returns the last entry whose eventID <= target and whose offset is
// below limit, and its number, or ok=false when there is none. Entries are
// ascending in both fields when the index is sound; an unsound index only
// costs a longer scan because callers verify the entry they get.
func (r *indexReader) search(target, limit int64) (entry, int64, bool, error) {
	lo, hi := int64(0), r.n // find first i with entry(i) > target (or off >= limit)
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := r.at(mid)
		if err != nil {
			return entry{}, 0, false, err
		}
		if e.eventID <= target && e.off < limit {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return entry{}, 0, false, nil
	}
	e, err := r.at(lo - 1)
	return e, lo - 1, err == nil, err
}

// truncateIndexFile drops the entries at or past off.
func truncateIndexFile(path string, off int64) error {
	r, err := openIndex(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer r.close()
	lo, hi := int64(0), r.n
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := r.at(mid)
		if err != nil {
			return err
		}
		if e.off < off {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if err := os.Truncate(path, lo*entrySize); err != nil {
		return fmt.Errorf("segment: truncate index %s: %w", path, err)
	}
	return nil
}

// buildIndex scans file id up to size and writes a fresh index next to it
// (through a temporary file and rename, so a crash never leaves a half index
// that looks whole), calling each, if set, with every block on the way. The
// caller must have checked that the writer does not own the index
// (indexable). An index for a file that retention removed meanwhile, or of
// a closed log (a deleted topic, whose directory name a new topic may
// reuse), is not installed.
func (l *Log) buildIndex(id int64, size int64, each func(off int64, block []byte)) error {
	l.buildMu.Lock()
	defer l.buildMu.Unlock()
	var buf []byte
	last := int64(-1)
	_, err := l.scan(id, 0, size, func(off int64, first, _ int64, b []byte) error {
		if last < 0 || off-last >= l.opts.IndexInterval {
			buf = appendEntry(buf, first, off)
			last = off
		}
		if each != nil {
			each(off, b)
		}
		return nil
	})
	if err != nil {
		return err
	}
	tmp := l.indexPath(id) + ".tmp"
	if err := os.WriteFile(tmp, buf, fsmode.File()); err != nil {
		os.Remove(tmp)
		return &indexWriteError{fmt.Errorf("segment: write index %s: %w", tmp, err)}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.files); l.closed || n == 0 || id < l.files[0] || id > l.files[n-1] {
		os.Remove(tmp)
		return &indexWriteError{fmt.Errorf("segment: not installing index %s: its log file is gone", l.indexPath(id))}
	}
	if err := os.Rename(tmp, l.indexPath(id)); err != nil {
		os.Remove(tmp)
		return &indexWriteError{fmt.Errorf("segment: install index %s: %w", l.indexPath(id), err)}
	}
	return nil
}

// indexWriteError is a buildIndex failure after the log was read whole:
// only the index is missing, the scan's findings stand.
type indexWriteError struct{ err error }

func (e *indexWriteError) Error() string { return e.err.Error() }
func (e *indexWriteError) Unwrap() error { return e.err }

// indexable reports whether lookups may rebuild file id's index: the
// writer never appends to the file again.
func (l *Log) indexable(id int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return id != l.appendID && !l.closed && !l.opts.ReadOnly
}

// errIndexGap stops a scan that met a block the index should have an entry
// for but does not: the index falls short of its log (it is not fsynced, so
// a machine crash can leave it empty or cut), and every lookup bounded by
// it would scan the rest of the file.
var errIndexGap = errors.New("index falls short of its log")

// gapCheck returns a scan callback that fails with errIndexGap at the first
// block the writer would have indexed after the index entry at start, the
// last entry of its index. Rollbacks can delay an entry too, which costs at
// most one needless rebuild per file: a rebuilt index passes the check.
func (l *Log) gapCheck(start int64) func(off int64) error {
	return func(off int64) error {
		if off-start >= l.opts.IndexInterval {
			return errIndexGap
		}
		return nil
	}
}

var errStop = errors.New("stop")

// readAtFull is io.ReadFull over ReadAt, with raw calls while they are
// fast (package rawsys; g belongs to f's reader).
func readAtFull(g *rawsys.File, f *os.File, b []byte, off int64) (int, error) {
	n, err := g.ReadAt(f, b, off)
	if err == io.EOF && n == len(b) {
		err = nil
	}
	return n, err
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
