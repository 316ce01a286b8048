package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// SubMessage is one message of a subscription data frame (§2.4). Raw is the
// stored record verbatim; Headers and Body are decoded from it and alias the
// frame area.
type SubMessage struct {
	Ts         int64
	EventID    int64
	NextFileID int64
	NextPos    int64
	Raw        []byte
	Record
}

// ErrBadFrame reports a subscription frame whose count and sizes disagree.
var ErrBadFrame = errors.New("malformed subscription frame")

// ParseSubMessages decodes the message area of a data frame announced with
// count messages. The area must hold exactly count well-formed messages;
// count 0 is invalid (§2.4). It never panics on inconsistent input (§10.34).
func ParseSubMessages(area []byte, count int) ([]SubMessage, error) {
	if count <= 0 {
		return nil, fmt.Errorf("%w: message count %d", ErrBadFrame, count)
	}
	// The smallest message is 32 fixed bytes plus a 9-byte record; a larger
	// claimed count cannot be honest, and must not size the slice.
	const minMsg = SubMessageFixedSize + RecordPrefixSize + 1
	if count > len(area)/minMsg {
		return nil, fmt.Errorf("%w: %d messages cannot fit in %d bytes", ErrBadFrame, count, len(area))
	}
	msgs := make([]SubMessage, 0, count)
	b := area
	for i := 0; i < count; i++ {
		if len(b) < SubMessageFixedSize {
			return nil, fmt.Errorf("%w: message %d truncated", ErrBadFrame, i)
		}
		m := SubMessage{
			Ts:         int64(binary.LittleEndian.Uint64(b[0:])),
			EventID:    int64(binary.LittleEndian.Uint64(b[8:])),
			NextFileID: int64(binary.LittleEndian.Uint64(b[16:])),
			NextPos:    int64(binary.LittleEndian.Uint64(b[24:])),
		}
		rec, n, err := ParseRecord(b[SubMessageFixedSize:])
		if err != nil {
			return nil, fmt.Errorf("%w: message %d: %w", ErrBadFrame, i, err)
		}
		m.Raw = b[SubMessageFixedSize : SubMessageFixedSize+n]
		m.Record = rec
		msgs = append(msgs, m)
		b = b[SubMessageFixedSize+n:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after %d messages", ErrBadFrame, len(b), count)
	}
	return msgs, nil
}
