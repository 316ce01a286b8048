package topicblock

// This file freezes DecodeBlock, splitLine and parseField as they were
// before the fast path and internal/textline, verbatim but for the ref
// prefix. FuzzDecodeEquivalence compares DecodeBlock against it, so it must
// not be edited to follow later changes: it is the specification of what
// DecodeBlock accepts and of every value and error it returns.

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/smssmq/smss/protocol"
)

// The format's limits as the reference saw them, so that a change to the
// package's constants shows up as a difference.
const (
	refMaxLineLen     = 1024
	refMaxPayloadSize = protocol.RecordPrefixSize + (1<<32 - 1) + 1
	refMinPayloadSize = protocol.RecordPrefixSize + 2
	refMinLineLen     = 15
	refNumFields      = 7
)

var refFieldNames = [refNumFields]string{"ts", "eventId", "saveTime", "payloadSize", "indexOfBatch", "srcFileId", "srcPos"}

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
	var f [refNumFields][]byte
	nf, err := refSplitLine(buf[4:min(len(buf), lineEnd)], int(ll), &f)
	if err != nil {
		return Block{}, 0, err
	}
	partial := len(buf) < lineEnd
	var v [refNumFields]int64
	for i := range nf {
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
	b := Block{Ts: v[0], EventID: v[1], SaveTime: v[2], Index: int(v[4]), SrcFileID: v[5], SrcPos: v[6]}
	payloadSize := v[3]
	recLen := payloadSize - 1
	total := int64(lineEnd) + payloadSize
	rec := buf[lineEnd:min(int64(len(buf)), total)]
	if len(rec) >= 4 {
		// The record's own length must agree with payloadSize (§1.4, §5.6);
		// checked before completeness so a garbage tail reads as corrupt.
		if n := int64(binary.LittleEndian.Uint32(rec)); n == 0 || n+protocol.RecordPrefixSize != recLen {
			return Block{}, 0, refCorruptf("record contentSize %d does not match payloadSize %d", n, payloadSize)
		}
	}
	if int64(len(buf)) < total {
		return Block{}, 0, errIncomplete
	}
	if rec[recLen] != '\n' {
		return Block{}, 0, refCorruptf("payload does not end with a newline")
	}
	b.Record = rec[:recLen]
	return b, int(total), nil
}

// checkField applies the rules that concern one field alone, so that they
// also fire on the complete fields of a torn line.
func refCheckField(i int, v int64) error {
	switch i {
	case 1:
		if v < 1 {
			return refCorruptf("eventId %d is not positive", v)
		}
	case 3:
		if v < refMinPayloadSize || v > refMaxPayloadSize {
			return refCorruptf("payloadSize %d outside %d..%d", v, refMinPayloadSize, int64(refMaxPayloadSize))
		}
	case 4:
		if v > math.MaxInt32 {
			return refCorruptf("indexOfBatch %d too large", v)
		}
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
