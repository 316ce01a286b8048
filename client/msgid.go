package client

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/smssmq/smss/protocol"
)

// MessageIDHeader is the record header that carries a publish request's
// message id (docs/protocol.md §12.4, message ids). A server with
// dedupe stores a request whose id it already stored within its window only
// once and answers the retry 200; an original server stores the header like
// any other.
const MessageIDHeader = "smss-msg-id"

// MaxMessageIDLen is the longest message id a server accepts, in bytes.
const MaxMessageIDLen = 128

// ErrInvalidMessageID: a caller-set smss-msg-id header that is empty or
// longer than MaxMessageIDLen bytes. Nothing was sent.
var ErrInvalidMessageID = errors.New("smss client: invalid message id")

// NewMessageID returns a random 128-bit id as 32 lowercase hex characters,
// the form the client attaches by default. Set it yourself (header
// MessageIDHeader on the first message) to know a call's id, e.g. to repeat
// the call after a restart of the publishing process.
func NewMessageID() string {
	var b [16]byte
	// crypto/rand.Read never fails on the platforms Go supports (it
	// panics instead of returning a short read since Go 1.24).
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkMessageID validates a caller-set id the way a dedupe server does, so
// the mistake is reported before anything is sent.
func checkMessageID(id string) error {
	if len(id) == 0 || len(id) > MaxMessageIDLen {
		return fmt.Errorf("%w: %s of %d bytes, want 1..%d", ErrInvalidMessageID, MessageIDHeader, len(id), MaxMessageIDLen)
	}
	return nil
}

// publishRecords encodes msgs for one pub or delay request. The first record
// carries the message id: the caller's own smss-msg-id header if it set
// one, else (when withID) a fresh NewMessageID appended after the caller's
// headers, without touching the caller's Message (reusing it for another
// call must not repeat the id). id is "" when the request carries none.
func publishRecords(msgs []*Message, withID bool) (records []byte, id string, err error) {
	if len(msgs) == 0 {
		return nil, "", ErrNoMessages
	}
	first := msgs[0]
	if first == nil || (len(first.Headers) == 0 && len(first.Body) == 0) {
		return nil, "", fmt.Errorf("message 0: %w", ErrEmptyMessage)
	}
	if v, ok := first.Header(MessageIDHeader); ok {
		if err := checkMessageID(v); err != nil {
			return nil, "", fmt.Errorf("message 0: %w", err)
		}
		id = v
		records, err = first.appendRecord(nil)
	} else if withID {
		id = NewMessageID()
		rec := protocol.Record{Body: first.Body, Headers: make([]protocol.KV, 0, len(first.Headers)+1)}
		for _, h := range first.Headers {
			rec.Headers = append(rec.Headers, protocol.KV{Key: h.Key, Value: h.Value})
		}
		rec.Headers = append(rec.Headers, protocol.KV{Key: MessageIDHeader, Value: id})
		records, err = protocol.AppendRecord(nil, rec)
	} else {
		records, err = first.appendRecord(nil)
	}
	if err != nil {
		return nil, "", fmt.Errorf("message 0: %w", err)
	}
	for i, m := range msgs[1:] {
		if records, err = m.appendRecord(records); err != nil {
			return nil, "", fmt.Errorf("message %d: %w", i+1, err)
		}
	}
	return records, id, nil
}
