package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// RecordPrefixSize is the fixed part of a message record: contentSize u32 and
// headerCount u32 (docs/protocol.md §1.4).
const RecordPrefixSize = 8

// ErrInvalidRecords reports a pub/delay payload that is not a sequence of whole
// message records (docs/protocol.md §1.4).
var ErrInvalidRecords = errors.New("invalid message records")

// ErrTooManyRecords reports a payload holding more records than the caller's cap.
var ErrTooManyRecords = errors.New("too many records in one request")

// CountRecords walks a pub/delay payload exactly as docs/protocol.md §1.4 describes and
// returns the number of records. The rules: total length > 8; every record's
// contentSize > 0 and the record fits; after a record either nothing remains
// or more than 8 bytes remain. maxRecords <= 0 means no cap; when the cap is
// exceeded the walk stops early so a hostile payload costs O(cap).
func CountRecords(payload []byte, maxRecords int) (int, error) {
	if len(payload) <= RecordPrefixSize {
		return 0, fmt.Errorf("%w: payload of %d bytes", ErrInvalidRecords, len(payload))
	}
	n := 0
	for off := 0; off < len(payload); {
		rest := len(payload) - off
		if rest <= RecordPrefixSize {
			return 0, fmt.Errorf("%w: %d trailing bytes at offset %d", ErrInvalidRecords, rest, off)
		}
		size := uint64(binary.LittleEndian.Uint32(payload[off:]))
		if size == 0 {
			return 0, fmt.Errorf("%w: empty record at offset %d", ErrInvalidRecords, off)
		}
		if size+RecordPrefixSize > uint64(rest) {
			return 0, fmt.Errorf("%w: record at offset %d overruns payload", ErrInvalidRecords, off)
		}
		n++
		if maxRecords > 0 && n > maxRecords {
			return 0, fmt.Errorf("%w: more than %d", ErrTooManyRecords, maxRecords)
		}
		off += int(size) + RecordPrefixSize
	}
	return n, nil
}

// NextRecord returns the first record of a payload already validated by
// CountRecords and the remainder.
func NextRecord(payload []byte) (record, rest []byte) {
	size := int(binary.LittleEndian.Uint32(payload)) + RecordPrefixSize
	return payload[:size], payload[size:]
}
