package binlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/smssmq/smss/codec"
	"github.com/smssmq/smss/internal/textline"
	"github.com/smssmq/smss/protocol"
)

// Command codes that may appear in field 2 of a binlog command line (§5.4).
const (
	CmdPub        uint8 = 1
	CmdCreate     uint8 = 2
	CmdDelete     uint8 = 3
	CmdDelay      uint8 = 16
	CmdDelayApply uint8 = 101
)

const (
	// MaxLineLen bounds the command line. Topic names are at most 128
	// bytes, so a real line is far shorter; a longer one is corruption.
	MaxLineLen = 1024
	// MaxPayloadLen is the largest payloadLen field any master can write:
	// a delay payload of 16 bytes plus a uint32-sized record set, plus '\n'.
	// A larger one is corruption, so a reader never sizes a buffer from it.
	MaxPayloadLen = DelayPrefixLen + (1<<32 - 1) + 1

	// The shortest possible line: "0\t1\t1\t0\t\t0\n".
	minLineLen = 11
	numFields  = 6
	// DelayPrefixLen is the trigger time and delay eventId that precede the
	// records in delay and delay-apply payloads.
	DelayPrefixLen = 16
	// createPayloadLen is the payloadLen field of a create: expireAt + '\n'.
	createPayloadLen = 9
	// minRecordsPayloadLen: a record set is more than 8 bytes (§1.4), + '\n'.
	minRecordsPayloadLen = protocol.RecordPrefixSize + 2
)

// Block is one binlog record. Payload excludes the trailing '\n' that the
// format appends.
type Block struct {
	WriteTime int64
	Cmd       uint8 // CmdPub, CmdCreate, CmdDelete, CmdDelay or CmdDelayApply
	EventID   int64 // eventId of the command / first message
	Timestamp int64
	Topic     []byte
	Payload   []byte // nil/empty => payloadLen field 0 and no trailing '\n'
}

// errIncomplete reports that the buffer holds a strict prefix of what could
// be a valid block: more bytes are needed. At the end of a file it means a
// torn write. Callers branch on codec.ErrIncomplete, which it is.
var errIncomplete = codec.Incomplete("binlog")

// ErrBlockOrder is wrapped when a block does not follow the last eventId of
// the log it is appended to (a slave's broker refuses such a replicated
// block: applying it would reorder or duplicate history). It lives with the
// block format so that replication can tell this refusal apart without
// importing the broker.
var ErrBlockOrder = errors.New("replicated block out of order")

// CorruptError reports bytes that can never be (the start of) a valid block.
type CorruptError struct {
	Reason string
}

func (e *CorruptError) Error() string { return "corrupt binlog block: " + e.Reason }

func corruptf(format string, args ...any) *CorruptError {
	return &CorruptError{Reason: fmt.Sprintf(format, args...)}
}

// corrupt wraps a textline reason, which is all textline ever returns.
func corrupt(err error) *CorruptError {
	return &CorruptError{Reason: err.Error()}
}

// EncodedLen returns the number of bytes AppendBlock appends for b.
func EncodedLen(b *Block) int {
	n := lineLen(b)
	if len(b.Payload) > 0 {
		n += len(b.Payload) + 1
	}
	return 4 + n
}

func lineLen(b *Block) int {
	return textline.DecimalLen(b.WriteTime) + textline.DecimalLen(int64(b.Cmd)) + textline.DecimalLen(b.EventID) +
		textline.DecimalLen(b.Timestamp) + len(b.Topic) + textline.DecimalLen(payloadLenField(b)) + numFields
}

func payloadLenField(b *Block) int64 {
	if len(b.Payload) == 0 {
		return 0
	}
	return int64(len(b.Payload)) + 1
}

// AppendBlock appends the encoding of b to dst. It does not validate b: the
// caller supplies non-negative numbers and a topic without '\t' or '\n', as
// only such blocks decode again.
func AppendBlock(dst []byte, b *Block) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = strconv.AppendInt(dst, b.WriteTime, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendUint(dst, uint64(b.Cmd), 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, b.EventID, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, b.Timestamp, 10)
	dst = append(dst, '\t')
	dst = append(dst, b.Topic...)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, payloadLenField(b), 10)
	dst = append(dst, '\n')
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	if len(b.Payload) > 0 {
		dst = append(dst, b.Payload...)
		dst = append(dst, '\n')
	}
	return dst
}

// DecodeBlock decodes the block at the start of buf and returns it with its
// total encoded length n. Topic and Payload alias buf. The error is
// codec.ErrIncomplete (errors.Is) when buf ends inside a block whose
// present bytes are all plausible, and a *CorruptError when they are not.
func DecodeBlock(buf []byte) (Block, int, error) {
	if b, n, ok := decodeFast(buf); ok {
		return b, n, nil
	}
	return decodeCareful(buf)
}

// DecodeSpan decodes the block at the start of buf like DecodeBlock and
// also returns the eventId of its last message (Block.LastEventID), walking
// its records once instead of twice.
func DecodeSpan(buf []byte) (b Block, last int64, n int, err error) {
	if b, n, k, ok := decodeFastCount(buf); ok {
		return b, b.EventID + int64(k) - 1, n, nil
	}
	if b, n, err = decodeCareful(buf); err != nil {
		return Block{}, 0, 0, err
	}
	if last, err = b.LastEventID(); err != nil {
		return Block{}, 0, 0, err
	}
	return b, last, n, nil
}

// decodeCareful is DecodeBlock for any input: it tells a torn block from a
// corrupt one and names the reason. decodeFast accepts a subset of what it
// accepts, with the same results.
func decodeCareful(buf []byte) (Block, int, error) {
	if len(buf) < 4 {
		return Block{}, 0, errIncomplete
	}
	ll := binary.LittleEndian.Uint32(buf)
	if ll < minLineLen || ll > MaxLineLen {
		return Block{}, 0, corruptf("command line length %d outside %d..%d", ll, minLineLen, MaxLineLen)
	}
	lineEnd := 4 + int(ll)
	line := buf[4:min(len(buf), lineEnd)]
	var f [numFields][]byte
	nf, err := textline.Split(line, int(ll), f[:])
	if err != nil {
		return Block{}, 0, corrupt(err)
	}
	partial := len(buf) < lineEnd
	var v [numFields]int64
	for i := range nf {
		if i == 4 {
			continue // topic: any bytes without '\t' and '\n'
		}
		whole := !partial || i < nf-1
		if v[i], err = textline.ParseField(fieldNames[i], f[i], !whole); err != nil {
			return Block{}, 0, corrupt(err)
		}
		if whole {
			if err := checkField(i, v[i]); err != nil {
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
	if err := checkPayloadLen(b.Cmd, payloadLen); err != nil {
		return Block{}, 0, err
	}
	if payloadLen == 0 {
		return b, lineEnd, nil
	}
	total := int64(lineEnd) + payloadLen
	if int64(len(buf)) < total {
		if err := checkPayloadPrefix(&b, buf[lineEnd:], payloadLen-1); err != nil {
			return Block{}, 0, err
		}
		return Block{}, 0, errIncomplete
	}
	payload := buf[lineEnd:total]
	if payload[len(payload)-1] != '\n' {
		return Block{}, 0, corruptf("payload does not end with a newline")
	}
	b.Payload = payload[:len(payload)-1]
	if err := checkPayload(&b); err != nil {
		return Block{}, 0, err
	}
	return b, int(total), nil
}

var fieldNames = [numFields]string{"writeTime", "cmd", "eventId", "timestamp", "topic", "payloadLen"}

// checkField applies the rules that concern one numeric field alone, so that
// they also fire on the complete fields of a torn line.
func checkField(i int, v int64) error {
	switch i {
	case 1:
		switch v {
		case int64(CmdPub), int64(CmdCreate), int64(CmdDelete), int64(CmdDelay), int64(CmdDelayApply):
		default:
			return corruptf("unknown cmd %d", v)
		}
	case 2:
		if v < 1 {
			return corruptf("eventId %d is not positive", v)
		}
	case 5:
		if v > MaxPayloadLen {
			return corruptf("payloadLen %d exceeds %d", v, int64(MaxPayloadLen))
		}
	}
	return nil
}

// checkPayloadLen checks the payloadLen field against the command (§5.4).
func checkPayloadLen(cmd uint8, payloadLen int64) error {
	switch cmd {
	case CmdPub:
		if payloadLen < minRecordsPayloadLen {
			return corruptf("pub payloadLen %d, want at least %d", payloadLen, minRecordsPayloadLen)
		}
	case CmdCreate:
		if payloadLen != createPayloadLen {
			return corruptf("create payloadLen %d, want %d", payloadLen, createPayloadLen)
		}
	case CmdDelete:
		if payloadLen != 0 {
			return corruptf("delete payloadLen %d, want 0", payloadLen)
		}
	case CmdDelay, CmdDelayApply:
		if payloadLen < DelayPrefixLen+minRecordsPayloadLen {
			return corruptf("cmd %d payloadLen %d, want at least %d", cmd, payloadLen, DelayPrefixLen+minRecordsPayloadLen)
		}
	}
	return nil
}

// checkPayload validates a complete payload (without its '\n') for b.Cmd.
func checkPayload(b *Block) error {
	var records []byte
	switch b.Cmd {
	case CmdPub:
		records = b.Payload
	case CmdDelay, CmdDelayApply:
		if b.Cmd == CmdDelay {
			if err := checkDelayID(b.EventID, b.Payload); err != nil {
				return err
			}
		}
		records = b.Payload[DelayPrefixLen:]
	default:
		return nil // create: 8 opaque bytes, length already checked
	}
	if _, err := protocol.CountRecords(records, 0); err != nil {
		return corruptf("cmd %d payload: %v", b.Cmd, err)
	}
	return nil
}

// checkDelayID enforces §5.4: a delay payload repeats the command's eventId.
func checkDelayID(eventID int64, payload []byte) error {
	if id := int64(binary.LittleEndian.Uint64(payload[8:DelayPrefixLen])); id != eventID {
		return corruptf("delay payload eventId %d differs from the command's %d", id, eventID)
	}
	return nil
}

// checkPayloadPrefix looks for proof of corruption in the present part of a
// payload whose record bytes (without '\n') are size bytes long.
func checkPayloadPrefix(b *Block, present []byte, size int64) error {
	off := int64(0)
	switch b.Cmd {
	case CmdPub:
	case CmdDelay, CmdDelayApply:
		if b.Cmd == CmdDelay && len(present) >= DelayPrefixLen {
			if err := checkDelayID(b.EventID, present); err != nil {
				return err
			}
		}
		off = DelayPrefixLen
	default:
		return nil
	}
	return checkRecordsPrefix(present, off, size)
}

// checkRecordsPrefix walks the records that start at off in a payload of
// size bytes of which only present is in memory, applying the §1.4 rules as
// far as the present bytes allow.
func checkRecordsPrefix(present []byte, off, size int64) error {
	for off < size {
		rest := size - off
		if rest <= protocol.RecordPrefixSize {
			return corruptf("%d trailing bytes after the records", rest)
		}
		if off+4 > int64(len(present)) {
			return nil
		}
		n := int64(binary.LittleEndian.Uint32(present[off:]))
		if n == 0 {
			return corruptf("empty record at payload offset %d", off)
		}
		if n+protocol.RecordPrefixSize > rest {
			return corruptf("record at payload offset %d overruns the payload", off)
		}
		off += n + protocol.RecordPrefixSize
	}
	return nil
}

// MessageCount returns how many messages, and so eventIds, b carries (§5.4).
func (b *Block) MessageCount() (int, error) {
	switch b.Cmd {
	case CmdPub:
		return countRecords(b.Cmd, b.Payload)
	case CmdDelayApply:
		if len(b.Payload) < DelayPrefixLen {
			return 0, corruptf("delay-apply payload of %d bytes", len(b.Payload))
		}
		return countRecords(b.Cmd, b.Payload[DelayPrefixLen:])
	case CmdCreate, CmdDelete, CmdDelay:
		return 1, nil
	default:
		return 0, corruptf("unknown cmd %d", b.Cmd)
	}
}

func countRecords(cmd uint8, records []byte) (int, error) {
	n, err := protocol.CountRecords(records, 0)
	if err != nil {
		return 0, corruptf("cmd %d payload: %v", cmd, err)
	}
	return n, nil
}

// LastEventID returns the eventId of the last message in b.
func (b *Block) LastEventID() (int64, error) {
	n, err := b.MessageCount()
	if err != nil {
		return 0, err
	}
	return b.EventID + int64(n) - 1, nil
}

// CmdName names a block's command for people (logs, manifests, listings):
// pub, create, delete, delay, delay-apply, or the number of an unknown one.
func CmdName(c uint8) string {
	switch c {
	case CmdPub:
		return "pub"
	case CmdCreate:
		return "create"
	case CmdDelete:
		return "delete"
	case CmdDelay:
		return "delay"
	case CmdDelayApply:
		return "delay-apply"
	}
	return strconv.Itoa(int(c))
}
