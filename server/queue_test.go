package server

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/smssmq/smss/protocol"
)

// fakeQueues is a Queues whose one consumer the test drives: what the
// server's connection hands over (outcomes, leave) is recorded, and the
// test queues frames or ends the consumer.
type fakeQueues struct {
	mu     sync.Mutex
	joined chan *fakeConsumer
	refuse error
}

func (f *fakeQueues) Create(_ context.Context, topic string, cfg protocol.QueueConfig) (protocol.QueueInfo, error) {
	if err := cfg.Normalize(); err != nil {
		return protocol.QueueInfo{}, err
	}
	return protocol.QueueInfo{Topic: topic, Config: cfg, Consumers: []protocol.QueueConsumerInfo{}}, nil
}

func (f *fakeQueues) Delete(_ context.Context, topic, group string) error {
	if group != "g" {
		return protocol.NewBizError("no queue group " + group)
	}
	return nil
}

func (f *fakeQueues) Info(topic, group string) ([]protocol.QueueInfo, error) {
	if topic == "none" {
		return nil, nil
	}
	return []protocol.QueueInfo{{Topic: "t", Config: protocol.QueueConfig{Group: "g"}}}, nil
}

func (f *fakeQueues) Join(topic, group, consumer, addr string, maxInFlight int) (QueueConsumer, error) {
	f.mu.Lock()
	refuse := f.refuse
	f.mu.Unlock()
	if refuse != nil {
		return nil, refuse
	}
	c := &fakeConsumer{wake: make(chan struct{}, 1), done: make(chan struct{}), outcomes: make(chan []protocol.QueueOutcome, 16), left: make(chan struct{})}
	f.joined <- c
	return c, nil
}

type fakeConsumer struct {
	mu       sync.Mutex
	out      []byte
	err      error
	ended    bool
	wake     chan struct{}
	done     chan struct{}
	outcomes chan []protocol.QueueOutcome
	leftOnce sync.Once
	left     chan struct{}
}

func (c *fakeConsumer) Wake() <-chan struct{} { return c.wake }
func (c *fakeConsumer) Done() <-chan struct{} { return c.done }
func (c *fakeConsumer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
func (c *fakeConsumer) Take(dst []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	dst = append(dst, c.out...)
	c.out = nil
	return dst
}
func (c *fakeConsumer) Outcomes(os []protocol.QueueOutcome) {
	c.outcomes <- os
	if os[len(os)-1].Op == protocol.QueueOpStop {
		c.end(nil)
	}
}
func (c *fakeConsumer) Leave() { c.leftOnce.Do(func() { close(c.left) }); c.end(nil) }
func (c *fakeConsumer) queue(b []byte) {
	c.mu.Lock()
	c.out = append(c.out, b...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}
func (c *fakeConsumer) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		c.ended, c.err = true, err
		close(c.done)
	}
}

func queueReq(cmd protocol.Command, topic string, v any) []byte {
	return enc(protocol.AppendQueueRequest(nil, cmd, topic, v))
}

func TestQueueCommands(t *testing.T) {
	fq := &fakeQueues{joined: make(chan *fakeConsumer, 1)}
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.Queues = fq })
	c := ts.dial(t)
	created, _ := fq.Create(context.Background(), "t", protocol.QueueConfig{Group: "g"})
	body, _ := json.Marshal(created)
	tests := []struct {
		name string
		req  []byte
		want []byte
	}{
		{"create", queueReq(protocol.CmdQueueCreate, "t", protocol.QueueConfig{Group: "g"}), jsonReply(string(body))},
		{"create refused", queueReq(protocol.CmdQueueCreate, "t", protocol.QueueConfig{Group: "bad name"}), errReply(`group name "bad name": only letters, digits, '.', '_' and '-'`)},
		{"misspelt setting", queueReq(protocol.CmdQueueCreate, "t", map[string]any{"group": "g", "ackwait": 5}),
			errReply(`invalid queue request body: json: unknown field "ackwait"`)},
		{"bad topic", queueReq(protocol.CmdQueueCreate, "a/b", protocol.QueueConfig{Group: "g"}), nil},
		{"delete", queueReq(protocol.CmdQueueDelete, "t", protocol.QueueRef{Group: "g"}), okReply()},
		{"delete unknown", queueReq(protocol.CmdQueueDelete, "t", protocol.QueueRef{Group: "x"}), errReply("no queue group x")},
		{"info none", queueReq(protocol.CmdQueueInfo, "none", protocol.QueueRef{}), jsonReply("")},
		{"alive after all that", aliveReq(), aliveReply()},
	}
	for _, tc := range tests {
		send(t, c, tc.req)
		if tc.want == nil {
			// The refusal text is the topic-name rule's; the connection stays.
			got, err := protocol.ReadReply(c, protocol.ReplyJSON, 1<<20)
			if err == nil || !protocol.IsBizError(err) {
				t.Fatalf("%s: %q %v", tc.name, got, err)
			}
			continue
		}
		expect(t, c, tc.want)
	}
}

func TestQueueCommandsWithoutQueues(t *testing.T) {
	ts := startServer(t, newFakeBackend(), nil)
	c := ts.dial(t)
	send(t, c, queueReq(protocol.CmdQueueInfo, "", protocol.QueueRef{}))
	expect(t, c, errReply(errNoQueues.Msg))
	send(t, c, queueReq(protocol.CmdQueueConsume, "t", protocol.QueueConsume{Group: "g", Consumer: "w"}))
	expect(t, c, errReply(errNoQueues.Msg))
	send(t, c, aliveReq())
	expect(t, c, aliveReply())
}

func TestQueueConsumeStream(t *testing.T) {
	fq := &fakeQueues{joined: make(chan *fakeConsumer, 1)}
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.Queues = fq })
	consume := queueReq(protocol.CmdQueueConsume, "t", protocol.QueueConsume{Group: "g", Consumer: "w"})
	rec, _ := protocol.AppendRecord(nil, protocol.Record{Body: []byte("x")})
	unit := protocol.AppendQueueMessage(nil, 1, 7, 1, rec)
	frame := append(protocol.AppendQueueFrameHeader(nil, 1, uint32(len(unit))), unit...)

	t.Run("frames, outcomes in one batch, stop back to the command loop", func(t *testing.T) {
		c := ts.dial(t)
		send(t, c, consume)
		fc := <-fq.joined
		fc.queue(frame)
		expect(t, c, frame)
		var outs []byte
		outs = protocol.AppendQueueOutcome(outs, protocol.QueueOutcome{Op: protocol.QueueOpAck, EventID: 7})
		outs = protocol.AppendQueueOutcome(outs, protocol.QueueOutcome{Op: protocol.QueueOpNak, EventID: 8, DelayMs: 5})
		send(t, c, outs)
		if got := <-fc.outcomes; len(got) != 2 || got[1].DelayMs != 5 {
			t.Fatalf("outcomes %+v", got)
		}
		confirm := protocol.AppendQueueConfirms(nil, []protocol.QueueConfirm{{EventID: 7, Op: protocol.QueueOpAck}})
		fc.queue(confirm)
		expect(t, c, confirm)
		send(t, c, protocol.AppendQueueOutcome(nil, protocol.QueueOutcome{Op: protocol.QueueOpStop}))
		expect(t, c, protocol.AppendReplySubEnd(nil))
		send(t, c, aliveReq())
		expect(t, c, aliveReply())
	})
	t.Run("a malformed outcome closes the connection", func(t *testing.T) {
		c := ts.dial(t)
		send(t, c, consume)
		fc := <-fq.joined
		bad := protocol.AppendQueueOutcome(nil, protocol.QueueOutcome{Op: protocol.QueueOpAck, EventID: 7})
		bad[0] = 9
		send(t, c, bad)
		<-fc.left
		expect(t, c, protocol.AppendReplySubEnd(nil)) // the consumer ended; nothing after
		expectClosed(t, c)
	})
	t.Run("the group ends the stream with an error", func(t *testing.T) {
		c := ts.dial(t)
		send(t, c, consume)
		fc := <-fq.joined
		fc.end(protocol.NewBizError("queue groups are served by the master only"))
		expect(t, c, errReply("queue groups are served by the master only"))
		expectClosed(t, c)
	})
	t.Run("the group is deleted: 255, then closed", func(t *testing.T) {
		c := ts.dial(t)
		send(t, c, consume)
		fc := <-fq.joined
		fc.end(nil)
		expect(t, c, protocol.AppendReplySubEnd(nil))
		expectClosed(t, c)
	})
	t.Run("a refused join answers 400 and keeps the connection", func(t *testing.T) {
		fq.mu.Lock()
		fq.refuse = protocol.NewBizError(`no queue group "g" on topic "t"`)
		fq.mu.Unlock()
		c := ts.dial(t)
		send(t, c, consume)
		expect(t, c, errReply(`no queue group "g" on topic "t"`))
		send(t, c, aliveReq())
		expect(t, c, aliveReply())
	})
	if strings.Contains(ts.logs.String(), "panic") {
		t.Fatal("panic in the server log")
	}
}
