package textline

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	cases := []struct {
		name    string
		line    string
		lineLen int // 0: len(line), a complete line
		fields  int
		want    []string
		err     string
	}{
		{"complete", "1\t22\t333\n", 0, 3, []string{"1", "22", "333"}, ""},
		{"empty fields", "\t\t\n", 0, 3, []string{"", "", ""}, ""},
		{"torn mid-field", "1\t2", 9, 3, []string{"1", "2"}, ""},
		{"torn after tab", "1\t", 9, 3, []string{"1", ""}, ""},
		{"torn empty", "", 9, 3, []string{""}, ""},
		{"no newline", "1\t2\t3\t", 0, 3, nil, "command line does not end with a newline"},
		{"newline inside", "1\n2\t3\n", 0, 3, nil, "newline at offset 1 inside the command line"},
		{"torn newline inside", "1\t\n", 9, 3, nil, "newline at offset 2 inside the command line"},
		{"too many", "1\t2\t3\t4\n", 0, 3, nil, "more than 3 fields in the command line"},
		{"torn too many", "1\t2\t3\t", 20, 3, nil, "more than 3 fields in the command line"},
		{"too few", "1\t2\n", 0, 3, nil, "2 fields in the command line, want 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ll := tc.lineLen
			if ll == 0 {
				ll = len(tc.line)
			}
			f := make([][]byte, tc.fields)
			n, err := Split([]byte(tc.line), ll, f)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				if _, isErr := err.(*Error); !isErr {
					t.Fatalf("err is %T, want *Error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, b := range f[:n] {
				got = append(got, string(b))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || n != len(tc.want) {
				t.Fatalf("fields %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseField(t *testing.T) {
	cases := []struct {
		s       string
		partial bool
		want    int64
		err     string
	}{
		{"0", false, 0, ""},
		{"7", false, 7, ""},
		{"9223372036854775807", false, math.MaxInt64, ""},
		{"", true, 0, ""},
		{"12", true, 12, ""},
		{"", false, 0, "empty f field"},
		{"01", false, 0, `f field "01" has a leading zero`},
		{"01", true, 0, `f field "01" has a leading zero`},
		{"12345678901234567890", false, 0, `f field "12345678901234567890"... is too long`},
		{"123456789012345678901234567890", false, 0, `f field "123456789012345678901234"... is too long`},
		{"1x", false, 0, `f field "1x" is not a decimal number`},
		{"-1", false, 0, `f field "-1" is not a decimal number`},
		{"9223372036854775808", false, 0, `f field "9223372036854775808" overflows int64`},
		{"9999999999999999999", true, 0, `f field "9999999999999999999" overflows int64`},
	}
	for _, tc := range cases {
		v, err := ParseField("f", []byte(tc.s), tc.partial)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("ParseField(%q, %v) err = %v, want %q", tc.s, tc.partial, err, tc.err)
			}
			continue
		}
		if err != nil || v != tc.want {
			t.Errorf("ParseField(%q, %v) = %d, %v; want %d", tc.s, tc.partial, v, err, tc.want)
		}
	}
}

func TestDecimalLen(t *testing.T) {
	for _, v := range []int64{0, 1, 9, 10, 99, 100, 123456789, math.MaxInt64, -1, -10, math.MinInt64} {
		if got, want := DecimalLen(v), len(strconv.FormatInt(v, 10)); got != want {
			t.Errorf("DecimalLen(%d) = %d, want %d", v, got, want)
		}
	}
}

func TestScan(t *testing.T) {
	cases := []struct {
		body string
		n    int
		text int
		want []int64
		lo   int
		hi   int
		ok   bool
	}{
		{"1\t22\t333", 3, -1, []int64{1, 22, 333}, 0, 0, true},
		{"0\t9223372036854775807", 2, -1, []int64{0, math.MaxInt64}, 0, 0, true},
		{"1\tab c\t3", 3, 1, []int64{1, 0, 3}, 2, 6, true},
		{"1\t\t3", 3, 1, []int64{1, 0, 3}, 2, 2, true},
		{"1\t2\tname", 3, 2, []int64{1, 2, 0}, 4, 8, true},
		{"1\t22\t333\t", 3, -1, nil, 0, 0, false},
		{"1\t22", 3, -1, nil, 0, 0, false},
		{"1\t\t3", 3, -1, nil, 0, 0, false},
		{"1\t02\t3", 3, -1, nil, 0, 0, false},
		{"1\t9223372036854775808\t3", 3, -1, nil, 0, 0, false},
		{"1\t12345678901234567890\t3", 3, -1, nil, 0, 0, false},
		{"1\t2x\t3", 3, -1, nil, 0, 0, false},
		{"1\t2\t3\n", 3, -1, nil, 0, 0, false},
		{"1\ta\nb\t3", 3, 1, nil, 0, 0, false},
		{"1\ta\tb\t3", 3, 1, nil, 0, 0, false},
	}
	for _, tc := range cases {
		vals := make([]int64, tc.n)
		lo, hi, ok := Scan([]byte(tc.body), vals, tc.text)
		if ok != tc.ok {
			t.Errorf("Scan(%q) ok = %v, want %v", tc.body, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if lo != tc.lo || hi != tc.hi {
			t.Errorf("Scan(%q) text bounds %d..%d, want %d..%d", tc.body, lo, hi, tc.lo, tc.hi)
		}
		for i := range vals {
			if vals[i] != tc.want[i] {
				t.Errorf("Scan(%q) = %v, want %v", tc.body, vals, tc.want)
				break
			}
		}
	}
}

// FuzzScan checks Scan's contract: ok exactly when Split and ParseField
// accept the same line, with the same values and text bounds.
func FuzzScan(f *testing.F) {
	f.Add([]byte("1795950274738\t123456789\t1795950274738\t201\t3\t17\t123456789"), uint8(7), int8(-1))
	f.Add([]byte("1795950274737\t2\t1\t1795950274737\torder\t9"), uint8(6), int8(4))
	f.Add([]byte("1\t02\t9223372036854775808"), uint8(3), int8(-1))
	f.Add([]byte("1\t\n\t3"), uint8(3), int8(1))
	f.Fuzz(func(t *testing.T, body []byte, nf uint8, text int8) {
		n := int(nf%8) + 1
		ti := int(text)
		if ti >= n {
			ti = -1
		}
		vals := make([]int64, n)
		lo, hi, ok := Scan(body, vals, ti)

		line := append(body[:len(body):len(body)], '\n')
		fields := make([][]byte, n)
		want := make([]int64, n)
		_, err := Split(line, len(line), fields)
		for i := 0; err == nil && i < n; i++ {
			if i != ti {
				want[i], err = ParseField("f", fields[i], false)
			}
		}
		if ok != (err == nil) {
			t.Fatalf("Scan(%q, %d, %d) ok = %v, careful path: %v", body, n, ti, ok, err)
		}
		if !ok {
			return
		}
		for i := range vals {
			if i != ti && vals[i] != want[i] {
				t.Fatalf("Scan(%q) = %v, careful path %v", body, vals, want)
			}
		}
		if ti >= 0 && string(body[lo:hi]) != string(fields[ti]) {
			t.Fatalf("Scan(%q) text %q, careful path %q", body, body[lo:hi], fields[ti])
		}
	})
}
