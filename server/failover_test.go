package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
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

// fakeFailover records the calls and answers with its fields.
type fakeFailover struct {
	mu       sync.Mutex
	epoch    uint64
	err      error
	promotes int
	follows  []string
}

func (f *fakeFailover) Promote(context.Context) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.promotes++
	return f.epoch, f.err
}

func (f *fakeFailover) Follow(_ context.Context, addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.follows = append(f.follows, addr)
	return f.err
}

func promoteReq() []byte { return enc(protocol.AppendPromote(nil, nil)) }
func followReq(addr string) []byte {
	return enc(protocol.AppendFollow(nil, addr, []byte("tr")))
}

func TestPromoteAndFollowCommands(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failover *fakeFailover // nil: the server has none
		steps    []step
		promotes int
		follows  []string
	}{
		{"promote", &fakeFailover{epoch: 4}, []step{
			{"promote", promoteReq(), jsonReply(`{"role":"master","epoch":4}`), false},
		}, 1, nil},
		{"promote on a master", &fakeFailover{err: protocol.ErrAlreadyMaster}, []step{
			{"promote", promoteReq(), errReply("already a master"), false},
		}, 1, nil},
		{"follow", &fakeFailover{}, []step{
			{"follow", followReq("10.0.0.9:6301"), okReply(), false},
			{"follow IPv6", followReq("[::1]:6301"), okReply(), false},
		}, 0, []string{"10.0.0.9:6301", "[::1]:6301"}},
		{"follow refused by the node", &fakeFailover{err: errors.New("this node is a master")}, []step{
			{"follow", followReq("h:1"), errReply("this node is a master"), false},
		}, 0, []string{"h:1"}},
		{"follow with a bad address", &fakeFailover{}, []step{
			{"empty", followReq(""), errReply("follow needs the master's host:port in the topic field"), false},
			{"no port", followReq("host"), errReply(`follow: invalid master address "host" (want host:port): address host: missing port in address`), false},
			{"port 0", followReq("host:0"), errReply(`follow: invalid master address "host:0" (want host:port): port "0" is not in 1..65535`), false},
			{"no host", followReq(":5"), errReply(`follow: invalid master address ":5" (want host:port): no host`), false},
		}, 0, nil},
		{"without a failover", nil, []step{
			{"promote", promoteReq(), errReply("promote and follow are not available on this server"), false},
			{"follow", followReq("h:1"), errReply("promote and follow are not available on this server"), false},
		}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, newFakeBackend(), func(o *Options) {
				if tc.failover != nil {
					o.Failover = tc.failover
				}
			})
			runSteps(t, ts, tc.steps)
			if f := tc.failover; f != nil {
				f.mu.Lock()
				defer f.mu.Unlock()
				if f.promotes != tc.promotes || fmt.Sprint(f.follows) != fmt.Sprint(tc.follows) {
					t.Fatalf("calls: %d promotes, follows %v; want %d, %v", f.promotes, f.follows, tc.promotes, tc.follows)
				}
			}
		})
	}
}

// With authentication on, promote and follow need the admin role; a
// refused call never reaches the Failover.
func TestPromoteAndFollowNeedAdmin(t *testing.T) {
	f := &fakeFailover{epoch: 2}
	s := startSecureWith(t, nil, func(o *Options) { o.Failover = f }, permUsers...)
	for _, u := range permUsers {
		c := s.dial(t)
		if err := login(t, c, u.Name, u.Password); err != nil {
			t.Fatal(err)
		}
		for _, req := range [][]byte{promoteReq(), followReq("h:1")} {
			_, err := call(t, c, req, protocol.ReplyJSON)
			var be *protocol.BizError
			denied := errors.As(err, &be) && be.Msg == auth.Denied(u.Name, auth.PermAdmin, "").Msg
			if denied == (u.Name == "admin") {
				t.Fatalf("%s: reply %v", u.Name, err)
			}
			send(t, c, aliveReq())
			expect(t, c, aliveReply())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.promotes != 1 || len(f.follows) != 1 {
		t.Fatalf("calls that passed the check: %d promotes, %d follows; want the admin's only", f.promotes, len(f.follows))
	}
}

// FuzzValidateMasterAddr: the follow topic field comes from the network.
// An accepted address splits into a host and a port in 1..65535; a refusal
// is a business error (a 400 that keeps the connection).
func FuzzValidateMasterAddr(f *testing.F) {
	for _, s := range []string{"10.0.0.1:12301", "[::1]:1", "h:0", "h:65536", ":5", "host", "", "a:b:c", "[::1", "h:+1", "h:0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		err := validateMasterAddr(addr)
		if err != nil {
			if !protocol.IsBizError(err) {
				t.Fatalf("%q: %v is not a business error", addr, err)
			}
			return
		}
		host, port, serr := net.SplitHostPort(addr)
		p, perr := strconv.Atoi(port)
		if serr != nil || host == "" || perr != nil || p < 1 || p > 65535 {
			t.Fatalf("accepted %q", addr)
		}
	})
}
