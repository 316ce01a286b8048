package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/smssmq/smss/protocol"
)

// startFloor serves a floor server on a free port for the test's duration;
// with w, publishes go through its writer goroutine into w.
func startFloor(t *testing.T, w io.Writer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := newFloor(ln)
	if w != nil {
		fl.startWriter(w)
	}
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

// TestFloorE2E runs the e2e workload against the floor server, with and
// without its writer: every message must arrive with its stamp, also when
// one publish carries more records than one frame may hold (255), and the
// writer must have written every publish twice.
func TestFloorE2E(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for _, withWriter := range []bool{false, true} {
		var file bytes.Buffer // read only after the server has stopped
		var w io.Writer
		if withWriter {
			w = &file
		}
		name := "direct"
		if withWriter {
			name = "writer"
		}
		t.Run(name, func(t *testing.T) {
			var total int64
			t.Run("servers", func(t *testing.T) {
				addr := startFloor(t, w)
				for _, tc := range []struct{ records, count int }{{1, 200}, {300, 1200}} {
					var r Result
					benchJSON(t, &r, "e2e", "--addr", addr, "--pid", pid, "--topic", "floor"+strconv.Itoa(tc.records),
						"--records", strconv.Itoa(tc.records), "--rate", "10000", "--count", strconv.Itoa(tc.count))
					if r.Messages != int64(tc.count) || r.Latency == nil || r.Latency.Count != uint64(tc.count) {
						t.Fatalf("%d records per publish: %d messages, latency %+v; want %d", tc.records, r.Messages, r.Latency, tc.count)
					}
					total += r.Messages
				}
			})
			// Each record is the 8-byte prefix and a 200-byte body.
			if want := 2 * total * (protocol.RecordPrefixSize + 200); withWriter && int64(file.Len()) != want {
				t.Fatalf("writer wrote %d bytes, want %d", file.Len(), want)
			}
		})
	}
}

// TestFloorRefuses answers what the floor server does not implement with an
// error reply, not silence or a dropped connection.
func TestFloorRefuses(t *testing.T) {
	c, err := dialSmss(startFloor(t, nil))
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
