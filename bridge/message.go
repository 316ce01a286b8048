package bridge

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/smssmq/smss/protocol"
)

// Header names the bridge adds to every mirrored message, on NATS and on
// Kafka alike. A record header of the smss message with one of these names
// (compared case-insensitively) is carried in HeaderRaw instead, so the
// bridge's own headers are never ambiguous.
const (
	// HeaderEventID is the message's smss eventId (decimal).
	HeaderEventID = "smss-event-id"
	// HeaderTimestamp is the smss timestamp in ms since the epoch: when
	// the master received the publish (for a delayed message: when it was
	// applied).
	HeaderTimestamp = "smss-timestamp"
	// HeaderTopic is the smss topic name, byte for byte.
	HeaderTopic = "smss-topic"
	// HeaderBlock is "<first eventId of the binlog block>-<CRC-32C of the
	// block, 8 hex digits>": where a resume must start and a fingerprint
	// that tells the same history from a diverged one after a failover.
	HeaderBlock = "smss-block"
	// HeaderSafe is an eventId that ends a binlog block and up to which
	// every mirrored message had been acknowledged by the target when this
	// message was sent: a resume can always restart after it.
	HeaderSafe = "smss-safe"
	// HeaderDelayEventID is set on a delayed message: the eventId of the
	// delay command that scheduled it.
	HeaderDelayEventID = "smss-delay-event-id"
	// HeaderRaw carries the message's record headers when they cannot be
	// mapped one to one (NATS cannot carry every byte in a header, and a
	// record header may use a name above): standard base64 of the §1.4
	// header section, headerCount u32 LE then per header keyLen u32 LE,
	// key, valueLen u32 LE, value. The record headers are then not set
	// individually.
	HeaderRaw = "smss-headers-raw"
)

var reserved = []string{HeaderEventID, HeaderTimestamp, HeaderTopic, HeaderBlock, HeaderSafe, HeaderDelayEventID, HeaderRaw}

// isReserved reports whether key is one of the bridge's header names.
func isReserved(key string) bool {
	for _, r := range reserved {
		if strings.EqualFold(key, r) {
			return true
		}
	}
	return false
}

// Message is one smss message on its way to a target.
type Message struct {
	Topic     string
	EventID   int64
	Timestamp int64
	// DelayEventID is the delay command's eventId for a delayed message,
	// else 0.
	DelayEventID int64
	Block        Mark // Block.EventID is this message's own eventId
	Headers      []protocol.KV
	Body         []byte
}

// Mark is what a target remembers of a mirrored message: enough to resume.
type Mark struct {
	EventID    int64  // the message's eventId
	BlockFirst int64  // first eventId of its binlog block
	BlockCRC   uint32 // CRC-32C of the block as stored in the binlog
	Safe       int64  // HeaderSafe
}

// MetaHeaders returns the bridge's headers for m, in a fixed order.
func (m *Message) MetaHeaders() []protocol.KV { return m.metaHeaders(0) }

// metaHeaders is MetaHeaders with room for extra more headers.
func (m *Message) metaHeaders(extra int) []protocol.KV {
	h := make([]protocol.KV, 0, 6+extra)
	h = append(h,
		protocol.KV{Key: HeaderEventID, Value: strconv.FormatInt(m.EventID, 10)},
		protocol.KV{Key: HeaderTimestamp, Value: strconv.FormatInt(m.Timestamp, 10)},
		protocol.KV{Key: HeaderTopic, Value: m.Topic},
		protocol.KV{Key: HeaderBlock, Value: blockValue(m.Block.BlockFirst, m.Block.BlockCRC)},
		protocol.KV{Key: HeaderSafe, Value: strconv.FormatInt(m.Block.Safe, 10)},
	)
	if m.DelayEventID != 0 {
		h = append(h, protocol.KV{Key: HeaderDelayEventID, Value: strconv.FormatInt(m.DelayEventID, 10)})
	}
	return h
}

// blockValue is HeaderBlock's value, "%d-%08x" without fmt's reflection
// (it is built for every mirrored message).
func blockValue(first int64, crc uint32) string {
	const hexDigits = "0123456789abcdef"
	var buf [20 + 1 + 8]byte
	b := strconv.AppendInt(buf[:0], first, 10)
	b = append(b, '-')
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[crc>>uint(shift)&0xf])
	}
	return string(b)
}

// RawHeaders encodes headers as HeaderRaw's value.
func RawHeaders(headers []protocol.KV) string {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(len(headers)))
	for _, h := range headers {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Value)))
		b = append(b, h.Value...)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// ErrBadHeader reports a bridge header on the target that does not parse.
var ErrBadHeader = errors.New("malformed smss-bridge header")

// ParseRawHeaders decodes HeaderRaw's value. It reads bytes another program
// may have written to the target, so every length is checked.
func ParseRawHeaders(v string) ([]protocol.KV, error) {
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadHeader, HeaderRaw, err)
	}
	// Reuse the record parser: a header section is a record without its
	// contentSize prefix and without a body.
	rec := binary.LittleEndian.AppendUint32(nil, uint32(len(b)-min(len(b), 4)))
	if len(b) < 4 || uint64(len(b)-4) > 1<<32-1 {
		return nil, fmt.Errorf("%w: %s of %d bytes", ErrBadHeader, HeaderRaw, len(b))
	}
	rec = append(rec, b...)
	r, n, err := protocol.ParseRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadHeader, HeaderRaw, err)
	}
	if n != len(rec) || len(r.Body) != 0 {
		return nil, fmt.Errorf("%w: %s has %d bytes after the headers", ErrBadHeader, HeaderRaw, len(r.Body))
	}
	return r.Headers, nil
}

// ParseMark reads a Mark from a target message's headers; get returns a
// header's value and whether it is present. ok is false when the message
// carries no HeaderEventID (it was not written by the bridge).
func ParseMark(get func(key string) (string, bool)) (mark Mark, ok bool, err error) {
	ev, ok := get(HeaderEventID)
	if !ok {
		return Mark{}, false, nil
	}
	if mark.EventID, err = parsePositive(HeaderEventID, ev); err != nil {
		return Mark{}, true, err
	}
	blk, _ := get(HeaderBlock)
	first, crc, found := strings.Cut(blk, "-")
	if !found || len(crc) != 8 {
		return Mark{}, true, fmt.Errorf("%w: %s %q", ErrBadHeader, HeaderBlock, blk)
	}
	if mark.BlockFirst, err = parsePositive(HeaderBlock, first); err != nil {
		return Mark{}, true, err
	}
	c, err := strconv.ParseUint(crc, 16, 32)
	if err != nil {
		return Mark{}, true, fmt.Errorf("%w: %s %q", ErrBadHeader, HeaderBlock, blk)
	}
	mark.BlockCRC = uint32(c)
	safe, _ := get(HeaderSafe)
	if mark.Safe, err = strconv.ParseInt(safe, 10, 64); err != nil || mark.Safe < 0 {
		return Mark{}, true, fmt.Errorf("%w: %s %q", ErrBadHeader, HeaderSafe, safe)
	}
	if mark.BlockFirst > mark.EventID || mark.Safe >= mark.BlockFirst {
		return Mark{}, true, fmt.Errorf("%w: eventId %d, block %d, safe %d are out of order",
			ErrBadHeader, mark.EventID, mark.BlockFirst, mark.Safe)
	}
	return mark, true, nil
}

func parsePositive(key, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: %s %q", ErrBadHeader, key, v)
	}
	return n, nil
}

// natsKeyOK reports whether k can be a NATS header name unchanged.
func natsKeyOK(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return true
}

// natsValueOK reports whether v survives a NATS header unchanged: printable
// ASCII without surrounding blanks (the header parser trims them).
func natsValueOK(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' || c >= 0x7f {
			return false
		}
	}
	return v == strings.TrimSpace(v)
}

// mapHeaders reports whether headers can be set one by one on the target
// (ok), or must travel in HeaderRaw. natsRules adds NATS's limits.
func mapHeaders(headers []protocol.KV, natsRules bool) bool {
	for _, h := range headers {
		if isReserved(h.Key) {
			return false
		}
		if natsRules && (!natsKeyOK(h.Key) || !natsValueOK(h.Value)) {
			return false
		}
	}
	return true
}
