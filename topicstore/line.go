package topicstore

// This file is a copy of binlog/line.go (both formats share the command-line
// rules); keep the two in step.

import (
	"fmt"
	"math"
)

// maxDigits is the length of math.MaxInt64 in decimal.
const maxDigits = 19

// splitLine splits the command line (or the part of it present in the
// buffer) into tab-separated fields. lineLen is the length announced by the
// block's length prefix; when len(line) < lineLen only a prefix is present and
// the last returned field may be partial. Proof of corruption in the present
// bytes is reported even for a partial line, so a garbage tail is not
// mistaken for a torn one.
func splitLine(line []byte, lineLen int, fields *[numFields][]byte) (int, error) {
	complete := len(line) == lineLen
	body := line
	if complete {
		if line[lineLen-1] != '\n' {
			return 0, corruptf("command line does not end with a newline")
		}
		body = line[:lineLen-1]
	}
	n, start := 0, 0
	for i, c := range body {
		switch c {
		case '\n':
			return 0, corruptf("newline at offset %d inside the command line", i)
		case '\t':
			if n == numFields-1 {
				return 0, corruptf("more than %d fields in the command line", numFields)
			}
			fields[n] = body[start:i]
			n++
			start = i + 1
		}
	}
	fields[n] = body[start:]
	n++
	if complete && n != numFields {
		return 0, corruptf("%d fields in the command line, want %d", n, numFields)
	}
	return n, nil
}

// parseField parses a canonical non-negative decimal: digits only, no sign,
// no leading zero except "0" itself, no overflow. Canonical form is what makes
// decode followed by encode byte-identical. A partial field (the last bytes
// present of a torn line) is only checked for what could never become valid.
func parseField(name string, s []byte, partial bool) (int64, error) {
	if len(s) == 0 {
		if partial {
			return 0, nil
		}
		return 0, corruptf("empty %s field", name)
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, corruptf("%s field %q has a leading zero", name, s)
	}
	if len(s) > maxDigits {
		return 0, corruptf("%s field %.24q... is too long", name, s)
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, corruptf("%s field %q is not a decimal number", name, s)
		}
		v = v*10 + uint64(c-'0')
	}
	if v > math.MaxInt64 {
		return 0, corruptf("%s field %q overflows int64", name, s)
	}
	return int64(v), nil
}

// decimalLen returns the number of bytes strconv.AppendInt writes for v.
func decimalLen(v int64) int {
	n := 1
	u := uint64(v)
	if v < 0 {
		n++
		u = -u
	}
	for u >= 10 {
		u /= 10
		n++
	}
	return n
}

func corruptf(format string, args ...any) *CorruptError {
	return &CorruptError{Reason: fmt.Sprintf(format, args...)}
}
