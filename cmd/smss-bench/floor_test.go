package main

import (
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/smssmq/smss/protocol"
)

// startFloor serves a floor server on a free port for the test's duration.
func startFloor(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := newFloor(ln)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fl.serve()
	}()
	t.Cleanup(func() {
		fl.close()
		<-done
	})
	return ln.Addr().String()
}

// TestFloorE2E runs the e2e workload against the floor server: every
// message must arrive with its stamp, also when one publish carries more
// records than one frame may hold (255).
func TestFloorE2E(t *testing.T) {
	addr := startFloor(t)
	pid := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		records, count int
	}{
		{1, 200},
		{300, 1200},
	} {
		t.Run(strconv.Itoa(tc.records), func(t *testing.T) {
			var r Result
			benchJSON(t, &r, "e2e", "--addr", addr, "--pid", pid, "--topic", "floor"+strconv.Itoa(tc.records),
				"--records", strconv.Itoa(tc.records), "--rate", "10000", "--count", strconv.Itoa(tc.count))
			if r.Messages != int64(tc.count) || r.Latency == nil || r.Latency.Count != uint64(tc.count) {
				t.Fatalf("%d messages, latency %+v; want %d", r.Messages, r.Latency, tc.count)
			}
		})
	}
}

// TestFloorRefuses answers what the floor server does not implement with an
// error reply, not silence or a dropped connection.
func TestFloorRefuses(t *testing.T) {
	c, err := dialSmss(startFloor(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	create, _ := protocol.AppendCreate(nil, []byte("t"), nil, 0)
	del, _ := protocol.AppendDelete(nil, []byte("t"), nil)
	for _, step := range []struct {
		name    string
		req     []byte
		refused bool
	}{
		{"delete", del, true},
		{"create", create, false}, // the connection is still usable
		{"delete again", del, true},
	} {
		if err := c.roundTrip(step.req); (err != nil) != step.refused {
			t.Fatalf("%s: %v", step.name, err)
		}
	}
}
