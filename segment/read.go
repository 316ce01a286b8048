package segment

import (
	"errors"
	"fmt"
	"github.com/smssmq/smss/internal/rawsys"
	"io"
	"os"
	"strconv"

	"github.com/smssmq/smss/codec"
)

// CorruptError reports bytes in a log file that are not a whole valid block:
// a torn tail after a crash, or damage. It names the file and offset so that
// operators can find it.
type CorruptError struct {
	Path   string
	Offset int64
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("segment: bad block in %s at offset %d: %v", e.Path, e.Offset, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Torn reports whether the bad bytes are only an incomplete block, as a crash
// in the middle of an append leaves them.
func (e *CorruptError) Torn() bool { return errors.Is(e.Err, codec.ErrIncomplete) }

// A scan reads firstChunk bytes first and doubles each read up to
// readChunk: most scans stop after one block (firstID, verifyEntry) or
// within an index interval (scanAfter, LastBlock), and a fixed 256 KiB
// first read made every such lookup read and allocate that much; a scan of
// a whole file still reads in readChunk pieces after a few reads.
const (
	firstChunk = 4 << 10
	readChunk  = 256 << 10
)

// scan decodes the blocks of file id in [from, limit) and calls fn for each
// whole block with its offset, eventIds and bytes (valid only during the
// call). limit < 0 means the file's size. It returns the offset after the
// last whole block; if bytes before limit do not form a whole block it
// returns a *CorruptError at that offset. fn returning errStop ends the scan
// without error.
func (l *Log) scan(id, from, limit int64, fn func(off, first, last int64, block []byte) error) (int64, error) {
	path := l.Path(id)
	if from < 0 {
		// Offsets come from index files and the meta checkpoint too;
		// damaged ones must not reach the arithmetic below.
		return from, fmt.Errorf("segment: scan %s from negative offset %d", path, from)
	}
	f, err := os.Open(path)
	if err != nil {
		return from, fmt.Errorf("segment: open %s: %w", path, err)
	}
	defer f.Close()
	var fio rawsys.File // f's reads, raw while they are fast
	if limit < 0 {
		st, err := f.Stat()
		if err != nil {
			return from, fmt.Errorf("segment: stat %s: %w", path, err)
		}
		limit = st.Size()
	}
	back := make([]byte, min(int64(firstChunk), max(limit-from, 64)))
	r, w := 0, 0   // unconsumed bytes are back[r:w]
	off := from    // file offset of back[r]
	readTo := from // file offset of back[w]
	for off < limit {
		for r < w {
			first, last, n, derr := l.opts.Decode(back[r:w])
			if derr != nil {
				if errors.Is(derr, codec.ErrIncomplete) && readTo < limit {
					break
				}
				return off, &CorruptError{Path: path, Offset: off, Err: derr}
			}
			if err := fn(off, first, last, back[r:r+n]); err != nil {
				if errors.Is(err, errStop) {
					return off + int64(n), nil
				}
				return off, err
			}
			r += n
			off += int64(n)
		}
		if off >= limit {
			break
		}
		// Make room: move the partial block to the front, and grow when
		// it already fills the buffer (a block larger than one chunk) or,
		// after the first read, to double the next read up to readChunk
		// (never past the bytes left to read).
		if r > 0 {
			copy(back, back[r:w])
			w -= r
			r = 0
		}
		size := len(back)
		switch {
		case w == len(back):
			size = 2 * len(back)
		case readTo > from && len(back) < readChunk:
			size = int(min(int64(2*len(back)), readChunk, int64(w)+limit-readTo))
		}
		if size > len(back) {
			nb := make([]byte, size)
			copy(nb, back[:w])
			back = nb
		}
		want := min(int64(len(back)-w), limit-readTo)
		n, rerr := readAtFull(&fio, f, back[w:w+int(want)], readTo)
		w += n
		readTo += int64(n)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return off, fmt.Errorf("segment: read %s at %d: %w", path, readTo, rerr)
		}
		if n == 0 {
			return off, &CorruptError{Path: path, Offset: off, Err: fmt.Errorf("%w: file ends at %d before %d", codec.ErrIncomplete, readTo, limit)}
		}
	}
	return off, nil
}

// firstID returns the first eventId of file id, or ok=false if it holds no
// whole block.
func (l *Log) firstID(id int64) (int64, bool, error) {
	l.mu.Lock()
	v, ok := l.firstIDs[id]
	l.mu.Unlock()
	if ok {
		return v, true, nil
	}
	found := false
	_, err := l.scan(id, 0, -1, func(_, first, _ int64, _ []byte) error {
		v, found = first, true
		return errStop
	})
	if err != nil && !found {
		var ce *CorruptError
		if errors.As(err, &ce) && ce.Offset == 0 && ce.Torn() {
			return 0, false, nil // being written, or empty
		}
		return 0, false, err
	}
	if found {
		l.mu.Lock()
		l.firstIDs[id] = v
		l.mu.Unlock()
	}
	return v, found, nil
}

// FirstEventID returns the first eventId of the oldest file, ok=false when
// the log holds no block.
func (l *Log) FirstEventID() (int64, bool, error) {
	for _, id := range l.Files() {
		v, ok, err := l.firstID(id)
		if err != nil || ok {
			return v, ok, err
		}
	}
	return 0, false, nil
}

// sizeOf returns the readable size of file id given the committed position.
func (l *Log) sizeOf(id int64, committed Position) (int64, error) {
	if id == committed.FileID {
		return committed.Offset, nil
	}
	st, err := os.Stat(l.Path(id))
	if err != nil {
		return 0, fmt.Errorf("segment: stat %s: %w", l.Path(id), err)
	}
	return st.Size(), nil
}

// Located is the answer of Locate.
type Located struct {
	// Pos is where the first block whose first eventId is greater than the
	// target starts (or the committed end when there is none).
	Pos Position
	// PrevFirst and PrevLast are the first and last eventIds of the block
	// just before Pos, 0 when Pos is the start of the oldest file.
	PrevFirst, PrevLast int64
	// BeforeOldest is set when the target is below the oldest retained
	// block, i.e. everything retained is after it.
	BeforeOldest bool
}

// Locate finds the first block with eventId greater than target without
// reading whole files: a binary search over the files' first eventIds, then
// over the file's index, then a short scan.
func (l *Log) Locate(target int64) (Located, error) {
	committed := l.Committed()
	var files []int64
	for _, id := range l.Files() {
		if id <= committed.FileID {
			files = append(files, id)
		}
	}
	if len(files) == 0 {
		return Located{Pos: committed, BeforeOldest: true}, nil
	}
	// Last file whose first eventId <= target. Files without a whole block
	// (only the newest can be one) sort as +infinity.
	lo, hi := 0, len(files)
	for lo < hi {
		mid := lo + (hi-lo)/2
		first, ok, err := l.firstID(files[mid])
		if err != nil {
			return Located{}, err
		}
		if ok && first <= target {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return Located{Pos: Position{FileID: files[0]}, BeforeOldest: true}, nil
	}
	id := files[lo-1]
	size, err := l.sizeOf(id, committed)
	if err != nil {
		return Located{}, err
	}
	start, last := l.indexStart(id, target, size)
	checkGap := last && l.indexable(id)
	pos, prevFirst, prevLast, err := l.scanAfter(id, start, size, target, checkGap)
	if errors.Is(err, errIndexGap) {
		// Rebuild the index once rather than scan this far at every
		// lookup; if that fails, scan anyway.
		l.log.Warn("segment index falls short of its log; rebuilding", "file", l.indexPath(id), "lastEntry", start)
		if l.buildIndex(id, size, nil) == nil {
			start, _ = l.indexStart(id, target, size)
		}
		pos, prevFirst, prevLast, err = l.scanAfter(id, start, size, target, false)
	}
	if err != nil {
		return Located{}, err
	}
	if pos.Offset == size && lo < len(files) {
		pos = Position{FileID: files[lo]}
	}
	return Located{Pos: pos, PrevFirst: prevFirst, PrevLast: prevLast}, nil
}

// indexStart returns an offset of a block boundary in file id whose block's
// first eventId is <= target, using the index when it can be verified, and
// whether no later index entry bounds a scan from there (it is the last
// entry, or the index was of no use).
func (l *Log) indexStart(id, target, size int64) (int64, bool) {
	for attempt := 0; attempt < 2; attempt++ {
		r, err := openIndex(l.indexPath(id))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && attempt == 0 && l.indexable(id) {
				if berr := l.buildIndex(id, size, nil); berr == nil {
					continue
				}
			}
			return 0, true
		}
		e, i, ok, err := r.search(target, size)
		n := r.n
		r.close()
		if err != nil || !ok {
			return 0, true
		}
		if l.verifyEntry(id, e, size) {
			return e.off, i == n-1
		}
		// The index lies: rebuild it (not for the file being appended,
		// whose index the writer owns) and try once more.
		l.log.Warn("segment index does not match its log; rebuilding", "file", l.indexPath(id), "offset", e.off)
		if !l.indexable(id) || l.buildIndex(id, size, nil) != nil {
			return 0, true
		}
	}
	return 0, true
}

func (l *Log) verifyEntry(id int64, e entry, size int64) bool {
	ok := false
	_, err := l.scan(id, e.off, size, func(_, first, _ int64, _ []byte) error {
		ok = first == e.eventID
		return errStop
	})
	return err == nil && ok
}

// scanAfter scans file id from start and returns the position of the first
// block whose first eventId > target and the last eventId before it. With
// checkGap, start is the index's last entry and the scan fails with
// errIndexGap when it meets a block that entry should have been followed by.
func (l *Log) scanAfter(id, start, size, target int64, checkGap bool) (Position, int64, int64, error) {
	pos := Position{FileID: id, Offset: size}
	prevFirst, prevLast := int64(0), int64(0)
	gap := l.gapCheck(start)
	_, err := l.scan(id, start, size, func(off, first, last int64, _ []byte) error {
		if checkGap {
			if err := gap(off); err != nil {
				return err
			}
		}
		if first > target {
			pos.Offset = off
			return errStop
		}
		prevFirst, prevLast = first, last
		return nil
	})
	return pos, prevFirst, prevLast, err
}

// NextFile reports the file after id when id is complete (a later file
// exists up to the committed end), for readers that reached the end of id.
// Files are contiguous, so it is always id+1: if retention removed that
// file meanwhile, opening it fails with ErrFileRemoved instead of the
// reader silently skipping to a later file.
func (l *Log) NextFile(id int64) (int64, bool) {
	if id >= l.Committed().FileID {
		return 0, false
	}
	return id + 1, true
}

// FileName is the base name of file id, for messages.
func FileName(id int64) string { return strconv.FormatInt(id, 10) + ".log" }
