package binlog

// This file freezes DecodeBlock and its helpers, splitLine and parseField
// as they were before the fast path and internal/textline, verbatim but for
// the ref prefix (constants included). FuzzDecodeEquivalence compares
// DecodeBlock against it, so it must not be edited to follow later changes:
// it is the specification of what DecodeBlock accepts and of every value and
// error it returns.

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/smssmq/smss/protocol"
)

// The format's constants as the reference saw them.
const (
	refCmdPub        uint8 = 1
	refCmdCreate     uint8 = 2
	refCmdDelete     uint8 = 3
	refCmdDelay      uint8 = 16
	refCmdDelayApply uint8 = 101

	refMaxLineLen           = 1024
	refMaxPayloadLen        = refDelayPrefixLen + (1<<32 - 1) + 1
	refMinLineLen           = 11
	refNumFields            = 6
	refDelayPrefixLen       = 16
	refCreatePayloadLen     = 9
	refMinRecordsPayloadLen = protocol.RecordPrefixSize + 2
)

// refDecodeBlock is the former DecodeBlock.
func refDecodeBlock(buf []byte) (Block, int, error) {
	if len(buf) < 4 {
		return Block{}, 0, errIncomplete
	}
	ll := binary.LittleEndian.Uint32(buf)
	if ll < refMinLineLen || ll > refMaxLineLen {
		return Block{}, 0, refCorruptf("command line length %d outside %d..%d", ll, refMinLineLen, refMaxLineLen)
	}
	lineEnd := 4 + int(ll)
	line := buf[4:min(len(buf), lineEnd)]
	var f [refNumFields][]byte
	nf, err := refSplitLine(line, int(ll), &f)
	if err != nil {
		return Block{}, 0, err
	}
	partial := len(buf) < lineEnd
	var v [refNumFields]int64
	for i := range nf {
		if i == 4 {
			continue // topic: any bytes without '\t' and '\n'
		}
		whole := !partial || i < nf-1
		if v[i], err = refParseField(refFieldNames[i], f[i], !whole); err != nil {
			return Block{}, 0, err
		}
		if whole {
			if err := refCheckField(i, v[i]); err != nil {
				return Block{}, 0, err
			}
		}
	}
	if partial {
		return Block{}, 0, errIncomplete
	}
	b := Block{
		WriteTime: v[0],
		EventID:   v[2],
		Timestamp: v[3],
		Topic:     f[4],
	}
	b.Cmd = uint8(v[1])
	payloadLen := v[5]
	if err := refCheckPayloadLen(b.Cmd, payloadLen); err != nil {
		return Block{}, 0, err
	}
	if payloadLen == 0 {
		return b, lineEnd, nil
	}
	total := int64(lineEnd) + payloadLen
	if int64(len(buf)) < total {
		if err := refCheckPayloadPrefix(&b, buf[lineEnd:], payloadLen-1); err != nil {
			return Block{}, 0, err
		}
		return Block{}, 0, errIncomplete
	}
	payload := buf[lineEnd:total]
	if payload[len(payload)-1] != '\n' {
		return Block{}, 0, refCorruptf("payload does not end with a newline")
	}
	b.Payload = payload[:len(payload)-1]
	if err := refCheckPayload(&b); err != nil {
		return Block{}, 0, err
	}
	return b, int(total), nil
}

var refFieldNames = [refNumFields]string{"writeTime", "cmd", "eventId", "timestamp", "topic", "payloadLen"}

// refCheckField applies the rules that concern one numeric field alone, so that
// they also fire on the complete fields of a torn line.
func refCheckField(i int, v int64) error {
	switch i {
	case 1:
		switch v {
		case int64(refCmdPub), int64(refCmdCreate), int64(refCmdDelete), int64(refCmdDelay), int64(refCmdDelayApply):
		default:
			return refCorruptf("unknown cmd %d", v)
		}
	case 2:
		if v < 1 {
			return refCorruptf("eventId %d is not positive", v)
		}
	case 5:
		if v > refMaxPayloadLen {
			return refCorruptf("payloadLen %d exceeds %d", v, int64(refMaxPayloadLen))
		}
	}
	return nil
}

// refCheckPayloadLen checks the payloadLen field against the command (§5.4).
func refCheckPayloadLen(cmd uint8, payloadLen int64) error {
	switch cmd {
	case refCmdPub:
		if payloadLen < refMinRecordsPayloadLen {
			return refCorruptf("pub payloadLen %d, want at least %d", payloadLen, refMinRecordsPayloadLen)
		}
	case refCmdCreate:
		if payloadLen != refCreatePayloadLen {
			return refCorruptf("create payloadLen %d, want %d", payloadLen, refCreatePayloadLen)
		}
	case refCmdDelete:
		if payloadLen != 0 {
			return refCorruptf("delete payloadLen %d, want 0", payloadLen)
		}
	case refCmdDelay, refCmdDelayApply:
		if payloadLen < refDelayPrefixLen+refMinRecordsPayloadLen {
			return refCorruptf("cmd %d payloadLen %d, want at least %d", cmd, payloadLen, refDelayPrefixLen+refMinRecordsPayloadLen)
		}
	}
	return nil
}

// refCheckPayload validates a complete payload (without its '\n') for b.Cmd.
func refCheckPayload(b *Block) error {
	var records []byte
	switch b.Cmd {
	case refCmdPub:
		records = b.Payload
	case refCmdDelay, refCmdDelayApply:
		if b.Cmd == refCmdDelay {
			if err := refCheckDelayID(b.EventID, b.Payload); err != nil {
				return err
			}
		}
		records = b.Payload[refDelayPrefixLen:]
	default:
		return nil // create: 8 opaque bytes, length already checked
	}
	if _, err := protocol.CountRecords(records, 0); err != nil {
		return refCorruptf("cmd %d payload: %v", b.Cmd, err)
	}
	return nil
}

// refCheckDelayID enforces §5.4: a delay payload repeats the command's eventId.
func refCheckDelayID(eventID int64, payload []byte) error {
	if id := int64(binary.LittleEndian.Uint64(payload[8:refDelayPrefixLen])); id != eventID {
		return refCorruptf("delay payload eventId %d differs from the command's %d", id, eventID)
	}
	return nil
}

// refCheckPayloadPrefix looks for proof of corruption in the present part of a
// payload whose record bytes (without '\n') are size bytes long.
func refCheckPayloadPrefix(b *Block, present []byte, size int64) error {
	off := int64(0)
	switch b.Cmd {
	case refCmdPub:
	case refCmdDelay, refCmdDelayApply:
		if b.Cmd == refCmdDelay && len(present) >= refDelayPrefixLen {
			if err := refCheckDelayID(b.EventID, present); err != nil {
				return err
			}
		}
		off = refDelayPrefixLen
	default:
		return nil
	}
	return refCheckRecordsPrefix(present, off, size)
}

// refCheckRecordsPrefix walks the records that start at off in a payload of
// size bytes of which only present is in memory, applying the §1.4 rules as
// far as the present bytes allow.
func refCheckRecordsPrefix(present []byte, off, size int64) error {
	for off < size {
		rest := size - off
		if rest <= protocol.RecordPrefixSize {
			return refCorruptf("%d trailing bytes after the records", rest)
		}
		if off+4 > int64(len(present)) {
			return nil
		}
		n := int64(binary.LittleEndian.Uint32(present[off:]))
		if n == 0 {
			return refCorruptf("empty record at payload offset %d", off)
		}
		if n+protocol.RecordPrefixSize > rest {
			return refCorruptf("record at payload offset %d overruns the payload", off)
		}
		off += n + protocol.RecordPrefixSize
	}
	return nil
}

// refMaxDigits is the length of math.MaxInt64 in decimal.
const refMaxDigits = 19

// refSplitLine splits the command line (or the part of it present in the
// buffer) into tab-separated fields. lineLen is the length announced by the
// block's length prefix; when len(line) < lineLen only a prefix is present and
// the last returned field may be partial. Proof of corruption in the present
// bytes is reported even for a partial line, so a garbage tail is not
// mistaken for a torn one.
func refSplitLine(line []byte, lineLen int, fields *[refNumFields][]byte) (int, error) {
	complete := len(line) == lineLen
	body := line
	if complete {
		if line[lineLen-1] != '\n' {
			return 0, refCorruptf("command line does not end with a newline")
		}
		body = line[:lineLen-1]
	}
	n, start := 0, 0
	for i, c := range body {
		switch c {
		case '\n':
			return 0, refCorruptf("newline at offset %d inside the command line", i)
		case '\t':
			if n == refNumFields-1 {
				return 0, refCorruptf("more than %d fields in the command line", refNumFields)
			}
			fields[n] = body[start:i]
			n++
			start = i + 1
		}
	}
	fields[n] = body[start:]
	n++
	if complete && n != refNumFields {
		return 0, refCorruptf("%d fields in the command line, want %d", n, refNumFields)
	}
	return n, nil
}

// refParseField parses a canonical non-negative decimal: digits only, no sign,
// no leading zero except "0" itself, no overflow. Canonical form is what makes
// decode followed by encode byte-identical. A partial field (the last bytes
// present of a torn line) is only checked for what could never become valid.
func refParseField(name string, s []byte, partial bool) (int64, error) {
	if len(s) == 0 {
		if partial {
			return 0, nil
		}
		return 0, refCorruptf("empty %s field", name)
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, refCorruptf("%s field %q has a leading zero", name, s)
	}
	if len(s) > refMaxDigits {
		return 0, refCorruptf("%s field %.24q... is too long", name, s)
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, refCorruptf("%s field %q is not a decimal number", name, s)
		}
		v = v*10 + uint64(c-'0')
	}
	if v > math.MaxInt64 {
		return 0, refCorruptf("%s field %q overflows int64", name, s)
	}
	return int64(v), nil
}

func refCorruptf(format string, args ...any) *CorruptError {
	return &CorruptError{Reason: fmt.Sprintf(format, args...)}
}
