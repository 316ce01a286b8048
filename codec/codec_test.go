package codec

import (
	"errors"
	"fmt"
	"testing"
)

func TestIncomplete(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		is   bool
		text string
	}{
		{"the sentinel", ErrIncomplete, true, "incomplete block"},
		{"a codec's", Incomplete("binlog"), true, "incomplete binlog block"},
		{"wrapped", fmt.Errorf("segment: %w", Incomplete("topic")), true, "segment: incomplete topic block"},
		{"another error", errors.New("incomplete binlog block"), false, "incomplete binlog block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(tc.err, ErrIncomplete); got != tc.is {
				t.Errorf("errors.Is(%v, ErrIncomplete) = %v, want %v", tc.err, got, tc.is)
			}
			if tc.err.Error() != tc.text {
				t.Errorf("text %q, want %q", tc.err.Error(), tc.text)
			}
		})
	}
}
