package main

import (
	"runtime"
	"testing"
)

// applyMaxProcs: the environment's GOMAXPROCS wins when the runtime took
// it, otherwise server.maxProcs applies, and 0 leaves the default. The
// value returned is read back from the runtime.
func TestApplyMaxProcs(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(orig) })
	other := orig + 1 // differs from what the process runs with now
	for _, tc := range []struct {
		name     string
		env      string
		key      int
		want     int
		wantFrom string
	}{
		{"key applies", "", other, other, procsFromKey},
		{"key 1", "", 1, 1, procsFromKey},
		{"key 0 keeps the default", "", 0, orig, procsFromDefault},
		{"env wins over the key", "7", other, orig, procsFromEnv},
		{"env ignored by the runtime does not win", "abc", other, other, procsFromKey},
		{"env 0 ignored by the runtime", "0", other, other, procsFromKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GOMAXPROCS(orig)
			getenv := func(k string) string {
				if k == "GOMAXPROCS" {
					return tc.env
				}
				return ""
			}
			n, from := applyMaxProcs(tc.key, getenv)
			if n != tc.want || from != tc.wantFrom {
				t.Errorf("applyMaxProcs(%d, GOMAXPROCS=%q) = %d, %q; want %d, %q", tc.key, tc.env, n, from, tc.want, tc.wantFrom)
			}
			if got := runtime.GOMAXPROCS(0); got != tc.want {
				t.Errorf("runtime GOMAXPROCS = %d after the call, want %d", got, tc.want)
			}
		})
	}
}
