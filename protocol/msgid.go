package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Message ids (exactly-once publishing, docs/protocol.md §12.4): a pub (1) or delay (16) request may carry the record header
// MsgIDHeader on its FIRST record. The master stores a request whose id it
// already stored within its dedupe window only once and answers the
// duplicate with the original's eventId. Original clients never send the
// header; to the original server it is an ordinary header.
const (
	// MsgIDHeader is the header key, compared byte for byte.
	MsgIDHeader = "smss-msg-id"
	// MaxMsgIDLen is the longest id accepted, in bytes.
	MaxMsgIDLen = 128
)

// ErrInvalidMsgID is wrapped by the refusal of an empty or too long id.
// The refusal is a BizError (a 400 whose text names the length); the
// request body was read whole, so the connection stays usable.
var ErrInvalidMsgID = errors.New("invalid smss-msg-id")

// msgIDError is the 400 of a bad id: its text goes to the client, and it
// matches ErrInvalidMsgID for callers that branch.
type msgIDError struct{ biz *BizError }

func (e *msgIDError) Error() string        { return e.biz.Msg }
func (e *msgIDError) Unwrap() error        { return e.biz }
func (e *msgIDError) Is(target error) bool { return target == ErrInvalidMsgID }

// MessageID returns the value of the MsgIDHeader header of the first record
// of payload (a pub or delay payload already validated by CountRecords, so
// its first record fits). It reads only that record's headers and
// allocates nothing; a record without headers costs one load and compare.
//
// The server never validated headers (docs/protocol.md §1.4), so a header section that
// is inconsistent with its record (a count or a length running past the
// record) is not an error: the headers before the inconsistency are
// searched and the request is stored verbatim as before. The id is
// returned as a sub-slice of payload (nil when absent). An id of length 0
// or above MaxMsgIDLen is refused with an error matching ErrInvalidMsgID.
// The first occurrence of the key counts (the Go client never emits a key
// twice).
func MessageID(payload []byte) ([]byte, error) {
	if len(payload) < RecordPrefixSize {
		return nil, nil
	}
	count := binary.LittleEndian.Uint32(payload[4:])
	if count == 0 {
		return nil, nil
	}
	size := uint64(binary.LittleEndian.Uint32(payload))
	if size > uint64(len(payload)-RecordPrefixSize) {
		return nil, nil
	}
	content := payload[RecordPrefixSize : RecordPrefixSize+int(size)]
	for i := uint32(0); i < count; i++ {
		if len(content) < 4 {
			return nil, nil
		}
		kl := uint64(binary.LittleEndian.Uint32(content))
		if kl > uint64(len(content)-4) {
			return nil, nil
		}
		key := content[4 : 4+kl]
		content = content[4+kl:]
		if len(content) < 4 {
			return nil, nil
		}
		vl := uint64(binary.LittleEndian.Uint32(content))
		if vl > uint64(len(content)-4) {
			return nil, nil
		}
		val := content[4 : 4+vl]
		content = content[4+vl:]
		if string(key) == MsgIDHeader {
			if len(val) == 0 || len(val) > MaxMsgIDLen {
				return nil, &msgIDError{NewBizError(fmt.Sprintf("%s must be 1 to %d bytes, got %d", MsgIDHeader, MaxMsgIDLen, len(val)))}
			}
			return val, nil
		}
	}
	return nil, nil
}
