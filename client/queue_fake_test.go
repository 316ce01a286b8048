package client

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

// queueNode is a fake server of the queue management commands with a
// status reply (several addresses); a slave refuses them.
func queueNode(t *testing.T, status string, seen chan<- string) *fake {
	return startFake(t, func(c net.Conn, r *bufio.Reader) {
		for {
			req, err := readReq(r)
			if err != nil {
				return
			}
			var out []byte
			switch cmd := req.Header.Cmd; {
			case cmd == protocol.CmdStatus:
				out, _ = protocol.AppendReplyJSON(nil, []byte(status))
			case strings.Contains(status, `"slave"`):
				out = protocol.AppendReplyError(nil, protocol.ErrSlaveManage.Msg)
			case cmd == protocol.CmdQueueCreate:
				var qc QueueConfig
				if err := protocol.DecodeQueueBody(req.Payload, &qc); err != nil {
					out = protocol.AppendReplyError(nil, err.Error())
					break
				}
				if qc.AckWaitMs == 7000 {
					out = protocol.AppendReplyError(nil, "queue group g exists with other settings: ackWaitMs 30000")
					break
				}
				seen <- fmt.Sprintf("create %s %s", req.Topic, req.Payload)
				qc.Normalize()
				b, _ := json.Marshal(QueueInfo{Topic: string(req.Topic), Config: qc})
				out, _ = protocol.AppendReplyJSON(nil, b)
			case cmd == protocol.CmdQueueDelete:
				seen <- fmt.Sprintf("delete %s %s", req.Topic, req.Payload)
				out = protocol.AppendReplyOK(nil)
			case cmd == protocol.CmdQueueInfo:
				seen <- fmt.Sprintf("info %s %s", req.Topic, req.Payload)
				if len(req.Topic) == 0 {
					out = protocol.AppendReplyOK(nil) // no groups
					break
				}
				b, _ := json.Marshal([]QueueInfo{{Topic: string(req.Topic), Pending: 3, Consumers: []QueueConsumerInfo{{Name: "w1"}}}})
				out, _ = protocol.AppendReplyJSON(nil, b)
			default:
				out = protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg)
			}
			c.Write(out)
		}
	})
}

// TestQueueCalls: create, delete and info go to the master among several
// addresses with the JSON bodies of the protocol; refusals keep the
// server's text.
func TestQueueCalls(t *testing.T) {
	seen := make(chan string, 10)
	slave := queueNode(t, slaveStatus, seen)
	master := queueNode(t, masterStatus(1), seen)
	c := dialT(t, "", Options{Addrs: []string{slave.addr(), master.addr()}})
	ctx := ctxT(t, 10*time.Second)
	info, err := c.CreateQueue(ctx, "orders", QueueConfig{Group: "g", MaxDeliver: 3, DeadLetter: "orders.dead"})
	if err != nil || info.Topic != "orders" || info.Config.MaxDeliver != 3 || info.Config.AckWaitMs != 30000 {
		t.Fatalf("CreateQueue: %+v %v", info, err)
	}
	if got := <-seen; got != `create orders {"group":"g","maxDeliver":3,"deadLetter":"orders.dead"}` {
		t.Errorf("request %s", got)
	}
	_, err = c.CreateQueue(ctx, "orders", QueueConfig{Group: "g", AckWaitMs: 7000})
	if !IsServerError(err) || !strings.Contains(err.Error(), "exists with other settings: ackWaitMs 30000") {
		t.Errorf("conflicting create: %v", err)
	}
	qs, err := c.Queues(ctx, "orders", "g")
	if err != nil || len(qs) != 1 || qs[0].Pending != 3 || qs[0].Consumers[0].Name != "w1" {
		t.Errorf("Queues: %+v %v", qs, err)
	}
	if got := <-seen; got != `info orders {"group":"g"}` {
		t.Errorf("request %s", got)
	}
	if qs, err := c.Queues(ctx, "", ""); err != nil || qs == nil || len(qs) != 0 {
		t.Errorf("Queues of none: %#v %v", qs, err)
	}
	<-seen
	if err := c.DeleteQueue(ctx, "orders", "g"); err != nil {
		t.Errorf("DeleteQueue: %v", err)
	}
	if got := <-seen; got != `delete orders {"group":"g"}` {
		t.Errorf("request %s", got)
	}
	if c.Master() != master.addr() {
		t.Errorf("master %q, want %s", c.Master(), master.addr())
	}
}

// TestQueueCallsOriginalServer: "don't support action" is ErrNoQueues
// (and ErrNotSupported), and the connection it closed is not reused.
func TestQueueCallsOriginalServer(t *testing.T) {
	f := startFake(t, func(c net.Conn, r *bufio.Reader) {
		for {
			req, err := readReq(r)
			if err != nil {
				return
			}
			if req.Header.Cmd == protocol.CmdAlive {
				c.Write(protocol.AppendReplyOK(nil))
				continue
			}
			c.Write(protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg))
			return
		}
	})
	c := dialT(t, f.addr(), Options{})
	ctx := ctxT(t, 10*time.Second)
	if _, err := c.Queues(ctx, "", ""); !errors.Is(err, ErrNoQueues) || !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Queues: %v", err)
	}
	if _, err := c.CreateQueue(ctx, "t", QueueConfig{Group: "g"}); !errors.Is(err, ErrNoQueues) {
		t.Fatalf("CreateQueue: %v", err)
	}
	if err := c.Alive(ctx); err != nil {
		t.Fatalf("Alive after the refusals: %v", err)
	}
}
