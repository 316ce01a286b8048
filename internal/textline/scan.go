package textline

import "math"

// Scan is the fast path for a complete command line. body is the line
// without its trailing '\n' and len(vals) (at least 1) its number of fields:
// field text (none if text < 0) is a text field and every other one a
// canonical decimal. On success Scan stores the decimals in vals (leaving
// vals[text] alone) and returns the bounds of the text field in body.
//
// ok is true exactly when Split on body+"\n" and ParseField on every numeric
// field would both succeed, with the same values. When ok is false vals may
// be partly written; the caller takes the careful path, which names the
// reason.
//
// It is one pass with no per-field calls because it runs for every block a
// subscription or replication stream reads. (Eight-bytes-at-a-time digit
// parsing was measured slower here: each run's length feeds the next load,
// which serialises the loop, while this loop's branches predict well.)
func Scan(body []byte, vals []int64, text int) (lo, hi int, ok bool) {
	p := 0
	last := len(vals) - 1
	for i := range vals {
		if i == text {
			lo = p
			for p < len(body) && body[p] != '\t' {
				if body[p] == '\n' {
					return 0, 0, false
				}
				p++
			}
			hi = p
		} else {
			start := p
			var v uint64
			for p < len(body) {
				d := body[p] - '0'
				if d > 9 {
					break
				}
				// Past MaxDigits digits v may wrap; such a field is
				// rejected below, and 19 digits cannot wrap a uint64.
				v = v*10 + uint64(d)
				p++
			}
			n := p - start
			if n == 0 || n > MaxDigits || (n > 1 && body[start] == '0') || v > math.MaxInt64 {
				return 0, 0, false
			}
			vals[i] = int64(v)
		}
		if i < last {
			if p >= len(body) || body[p] != '\t' {
				return 0, 0, false
			}
			p++
		}
	}
	if p != len(body) {
		return 0, 0, false
	}
	return lo, hi, true
}
