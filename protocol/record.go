package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// KV is one message header (§1.4). Keys and values are raw bytes on the wire.
type KV struct {
	Key, Value string
}

// Record is a decoded message record: headers in wire order, then the body.
type Record struct {
	Headers []KV
	Body    []byte
}

// ErrMalformedRecord reports a record whose header count or lengths are
// inconsistent with its contentSize.
var ErrMalformedRecord = errors.New("malformed message record")

// AppendRecord appends the §1.4 encoding of rec. It fails when the content
// does not fit the uint32 contentSize.
func AppendRecord(dst []byte, rec Record) ([]byte, error) {
	size := uint64(len(rec.Body))
	for _, h := range rec.Headers {
		size += 8 + uint64(len(h.Key)) + uint64(len(h.Value))
	}
	if size > math.MaxUint32-RecordPrefixSize || uint64(len(rec.Headers)) > math.MaxUint32 {
		return dst, fmt.Errorf("record content of %d bytes: %w", size, ErrFieldTooLong)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(size))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(rec.Headers)))
	for _, h := range rec.Headers {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(h.Value)))
		dst = append(dst, h.Value...)
	}
	return append(dst, rec.Body...), nil
}

// ParseRecord decodes the record at the start of b and returns it with the
// number of bytes it occupies (8 + contentSize). Body aliases b. Every length
// is checked against what remains, so a hostile header count costs at most
// one pass over the record.
func ParseRecord(b []byte) (Record, int, error) {
	if len(b) < RecordPrefixSize {
		return Record{}, 0, fmt.Errorf("%w: %d bytes, need at least %d", ErrMalformedRecord, len(b), RecordPrefixSize)
	}
	size := uint64(binary.LittleEndian.Uint32(b))
	if size > uint64(len(b)-RecordPrefixSize) {
		return Record{}, 0, fmt.Errorf("%w: contentSize %d overruns %d bytes", ErrMalformedRecord, size, len(b)-RecordPrefixSize)
	}
	total := RecordPrefixSize + int(size)
	count := binary.LittleEndian.Uint32(b[4:])
	content := b[RecordPrefixSize:total]
	// Each header takes at least 8 bytes, which bounds the slice capacity by
	// the bytes actually present rather than by the claimed count.
	if uint64(count) > uint64(len(content)/8) {
		return Record{}, 0, fmt.Errorf("%w: %d headers cannot fit in %d bytes", ErrMalformedRecord, count, len(content))
	}
	var rec Record
	if count > 0 {
		rec.Headers = make([]KV, 0, count)
	}
	for i := uint32(0); i < count; i++ {
		key, rest, err := varString(content)
		if err != nil {
			return Record{}, 0, fmt.Errorf("header %d key: %w", i, err)
		}
		val, rest, err := varString(rest)
		if err != nil {
			return Record{}, 0, fmt.Errorf("header %d value: %w", i, err)
		}
		rec.Headers = append(rec.Headers, KV{Key: string(key), Value: string(val)})
		content = rest
	}
	rec.Body = content
	return rec, total, nil
}

func varString(b []byte) (s, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: length prefix truncated", ErrMalformedRecord)
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if n > uint64(len(b)-4) {
		return nil, nil, fmt.Errorf("%w: string of %d bytes overruns %d", ErrMalformedRecord, n, len(b)-4)
	}
	return b[4 : 4+n], b[4+n:], nil
}
