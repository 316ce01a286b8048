package segment

import (
	"errors"
	"fmt"
	"github.com/smssmq/smss/internal/rawsys"
	"io"
	"os"

	"github.com/smssmq/smss/codec"
)

// ErrFileRemoved is wrapped when a reader's next file no longer exists
// (retention removed it, or the log was deleted).
var ErrFileRemoved = errors.New("log file removed")

// A reader's buffer starts at what is there to read, at least
// readerFirstBuf, and doubles up to readerBuf while reads keep filling it
// (more, only for a block that does not fit). Close drops it: a reader
// that waits for new blocks (an idle subscriber or slave) holds no buffer.
const (
	readerFirstBuf = 4 << 10
	readerBuf      = 64 << 10
)

// Reader reads whole committed blocks sequentially from a position, across
// files. It keeps one file open and one read-ahead buffer, so its memory is
// bounded by the buffer plus the largest block. Not safe for concurrent use.
type Reader struct {
	l      *Log
	pos    Position // position of the next block to deliver
	f      *os.File
	fio    rawsys.File // f's reads, raw while they are fast
	fid    int64
	buf    []byte
	start  int64 // file offset of buf[0]
	filled int   // bytes of buf holding file data
	// sizeID/sizeVal cache the size of a complete (immutable) file.
	sizeID, sizeVal int64
}

func (r *Reader) size(committed Position) (int64, error) {
	if r.pos.FileID == committed.FileID {
		return committed.Offset, nil
	}
	if r.sizeID == r.pos.FileID && r.sizeVal > 0 {
		return r.sizeVal, nil
	}
	v, err := r.l.sizeOf(r.pos.FileID, committed)
	if err == nil {
		r.sizeID, r.sizeVal = r.pos.FileID, v
	}
	return v, err
}

// NewReader returns a reader positioned at pos.
func (l *Log) NewReader(pos Position) *Reader { return &Reader{l: l, pos: pos, fid: -1} }

// Pos returns the position of the next block.
func (r *Reader) Pos() Position { return r.pos }

// Close releases the open file and the buffer; the reader can still be
// used and reopens them.
func (r *Reader) Close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	r.fid, r.filled, r.buf = -1, 0, nil
}

// Next delivers up to max whole committed blocks to fn, never crossing a
// file inside one call. fn gets each block's eventIds, its bytes (valid
// only during the call) and the position after it. Next returns the number
// of blocks delivered; 0 means the reader is at the committed end. When a
// call ends exactly at the end of a complete file, the reader moves to the
// next file and atEndOfFile is true so callers can report (next file, 0).
func (r *Reader) Next(max int, fn func(first, last int64, block []byte, next Position) error) (n int, atEndOfFile bool, err error) {
	for attempt := 0; ; attempt++ {
		committed := r.l.Committed()
		if committed.Less(r.pos) {
			return 0, false, fmt.Errorf("segment: reader position %s is past the committed end %s of %s", r.pos, committed, r.l.opts.Dir)
		}
		limit, err := r.size(committed)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return 0, false, fmt.Errorf("%w: %s (position %s)", ErrFileRemoved, r.l.Path(r.pos.FileID), r.pos)
			}
			return 0, false, err
		}
		if r.pos.Offset < limit {
			n, err := r.deliver(max, limit, fn)
			if err != nil || n == 0 {
				return n, false, err
			}
			// Whether this file is complete must be judged from the same
			// committed position that limit came from: a newer one may
			// name a later file while this file grew past limit before
			// it rolled, and moving on would skip those blocks.
			if r.pos.Offset == limit && r.pos.FileID < committed.FileID {
				r.Close()
				r.pos = Position{FileID: r.pos.FileID + 1}
				return n, true, nil
			}
			return n, false, nil
		}
		// At the end of this file: move on if it is complete (files are
		// contiguous, so the next one is id+1; see NextFile).
		if r.pos.FileID >= committed.FileID || attempt > 0 {
			return 0, false, nil
		}
		r.Close()
		r.pos = Position{FileID: r.pos.FileID + 1}
	}
}

func (r *Reader) deliver(maxBlocks int, limit int64, fn func(first, last int64, block []byte, next Position) error) (int, error) {
	if r.f == nil || r.fid != r.pos.FileID {
		r.Close()
		f, err := os.Open(r.l.Path(r.pos.FileID))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return 0, fmt.Errorf("%w: %s (position %s)", ErrFileRemoved, r.l.Path(r.pos.FileID), r.pos)
			}
			return 0, fmt.Errorf("segment: open %s: %w", r.l.Path(r.pos.FileID), err)
		}
		r.f, r.fid = f, r.pos.FileID
		if r.buf == nil {
			r.buf = make([]byte, min(max(limit-r.pos.Offset, readerFirstBuf), readerBuf))
		}
		r.start, r.filled = r.pos.Offset, 0
	}
	n := 0
	for n < maxBlocks && r.pos.Offset < limit {
		rel := int(r.pos.Offset - r.start)
		if rel < 0 || rel > r.filled {
			r.start, r.filled, rel = r.pos.Offset, 0, 0
		}
		first, last, size, derr := r.l.opts.Decode(r.buf[rel:r.filled])
		if derr != nil {
			if !errors.Is(derr, codec.ErrIncomplete) {
				return n, &CorruptError{Path: r.l.Path(r.pos.FileID), Offset: r.pos.Offset, Err: derr}
			}
			if err := r.fill(rel, limit); err != nil {
				return n, err
			}
			continue
		}
		next := Position{FileID: r.pos.FileID, Offset: r.pos.Offset + int64(size)}
		if next.Offset > limit {
			return n, &CorruptError{Path: r.l.Path(r.pos.FileID), Offset: r.pos.Offset, Err: errors.New("block crosses the committed end")}
		}
		if err := fn(first, last, r.buf[rel:rel+size], next); err != nil {
			return n, err
		}
		r.pos = next
		n++
	}
	return n, nil
}

// fill moves the unread bytes (from rel) to the front of the buffer and
// reads more, growing the buffer when one block does not fit, or up to
// readerBuf when more is there to read than fits.
func (r *Reader) fill(rel int, limit int64) error {
	copy(r.buf, r.buf[rel:r.filled])
	r.filled -= rel
	r.start += int64(rel)
	avail := limit - (r.start + int64(r.filled))
	size := len(r.buf)
	switch {
	case r.filled == len(r.buf):
		size = 2 * len(r.buf)
	case len(r.buf) < readerBuf && avail > int64(len(r.buf)-r.filled):
		size = min(2*len(r.buf), readerBuf)
	}
	if size > len(r.buf) {
		nb := make([]byte, size)
		copy(nb, r.buf[:r.filled])
		r.buf = nb
	}
	want := min(int64(len(r.buf)-r.filled), avail)
	if want <= 0 {
		return &CorruptError{Path: r.l.Path(r.pos.FileID), Offset: r.pos.Offset, Err: fmt.Errorf("%w before the committed end", codec.ErrIncomplete)}
	}
	got, err := readAtFull(&r.fio, r.f, r.buf[r.filled:r.filled+int(want)], r.start+int64(r.filled))
	r.filled += got
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("segment: read %s: %w", r.l.Path(r.pos.FileID), err)
	}
	if got == 0 {
		return &CorruptError{Path: r.l.Path(r.pos.FileID), Offset: r.pos.Offset, Err: fmt.Errorf("%w: file shorter than its committed size", codec.ErrIncomplete)}
	}
	return nil
}
