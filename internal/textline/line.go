package textline

import (
	"fmt"
	"math"
)

// MaxDigits is the length of math.MaxInt64 in decimal.
const MaxDigits = 19

// Error is the reason a command line is corrupt. The codecs wrap Reason into
// their own CorruptError type.
type Error struct {
	Reason string
}

func (e *Error) Error() string { return e.Reason }

func errorf(format string, args ...any) *Error {
	return &Error{Reason: fmt.Sprintf(format, args...)}
}

// Split splits the command line (or the part of it present in the buffer)
// into tab-separated fields; len(fields) is the number of fields a complete
// line has. lineLen is the length announced by the block's length prefix;
// when len(line) < lineLen only a prefix is present and the last returned
// field may be partial. Proof of corruption in the present bytes is reported
// even for a partial line, so a garbage tail is not mistaken for a torn one.
// It returns how many fields it filled in.
func Split(line []byte, lineLen int, fields [][]byte) (int, error) {
	numFields := len(fields)
	complete := len(line) == lineLen
	body := line
	if complete {
		if line[lineLen-1] != '\n' {
			return 0, errorf("command line does not end with a newline")
		}
		body = line[:lineLen-1]
	}
	n, start := 0, 0
	for i, c := range body {
		switch c {
		case '\n':
			return 0, errorf("newline at offset %d inside the command line", i)
		case '\t':
			if n == numFields-1 {
				return 0, errorf("more than %d fields in the command line", numFields)
			}
			fields[n] = body[start:i]
			n++
			start = i + 1
		}
	}
	fields[n] = body[start:]
	n++
	if complete && n != numFields {
		return 0, errorf("%d fields in the command line, want %d", n, numFields)
	}
	return n, nil
}

// ParseField parses a canonical non-negative decimal; name is the field's
// name in the reason of an error. A partial field (the last bytes present of
// a torn line) is only checked for what could never become valid.
func ParseField(name string, s []byte, partial bool) (int64, error) {
	if len(s) == 0 {
		if partial {
			return 0, nil
		}
		return 0, errorf("empty %s field", name)
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, errorf("%s field %q has a leading zero", name, s)
	}
	if len(s) > MaxDigits {
		return 0, errorf("%s field %.24q... is too long", name, s)
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errorf("%s field %q is not a decimal number", name, s)
		}
		v = v*10 + uint64(c-'0')
	}
	if v > math.MaxInt64 {
		return 0, errorf("%s field %q overflows int64", name, s)
	}
	return int64(v), nil
}

// DecimalLen returns the number of bytes strconv.AppendInt writes for v.
func DecimalLen(v int64) int {
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
