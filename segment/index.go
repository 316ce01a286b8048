package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
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
// below limit, or ok=false when there is none. Entries are ascending in both
// fields when the index is sound; an unsound index only costs a longer scan
// because callers verify the entry they get.
func (r *indexReader) search(target, limit int64) (entry, bool, error) {
	lo, hi := int64(0), r.n // find first i with entry(i) > target (or off >= limit)
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := r.at(mid)
		if err != nil {
			return entry{}, false, err
		}
		if e.eventID <= target && e.off < limit {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return entry{}, false, nil
	}
	e, err := r.at(lo - 1)
	return e, err == nil, err
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

// buildIndex scans a whole file and writes a fresh index next to it
// (through a temporary file and rename, so a crash never leaves a half index
// that looks whole).
func buildIndex(l *Log, id int64, size int64) error {
	var buf []byte
	last := int64(-1)
	_, err := l.scan(id, 0, size, func(off int64, first, _ int64, _ []byte) error {
		if last < 0 || off-last >= l.opts.IndexInterval {
			buf = appendEntry(buf, first, off)
			last = off
		}
		return nil
	})
	if err != nil {
		return err
	}
	tmp := l.indexPath(id) + ".tmp"
	if err := os.WriteFile(tmp, buf, 0o644); err != nil {
		return fmt.Errorf("segment: write index %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, l.indexPath(id)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("segment: install index %s: %w", l.indexPath(id), err)
	}
	return nil
}

var errStop = errors.New("stop")

// readFull is io.ReadFull over ReadAt.
func readAtFull(f *os.File, b []byte, off int64) (int, error) {
	n, err := f.ReadAt(b, off)
	if err == io.EOF && n == len(b) {
		err = nil
	}
	return n, err
}
