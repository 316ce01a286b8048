package topicblock

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/smssmq/smss/codec"
	"github.com/smssmq/smss/internal/textline"
	"github.com/smssmq/smss/protocol"
)

const (
	// MaxLineLen bounds the command line; seven int64 fields need at most
	// 140 bytes, so a longer line is corruption.
	MaxLineLen = 1024
	// MaxPayloadSize is the largest payloadSize field: a record of the
	// 8-byte prefix plus a uint32 contentSize, plus '\n'.
	MaxPayloadSize = protocol.RecordPrefixSize + (1<<32 - 1) + 1
	// minPayloadSize: a record holds at least one byte after its prefix.
	minPayloadSize = protocol.RecordPrefixSize + 2

	// The shortest possible line: "0\t1\t0\t10\t0\t0\t0\n".
	minLineLen = 15
	numFields  = 7
)

// Block is one message in a topic file.
type Block struct {
	Ts, EventID, SaveTime int64
	Index                 int   // indexOfBatch 0..K-1
	SrcFileID             int64 // binlog file id of the source block
	SrcPos                int64 // start offset of the source block in that binlog file
	Record                []byte
}

// errIncomplete reports that the buffer holds a strict prefix of what could
// be a valid block: more bytes are needed. At the end of a file it means a
// torn write. Callers branch on codec.ErrIncomplete, which it is.
var errIncomplete = codec.Incomplete("topic")

// CorruptError reports bytes that can never be (the start of) a valid block.
type CorruptError struct {
	Reason string
}

func (e *CorruptError) Error() string { return "corrupt topic block: " + e.Reason }

func corruptf(format string, args ...any) *CorruptError {
	return &CorruptError{Reason: fmt.Sprintf(format, args...)}
}

// corrupt wraps a textline reason, which is all textline ever returns.
func corrupt(err error) *CorruptError {
	return &CorruptError{Reason: err.Error()}
}

// EncodedLen returns the number of bytes AppendBlock appends for b.
func EncodedLen(b *Block) int {
	return 4 + lineLen(b) + len(b.Record) + 1
}

func lineLen(b *Block) int {
	return textline.DecimalLen(b.Ts) + textline.DecimalLen(b.EventID) + textline.DecimalLen(b.SaveTime) +
		textline.DecimalLen(int64(len(b.Record))+1) + textline.DecimalLen(int64(b.Index)) +
		textline.DecimalLen(b.SrcFileID) + textline.DecimalLen(b.SrcPos) + numFields
}

// AppendBlock appends the encoding of b to dst. It does not validate b: the
// caller supplies non-negative numbers and one valid record.
func AppendBlock(dst []byte, b *Block) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = strconv.AppendInt(dst, b.Ts, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, b.EventID, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, b.SaveTime, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, int64(len(b.Record))+1, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, int64(b.Index), 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, b.SrcFileID, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, b.SrcPos, 10)
	dst = append(dst, '\n')
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	dst = append(dst, b.Record...)
	return append(dst, '\n')
}

var fieldNames = [numFields]string{"ts", "eventId", "saveTime", "payloadSize", "indexOfBatch", "srcFileId", "srcPos"}

// DecodeBlock decodes the block at the start of buf and returns it with its
// total encoded length n. Record aliases buf. The error is
// codec.ErrIncomplete (errors.Is) when buf ends inside a block whose
// present bytes are all plausible, and a *CorruptError when they are not.
func DecodeBlock(buf []byte) (Block, int, error) {
	if b, n, ok := decodeFast(buf); ok {
		return b, n, nil
	}
	return decodeCareful(buf)
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
	var f [numFields][]byte
	nf, err := textline.Split(buf[4:min(len(buf), lineEnd)], int(ll), f[:])
	if err != nil {
		return Block{}, 0, corrupt(err)
	}
	partial := len(buf) < lineEnd
	var v [numFields]int64
	for i := range nf {
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
	b := Block{Ts: v[0], EventID: v[1], SaveTime: v[2], Index: int(v[4]), SrcFileID: v[5], SrcPos: v[6]}
	payloadSize := v[3]
	recLen := payloadSize - 1
	total := int64(lineEnd) + payloadSize
	rec := buf[lineEnd:min(int64(len(buf)), total)]
	if len(rec) >= 4 {
		// The record's own length must agree with payloadSize (§1.4, §5.6);
		// checked before completeness so a garbage tail reads as corrupt.
		if n := int64(binary.LittleEndian.Uint32(rec)); n == 0 || n+protocol.RecordPrefixSize != recLen {
			return Block{}, 0, corruptf("record contentSize %d does not match payloadSize %d", n, payloadSize)
		}
	}
	if int64(len(buf)) < total {
		return Block{}, 0, errIncomplete
	}
	if rec[recLen] != '\n' {
		return Block{}, 0, corruptf("payload does not end with a newline")
	}
	b.Record = rec[:recLen]
	return b, int(total), nil
}

// checkField applies the rules that concern one field alone, so that they
// also fire on the complete fields of a torn line.
func checkField(i int, v int64) error {
	switch i {
	case 1:
		if v < 1 {
			return corruptf("eventId %d is not positive", v)
		}
	case 3:
		if v < minPayloadSize || v > MaxPayloadSize {
			return corruptf("payloadSize %d outside %d..%d", v, minPayloadSize, int64(MaxPayloadSize))
		}
	case 4:
		if v > math.MaxInt32 {
			return corruptf("indexOfBatch %d too large", v)
		}
	}
	return nil
}

// Delivery extracts what a subscription frame needs from a block that
// DecodeBlock has already accepted: the ts field and the record. It does
// not validate again (the segment reader decoded the block to find it), so
// the read path parses each block once. ok is false if the bytes do not
// even have the block's shape, which can only mean a caller bug.
func Delivery(block []byte) (ts int64, record []byte, ok bool) {
	if len(block) < 4 {
		return 0, nil, false
	}
	lineLen := int(binary.LittleEndian.Uint32(block))
	if lineLen < 2 || 4+lineLen >= len(block) {
		return 0, nil, false
	}
	for _, c := range block[4 : 4+lineLen] {
		if c == '\t' {
			break
		}
		if c < '0' || c > '9' {
			return 0, nil, false
		}
		ts = ts*10 + int64(c-'0')
	}
	return ts, block[4+lineLen : len(block)-1], true
}
