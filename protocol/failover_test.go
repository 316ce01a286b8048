package protocol

import (
	"bytes"
	"strings"
	"testing"
)

// The failover requests are header-only (plus topic and traceId): exact
// bytes, and a reader that consumes them exactly so the next request is
// read intact.
func TestFailoverRequests(t *testing.T) {
	hdr := func(cmd byte, topicLen, traceLen int) []byte {
		b := make([]byte, HeaderSize)
		b[0], b[1], b[19] = cmd, byte(topicLen), byte(traceLen)
		return b
	}
	for _, tc := range []struct {
		name  string
		req   []byte
		want  []byte
		cmd   Command
		topic string
		trace string
	}{
		{"status", must(AppendStatus(nil, nil)), hdr(34, 0, 0), CmdStatus, "", ""},
		{"status with trace", must(AppendStatus(nil, []byte("t1"))), append(hdr(34, 0, 2), "t1"...), CmdStatus, "", "t1"},
		{"promote", must(AppendPromote(nil, nil)), hdr(35, 0, 0), CmdPromote, "", ""},
		{"follow", must(AppendFollow(nil, "h:1", nil)), append(hdr(36, 3, 0), "h:1"...), CmdFollow, "h:1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Equal(tc.req, tc.want) {
				t.Fatalf("encoded % x, want % x", tc.req, tc.want)
			}
			stream := append(bytes.Clone(tc.req), must(AppendAlive(nil, nil))...)
			rr := NewRequestReader(bytes.NewReader(stream), Limits{})
			var req Request
			if err := rr.Read(&req); err != nil {
				t.Fatal(err)
			}
			if req.Header.Cmd != tc.cmd || string(req.Topic) != tc.topic || string(req.TraceID) != tc.trace {
				t.Fatalf("decoded %v %q %q", req.Header.Cmd, req.Topic, req.TraceID)
			}
			if err := rr.Read(&req); err != nil || req.Header.Cmd != CmdAlive {
				t.Fatalf("next request: %v %v", req.Header.Cmd, err)
			}
			if name, _, _ := strings.Cut(tc.name, " "); !tc.cmd.Acceptable() || tc.cmd.String() != name {
				t.Fatalf("command %d: Acceptable %v, String %q", tc.cmd, tc.cmd.Acceptable(), tc.cmd.String())
			}
		})
	}
}
