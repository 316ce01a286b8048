package client

import (
	"bufio"
	"errors"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/smssmq/smss/client/internal/testserver"
	"github.com/smssmq/smss/protocol"
)

func TestStatusOfARealServer(t *testing.T) {
	srv := testserver.Start(t, "")
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 30*time.Second)
	if err := c.CreateTopic(ctx, "order"); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, "order", &Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// create is eventId 1, the publish 2.
	if !st.IsMaster() || st.LastEventID != 2 || st.Master != "" {
		t.Fatalf("status %+v", st)
	}
}

// An original server answers the unknown command 34 with "don't support
// action" and closes the connection: Status reports ErrNoStatus and the
// closed connection is not reused.
func TestStatusOfAnOriginalServer(t *testing.T) {
	f := startFake(t, func(c net.Conn, r *bufio.Reader) {
		for {
			req, err := readReq(r)
			if req == nil {
				return
			}
			if err != nil || req.Header.Cmd == protocol.CmdStatus {
				c.Write(protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg))
				return
			}
			c.Write(protocol.AppendReplyAlive(nil))
		}
	})
	c := dialT(t, f.addr(), Options{})
	ctx := ctxT(t, 30*time.Second)
	_, err := c.Status(ctx)
	if !errors.Is(err, ErrNoStatus) || !errors.Is(err, ErrNotSupported) {
		t.Fatalf("status against an original server: %v", err)
	}
	if err := c.Alive(ctx); err != nil {
		t.Fatalf("alive after the refused status (the closed connection was reused?): %v", err)
	}
	if n := f.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the refused one dropped)", n)
	}
}

func TestParseNodeStatus(t *testing.T) {
	for _, tc := range []struct {
		body string
		want *NodeStatus
	}{
		{`{"role":"master","epoch":3,"lastEventId":10}`, &NodeStatus{Role: RoleMaster, Epoch: 3, LastEventID: 10}},
		{`{"role":"slave","epoch":0,"lastEventId":0,"master":"h:1"}`, &NodeStatus{Role: RoleSlave, Master: "h:1"}},
		{`{"role":"leader","epoch":1}`, nil},
		{`{"role":"master","epoch":-1}`, nil},
		{``, nil},
		{`[1]`, nil},
	} {
		got, err := ParseNodeStatus([]byte(tc.body))
		if tc.want == nil {
			if err == nil || !errors.Is(err, ErrProtocol) {
				t.Errorf("%q: %+v, %v; want ErrProtocol", tc.body, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(*got, *tc.want) {
			t.Errorf("%q: %+v, %v", tc.body, got, err)
		}
	}
}

func FuzzParseNodeStatus(f *testing.F) {
	f.Add([]byte(`{"role":"master","epoch":3,"lastEventId":10}`))
	f.Add([]byte(`{"role":"slave","epoch":18446744073709551615,"lastEventId":-1,"master":"[::1]:1"}`))
	f.Add([]byte(`{"role":`))
	f.Fuzz(func(t *testing.T, body []byte) {
		st, err := ParseNodeStatus(body)
		if err != nil {
			if !errors.Is(err, ErrProtocol) || st != nil {
				t.Fatalf("error %v with %+v", err, st)
			}
			return
		}
		if !st.IsMaster() && st.Role != RoleSlave {
			t.Fatalf("accepted role %q", st.Role)
		}
	})
}
