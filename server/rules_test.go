package server

import (
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/protocol"
)

// realCursors serves stored positions from a real broker (server.Cursors).
type realCursors struct{ fzBackend }

func (c realCursors) SubscribeResume(topic, who []byte, whenNone int64) (Subscription, error) {
	s, err := c.Broker.SubscribeResume(topic, who, whenNone)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// TestRefusalsFromARealBroker pins the exact replies, and their order, of
// the topic-name and role refusals with a real broker behind the server,
// as cmd/smss runs it: which rule answers when a request breaks several
// (docs/protocol.md §1.5, §11). The broker alone checks names and the
// role; the server must still answer as the original's order says.
func TestRefusalsFromARealBroker(t *testing.T) {
	badSpace := "invalid topic name: byte 0x20 not allowed (no space, '/', '\\\\' or control bytes)"
	badSlash := "invalid topic name: byte 0x2f not allowed (no space, '/', '\\\\' or control bytes)"
	rec := record("x")
	soon := func() int64 { return time.Now().UnixMilli() + 5000 }
	sub := func(topic string, after int64) []byte {
		return enc(protocol.AppendSub(nil, []byte(topic), nil, after, 1, time.Second, []byte("w")))
	}
	info := func(topic string) []byte { return enc(protocol.AppendTopicInfo(nil, []byte(topic), nil)) }
	del := func(topic string) []byte { return enc(protocol.AppendDelete(nil, []byte(topic), nil)) }
	delay := func(topic string, ms int64, recs []byte) []byte {
		return enc(protocol.AppendDelay(nil, []byte(topic), nil, ms, recs))
	}
	for _, tc := range []struct {
		name       string
		slave      bool
		cursorsOff bool
		steps      []step
	}{
		{"master", false, false, []step{
			{"create bad name", createReq("a b", 0), errReply(badSpace), false},
			{"create too long name", createReq(strings.Repeat("n", 129), 0), errReply("invalid topic name: longer than 128 bytes"), false},
			{"create dot dot", createReq("..", 0), errReply("invalid topic name: must not be . or .."), false},
			{"create bad name before its lifetime", createReq("a b", soon()), errReply(badSpace), false},
			{"create expiring in 5s", createReq("soon", soon()), errReply("expire MUST more than 10s"), false},
			{"create negative expiry", createReq("neg", -1), errReply("expire MUST more than 10s"), false},
			{"create the cursor topic expiring in 5s", createReq(protocol.CursorTopic, soon()), errReply("expire MUST more than 10s"), false},
			{"create", createReq("t", 0), okReply(), false},
			{"pub bad name", pubReq("a/b", rec), errReply(badSlash), false},
			{"pub empty name", pubReq("", rec), errReply("invalid topic name: must not be empty"), false},
			{"pub unknown topic", pubReq("nope", rec), errReply("topic not exist"), false},
			{"pub", pubReq("t", rec), okReply(), false},
			{"info empty name", info(""), errReply("topic name is required"), false},
			{"info bad name", info("x\ty"), errReply("invalid topic name: byte 0x09 not allowed (no space, '/', '\\\\' or control bytes)"), false},
			{"info slash", info("a/b"), errReply(badSlash), false},
			{"info unknown", info("nope"), errReply("topic not exist"), false},
			{"delay bad name", delay("a b", 2000, rec), errReply(badSpace), false},
			{"delay over the max before the name", delay("a b", 3600_001, rec), errReply("delay of 3600001 ms exceeds delay.maxDelay 3600000"), false},
			{"delay unknown topic", delay("nope", 2000, rec), errReply("topic not exist"), false},
			{"delete bad name", del("."), errReply("invalid topic name: must not be . or .."), false},
			{"delete slash", del("a/b"), errReply(badSlash), false},
			{"delete unknown", del("nope"), errReply("topic not exist"), false},
			{"sub bad name", sub("a b", 0), errReply(badSpace), false},
			{"sub slash", sub("a/b", 0), errReply(badSlash), false},
			{"sub resume bad name", sub("a b", protocol.SubResumeEventID), errReply(badSpace), false},
			{"sub resume slash", sub("a/b", protocol.SubResumeEventID), errReply(badSlash), false},
			{"sub unknown", sub("nope", 0), errReply("topic not exist"), false},
			{"sub resume unknown", sub("nope", protocol.SubResumeEventID), errReply("topic not exist"), false},
			{"delete", del("t"), okReply(), false},
		}},
		{"master without stored positions", false, true, []step{
			{"sub resume bad name", sub("a b", protocol.SubResumeEventID), errReply(badSpace), false},
			{"sub resume slash", sub("a/b", protocol.SubResumeEventID), errReply(badSlash), false},
			{"sub resume", sub("nope", protocol.SubResumeEventID), errReply("stored positions are disabled on this server (cursor.enabled)"), false},
		}},
		{"slave", true, false, []step{
			{"pub", pubReq("t", rec), errReply("just master can pub message"), false},
			{"pub bad name first", pubReq("a/b", rec), errReply(badSlash), false},
			{"pub invalid payload first", pubReq("t", []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 9}), errReply("invalid pub payload"), false},
			{"create", createReq("t", 0), errReply("just master can manage topic"), false},
			{"create bad name first", createReq("a b", 0), errReply(badSpace), false},
			{"create too soon", createReq("t", 1), errReply("just master can manage topic"), false},
			{"delete", del("t"), errReply("just master can manage topic"), false},
			{"delete bad name", del("a/b"), errReply("just master can manage topic"), false},
			{"delay", delay("t", 5000, rec), errReply("just master can pub message"), false},
			{"delay bad name", delay("a b", 5000, rec), errReply("just master can pub message"), false},
			{"delay over max", delay("a b", 1<<60, rec), errReply("just master can pub message"), false},
			{"delay too short", delay("t", 10, rec), errReply("just master can pub message"), false},
			{"delay invalid", delay("t", 5000, make([]byte, 4)), errReply("just master can pub message"), false},
			{"info unknown", info("t"), errReply("topic not exist"), false},
			{"sub bad name", sub("a b", 0), errReply(badSpace), false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, _ := startRealServerWith(t, func(o *broker.Options) { o.Slave, o.CursorsOff = tc.slave, tc.cursorsOff },
				func(o *Options, b *broker.Broker) { o.Cursors = realCursors{fzBackend{b}} })
			runSteps(t, ts, tc.steps)
		})
	}
}
