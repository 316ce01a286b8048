package main

import (
	"strings"
	"testing"
)

func TestQueueUsage(t *testing.T) {
	for _, args := range [][]string{{"queue", "--help"}, {"queue", "create", "--help"}, {"queue", "info", "-h"},
		{"queue", "list", "--help"}, {"queue", "delete", "--help"}, {"work", "--help"}} {
		r := ctl(t, "127.0.0.1:1", "", args...)
		r.expect(t, 0, "usage: smssctl")
		if n := strings.Count(r.stdout, "usage: smssctl"); n != 1 {
			t.Errorf("%v: usage printed %d times", args, n)
		}
	}
	// Mistakes are usage errors found before any connection (the address
	// is closed: exit 2, not 1).
	for _, tc := range []struct {
		args []string
		has  string
	}{
		{[]string{"queue"}, "usage: smssctl queue"},
		{[]string{"queue", "bogus"}, "unknown queue action"},
		{[]string{"queue", "create", "t"}, "missing TOPIC GROUP"},
		{[]string{"queue", "create", "t", "g", "x"}, "unexpected argument"},
		{[]string{"queue", "create", "t", "a b"}, "only letters"},
		{[]string{"queue", "create", "t", "g", "--ack-wait", "10ms"}, "ackWaitMs"},
		{[]string{"queue", "create", "t", "g", "--ack-wait", "soon"}, "invalid duration"},
		{[]string{"queue", "create", "t", "g", "--backoff", "1s,x"}, "--backoff"},
		{[]string{"queue", "create", "t", "g", "--from", "yesterday"}, "from"},
		{[]string{"queue", "create", "t", "g", "--max-deliver", "-1"}, "maxDeliver"},
		{[]string{"queue", "create", "t", "g", "--max-in-flight", "1000000"}, "maxInFlight"},
		{[]string{"queue", "info", "t"}, "missing TOPIC GROUP"},
		{[]string{"queue", "list", "a", "b"}, "unexpected argument"},
		{[]string{"queue", "delete", "t"}, "missing TOPIC GROUP"},
		{[]string{"work", "t"}, "missing TOPIC GROUP"},
		{[]string{"work", "t", "g", "--count", "-1"}, "--count"},
		{[]string{"work", "t", "g", "--consumer", "a b"}, "consumer name"},
	} {
		r := ctl(t, "127.0.0.1:1", "", tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.has) {
			t.Errorf("%v: exit %d, stderr %q; want 2 with %q", tc.args, r.code, r.stderr, tc.has)
		}
	}
}

// A work that never connected fails fast with the reason.
func TestWorkNothingListening(t *testing.T) {
	dead := closedAddr(t)
	r := ctl(t, dead, "", "work", "t", "g")
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("exit %d, stderr %s", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "acked") {
		t.Errorf("a summary without a stream:\n%s", r.stderr)
	}
	jsonError(t, ctl(t, dead, "", "--json", "work", "t", "g"))
}
