package protocol

import (
	"encoding/binary"
	"fmt"
	"io"
)

// SubFrameReader reads subscription frames like ReadSubFrame but into one
// reused buffer, for consumers that are done with a frame before reading
// the next (a frame of 255 messages is tens of KiB; allocating each one
// costs a busy consumer more than parsing it). Not safe for concurrent use.
type SubFrameReader struct {
	r   io.Reader
	max int
	h   RespHeader
	buf []byte
}

// NewSubFrameReader reads frames from r (which should be buffered); data
// frames longer than maxLen fail with a wrapped ErrReplyTooLarge.
func NewSubFrameReader(r io.Reader, maxLen int) *SubFrameReader {
	return &SubFrameReader{r: r, max: maxLen}
}

// Next reads one subscription unit, as ReadSubFrame does. The returned
// Body is valid until the next call.
func (fr *SubFrameReader) Next() (Frame, error) {
	h := &fr.h
	if _, err := io.ReadFull(fr.r, h[:]); err != nil {
		return Frame{}, fmt.Errorf("read frame header: %w", err)
	}
	switch code := h.Code(); code {
	case StatusOK:
		n := h.FrameLen()
		if uint64(n) > uint64(fr.max) || fr.max < 0 {
			return Frame{}, fmt.Errorf("subscription frame of %d bytes, cap %d: %w", n, fr.max, ErrReplyTooLarge)
		}
		if uint64(cap(fr.buf)) < uint64(n) {
			fr.buf = make([]byte, n)
		}
		body := fr.buf[:n]
		if _, err := io.ReadFull(fr.r, body); err != nil {
			return Frame{}, fmt.Errorf("read subscription frame: %w", unexpected(err))
		}
		return Frame{Code: code, Count: int(h.FrameCount()), Body: body}, nil
	case StatusAlive, StatusSubEnd:
		return Frame{Code: code}, nil
	case StatusError:
		return Frame{}, readErrText(fr.r, h)
	default:
		return Frame{}, fmt.Errorf("%w %d in subscription stream", ErrUnexpectedStatus, code)
	}
}

// WalkSubMessages calls fn with the eventId and body of each of the count
// messages of a data frame's area, skipping headers, without allocating.
// It checks what ParseSubMessages checks and stops at the first error;
// messages before it have been passed to fn.
func WalkSubMessages(area []byte, count int, fn func(eventID int64, body []byte)) error {
	if count <= 0 {
		return fmt.Errorf("%w: message count %d", ErrBadFrame, count)
	}
	// As ParseSubMessages: a count the area cannot hold is refused first.
	const minMsg = SubMessageFixedSize + RecordPrefixSize + 1
	if count > len(area)/minMsg {
		return fmt.Errorf("%w: %d messages cannot fit in %d bytes", ErrBadFrame, count, len(area))
	}
	b := area
	for i := 0; i < count; i++ {
		if len(b) < SubMessageFixedSize+RecordPrefixSize {
			return fmt.Errorf("%w: message %d truncated", ErrBadFrame, i)
		}
		rec := b[SubMessageFixedSize:]
		size := uint64(binary.LittleEndian.Uint32(rec))
		if size > uint64(len(rec)-RecordPrefixSize) {
			return fmt.Errorf("%w: message %d: %w: contentSize %d overruns %d bytes", ErrBadFrame, i, ErrMalformedRecord, size, len(rec)-RecordPrefixSize)
		}
		total := RecordPrefixSize + int(size)
		content := rec[RecordPrefixSize:total]
		headers := binary.LittleEndian.Uint32(rec[4:])
		if uint64(headers) > uint64(len(content)/8) {
			return fmt.Errorf("%w: message %d: %w: %d headers cannot fit in %d bytes", ErrBadFrame, i, ErrMalformedRecord, headers, len(content))
		}
		for j := uint32(0); j < 2*headers; j++ { // a key and a value each
			var err error
			if _, content, err = varString(content); err != nil {
				return fmt.Errorf("%w: message %d: header %d: %w", ErrBadFrame, i, j/2, err)
			}
		}
		fn(int64(binary.LittleEndian.Uint64(b[8:])), content)
		b = rec[total:]
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d bytes after %d messages", ErrBadFrame, len(b), count)
	}
	return nil
}
