package server

import (
	"encoding/json"
	"testing"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/protocol"
)

// LastEventID lets status report the fake's position as the broker's.
func (b *fakeBackend) LastEventID() int64 { return b.next() - 1 }

// fakeControl is a Control reporting fixed values.
type fakeControl struct{ st NodeStatus }

func (f *fakeControl) Status() NodeStatus { return f.st }

func statusReq(trace string) []byte { return enc(protocol.AppendStatus(nil, []byte(trace))) }

func TestStatusCommand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slave bool
		ctl   Control
		want  string
	}{
		{"master from the backend", false, nil, `{"role":"master","epoch":0,"lastEventId":2}`},
		{"slave from the backend", true, nil, `{"role":"slave","epoch":0,"lastEventId":2}`},
		{"slave from the control", true, &fakeControl{NodeStatus{Role: RoleSlave, Epoch: 7, LastEventID: 41, Master: "10.0.0.1:6301"}},
			`{"role":"slave","epoch":7,"lastEventId":41,"master":"10.0.0.1:6301"}`},
		{"master from the control", false, &fakeControl{NodeStatus{Role: RoleMaster, Epoch: 3, LastEventID: 9}},
			`{"role":"master","epoch":3,"lastEventId":9}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newFakeBackend()
			ts := startServer(t, be, func(o *Options) { o.Control = tc.ctl })
			runSteps(t, ts, []step{
				{"create", createReq("orders", 0), okReply(), false},
				{"pub", pubReq("orders", record("x")), okReply(), false},
			})
			be.slave.Store(tc.slave)
			runSteps(t, ts, []step{
				{"status", statusReq(""), jsonReply(tc.want), false},
				// A traceId (and a topic, which status ignores) are read
				// exactly: the connection stays in step.
				{"status with trace", statusReq("trace-1"), jsonReply(tc.want), false},
				{"status with a topic", enc(protocol.AppendRequest(nil, protocol.CmdStatus, [16]byte{}, []byte("x"), nil, nil)),
					jsonReply(tc.want), false},
			})
			var st NodeStatus
			body := jsonReply(tc.want)[protocol.RespHeaderSize:]
			if err := json.Unmarshal(body, &st); err != nil || st.Role == "" {
				t.Fatalf("reply does not decode into NodeStatus: %v", err)
			}
		})
	}
}

// With authentication on, status needs a login and nothing more: a user
// without any grant may ask.
func TestStatusPermission(t *testing.T) {
	s := startSecure(t, nil, permUsers...)
	c := s.dial(t)
	send(t, c, statusReq(""))
	expect(t, c, errReply("authentication required"))
	for _, u := range permUsers {
		c := s.dial(t)
		if err := login(t, c, u.Name, u.Password); err != nil {
			t.Fatal(err)
		}
		body, err := call(t, c, statusReq(""), protocol.ReplyJSON)
		if err != nil {
			t.Fatalf("%s: %v", u.Name, err)
		}
		var st NodeStatus
		if err := json.Unmarshal(body, &st); err != nil || st.Role != RoleMaster {
			t.Fatalf("%s: status %s (%v)", u.Name, body, err)
		}
	}
	if p, _ := auth.CommandPermission(protocol.CmdStatus); p != auth.PermNone {
		t.Fatalf("status needs %v", p)
	}
}
