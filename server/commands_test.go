package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

type step struct {
	name  string
	req   []byte
	reply []byte
	close bool // the server must close the connection after the reply
}

// runSteps sends each request on one connection and checks the exact reply;
// after a step that keeps the connection, an alive proves it is in sync.
func runSteps(t *testing.T, ts *testServer, steps []step) {
	t.Helper()
	c := ts.dial(t)
	for _, st := range steps {
		send(t, c, st.req)
		expect(t, c, st.reply)
		if st.close {
			expectClosed(t, c)
			c = ts.dial(t)
			continue
		}
		send(t, c, aliveReq())
		expect(t, c, aliveReply())
	}
}

func TestMasterCommands(t *testing.T) {
	be := newFakeBackend()
	be.maxDelay = time.Hour
	ts := startServer(t, be, func(o *Options) {
		o.Limits = protocol.Limits{MaxPayload: 1024, MaxWho: 16, MaxRecords: 3, MaxDiscard: -1}
	})
	future := time.Now().UnixMilli() + 3600_000
	rec := record("hello")
	badName := "invalid topic name: byte 0x20 not allowed (no space, '/', '\\\\' or control bytes)"
	steps := []step{
		{"alive", aliveReq(), aliveReply(), false},
		{"list when empty", enc(protocol.AppendList(nil, nil)), jsonReply(""), false},
		{"valid list when empty", enc(protocol.AppendValidList(nil, nil, 0)), jsonReply(""), false},
		{"create", createReq("order", 0), okReply(), false},
		{"create again", createReq("order", 0), errReply("topic exist"), false},
		{"create with expiry", createReq("life", future), okReply(), false},
		{"create expiring in 5s", createReq("soon", time.Now().UnixMilli()+5000), errReply("expire MUST more than 10s"), false},
		{"create negative expiry", createReq("neg", -1), errReply("expire MUST more than 10s"), false},
		{"create bad name", createReq("a b", 0), errReply(badName), false},
		{"create too long name", createReq(strings.Repeat("n", 129), 0), errReply("invalid topic name: longer than 128 bytes"), false},
		{"create dot dot", createReq("..", 0), errReply("invalid topic name: must not be . or .."), false},
		{"create backend os error", createReq("diskfull", 0), errReply("mkdir data/topic/1/2/diskfull: no space left on device"), false},
		{"pub", pubReq("order", rec), okReply(), false},
		{"pub batch", pubReq("order", rec, rec, rec), okReply(), false},
		{"pub too many records", pubReq("order", rec, rec, rec, rec),
			errReply("more than 3 records in one request exceeds limit.maxRecords 3"), false},
		{"pub unknown topic", pubReq("nope", rec), errReply("topic not exist"), false},
		{"pub bad name", pubReq("a/b", rec), errReply("invalid topic name: byte 0x2f not allowed (no space, '/', '\\\\' or control bytes)"), false},
		{"pub empty name", pubReq("", rec), errReply("invalid topic name: must not be empty"), false},
		{"pub size 8", enc(protocol.AppendRequest(nil, protocol.CmdPub, protocol.PayloadArea(8), []byte("order"), nil, make([]byte, 8))),
			errReply("invalid request, payload size must be more than 8"), false},
		{"pub size 0", enc(protocol.AppendRequest(nil, protocol.CmdPub, protocol.PayloadArea(0), []byte("order"), nil, nil)),
			errReply("invalid request, payload size must be more than 8"), false},
		{"pub bad records", pubReq("order", rec, []byte{1, 0, 0}), errReply("invalid pub payload"), false},
		{"info", enc(protocol.AppendTopicInfo(nil, []byte("order"), []byte("t"))), jsonReply(topicJSON("order", 1, 0)), false},
		{"info empty name", enc(protocol.AppendTopicInfo(nil, nil, nil)), errReply("topic name is required"), false},
		{"info unknown", enc(protocol.AppendTopicInfo(nil, []byte("nope"), nil)), errReply("topic not exist"), false},
		{"info bad name", enc(protocol.AppendTopicInfo(nil, []byte("x\ty"), nil)),
			errReply("invalid topic name: byte 0x09 not allowed (no space, '/', '\\\\' or control bytes)"), false},
		{"list", enc(protocol.AppendList(nil, nil)), jsonReply("[" + topicJSON("life", 2, future) + "," + topicJSON("order", 1, 0) + "]"), false},
		{"valid list from 1", enc(protocol.AppendValidList(nil, nil, 1)), jsonReply("[" + topicJSON("order", 1, 0) + "]"), false},
		{"delay", enc(protocol.AppendDelay(nil, []byte("order"), nil, 2000, rec)), okReply(), false},
		{"delay unknown topic", enc(protocol.AppendDelay(nil, []byte("nope"), nil, 2000, rec)), errReply("topic not exist"), false},
		{"delay bad name", enc(protocol.AppendDelay(nil, []byte("a b"), nil, 2000, rec)), errReply(badName), false},
		{"delay at the max", enc(protocol.AppendDelay(nil, []byte("order"), nil, 3600_000, rec)), okReply(), false},
		{"delay over the max", enc(protocol.AppendDelay(nil, []byte("order"), nil, 3600_001, rec)),
			errReply("delay of 3600001 ms exceeds delay.maxDelay 3600000"), false},
		{"delay too many records", enc(protocol.AppendDelay(nil, []byte("order"), nil, 2000, bytes.Repeat(rec, 4))),
			errReply("more than 3 records in one request exceeds limit.maxRecords 3"), false},
		{"delay invalid", enc(protocol.AppendDelay(nil, []byte("order"), nil, 2000, make([]byte, 8))), errReply("invalid delay request"), false},
		{"delay too short", enc(protocol.AppendDelay(nil, []byte("order"), nil, 10, rec)), errReply("delay time must be more than 1 second"), false},
		{"replica negative", enc(protocol.AppendReplica(nil, -1)), errReply("invalid replica eventId"), false},
		{"delete", enc(protocol.AppendDelete(nil, []byte("life"), nil)), okReply(), false},
		{"delete again", enc(protocol.AppendDelete(nil, []byte("life"), nil)), errReply("topic not exist"), false},
		{"delete bad name", enc(protocol.AppendDelete(nil, []byte("."), nil)), errReply("invalid topic name: must not be . or .."), false},
		{"sub unknown topic", enc(protocol.AppendSub(nil, []byte("nope"), nil, 0, 1, time.Second, []byte("w"))), errReply("topic not exist"), false},
		{"sub bad name", enc(protocol.AppendSub(nil, []byte("a b"), nil, 0, 1, time.Second, []byte("w"))), errReply(badName), false},
		{"replica closes", enc(protocol.AppendReplica(nil, 0)), errReply("don't support action"), true},
		{"unknown command closes", enc(protocol.AppendRequest(nil, 5, [16]byte{}, []byte("t"), nil, []byte("body bytes"))), errReply("don't support action"), true},
		{"delay apply closes", enc(protocol.AppendRequest(nil, protocol.CmdDelayApply, [16]byte{}, []byte("t"), nil, make([]byte, 8))), errReply("don't support action"), true},
		{"payload over cap closes", enc(protocol.AppendRequest(nil, protocol.CmdPub, protocol.PayloadArea(1025), []byte("order"), nil, nil)),
			errReply("payload of 1025 bytes exceeds limit.maxPayload 1024"), true},
		{"who over cap closes", enc(protocol.AppendSub(nil, []byte("order"), nil, 0, 1, time.Second, []byte(strings.Repeat("w", 17)))),
			errReply("who of 17 bytes exceeds limit.maxWho 16"), true},
	}
	runSteps(t, ts, steps)

	be.mu.Lock()
	defer be.mu.Unlock()
	if be.counts["order"] != 4 || len(be.records["order"]) != 4*len(rec) {
		t.Fatalf("backend got %d records, %d bytes", be.counts["order"], len(be.records["order"]))
	}
	if d := be.delays; len(d) != 2 || d[0].topic != "order" || !bytes.Equal(d[0].records, rec) || d[0].count != 1 ||
		d[0].delayMs != 2000 || d[1].delayMs != 3600_000 {
		t.Fatalf("backend got delays %+v", be.delays)
	}
}

func TestSlaveCommands(t *testing.T) {
	be := newFakeBackend()
	ts := startServer(t, be, nil)
	runSteps(t, ts, []step{{"create on master", createReq("order", 0), okReply(), false}})
	be.slave.Store(true)
	rec := record("x")
	runSteps(t, ts, []step{
		{"pub", pubReq("order", rec), errReply("just master can pub message"), false},
		{"pub invalid payload first", pubReq("order", []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 9}), errReply("invalid pub payload"), false},
		{"create", createReq("other", 0), errReply("just master can manage topic"), false},
		{"create bad name first", createReq("a b", 0), errReply("invalid topic name: byte 0x20 not allowed (no space, '/', '\\\\' or control bytes)"), false},
		{"create too soon", createReq("other", 1), errReply("just master can manage topic"), false},
		{"delete", enc(protocol.AppendDelete(nil, []byte("order"), nil)), errReply("just master can manage topic"), false},
		{"delay", enc(protocol.AppendDelay(nil, []byte("order"), nil, 5000, rec)), errReply("just master can pub message"), false},
		{"delay too short still slave error", enc(protocol.AppendDelay(nil, []byte("order"), nil, 10, rec)), errReply("just master can pub message"), false},
		{"delay over max still slave error", enc(protocol.AppendDelay(nil, []byte("order"), nil, 1<<60, rec)), errReply("just master can pub message"), false},
		{"delay invalid still slave error", enc(protocol.AppendDelay(nil, []byte("order"), nil, 5000, make([]byte, 4))), errReply("just master can pub message"), false},
		{"info", enc(protocol.AppendTopicInfo(nil, []byte("order"), nil)), jsonReply(topicJSON("order", 1, 0)), false},
		{"list", enc(protocol.AppendList(nil, nil)), jsonReply("[" + topicJSON("order", 1, 0) + "]"), false},
		{"replica", enc(protocol.AppendReplica(nil, 0)), errReply("don't support action"), true},
	})
}

// The info reply for the spec's example topic has the verified length.
func TestInfoReplyMatchesAppendixA(t *testing.T) {
	ts := startServer(t, newFakeBackend(), nil)
	c := ts.dial(t)
	send(t, c, createReq("order", 0))
	expect(t, c, okReply())
	send(t, c, enc(protocol.AppendTopicInfo(nil, []byte("order"), nil)))
	want := topicJSON("order", 1, 0)
	if len(want) != 169 {
		t.Fatalf("example JSON is %d bytes", len(want))
	}
	expect(t, c, append([]byte{0xc8, 0, 0xa9, 0, 0, 0, 0, 0, 0, 0}, want...))
}

func TestBackendErrors(t *testing.T) {
	be := newFakeBackend()
	be.onPublish = func(topic string) error {
		switch topic {
		case "fails":
			return errors.New("write binlog: input/output error")
		case "bizfails":
			return protocol.NewBizError("custom business text")
		}
		return nil
	}
	ts := startServer(t, be, nil)
	runSteps(t, ts, []step{
		{"plain error", pubReq("fails", record("x")), errReply("write binlog: input/output error"), false},
		{"business error", pubReq("bizfails", record("x")), errReply("custom business text"), false},
	})
	if !strings.Contains(ts.logs.String(), "input/output error") {
		t.Fatal("a non-business backend error was not logged")
	}
}

func TestLongErrorTextTruncated(t *testing.T) {
	be := newFakeBackend()
	long := strings.Repeat("e", 70000)
	be.onPublish = func(string) error { return errors.New(long) }
	ts := startServer(t, be, nil)
	runSteps(t, ts, []step{{"long", pubReq("order", record("x")), errReply(long[:65535]), false}})
}

func TestPipelinedRequests(t *testing.T) {
	ts := startServer(t, newFakeBackend(), nil)
	c := ts.dial(t)
	var batch, want []byte
	batch = append(batch, createReq("p", 0)...)
	want = append(want, okReply()...)
	for i := 0; i < 50; i++ {
		batch = append(batch, pubReq("p", record("m"))...)
		want = append(want, okReply()...)
		batch = append(batch, aliveReq()...)
		want = append(want, aliveReply()...)
	}
	batch = append(batch, pubReq("missing", record("m"))...)
	want = append(want, errReply("topic not exist")...)
	batch = append(batch, enc(protocol.AppendTopicInfo(nil, []byte("p"), nil))...)
	want = append(want, jsonReply(topicJSON("p", 1, 0))...)
	send(t, c, batch)
	expect(t, c, want)
}

func TestRequestSplitAcrossSmallWrites(t *testing.T) {
	ts := startServer(t, newFakeBackend(), nil)
	c := ts.dial(t)
	req := append(createReq("split", 0), pubReq("split", record("hello"), record("world"))...)
	for i := range req {
		send(t, c, req[i:i+1])
	}
	expect(t, c, append(okReply(), okReply()...))
	ts.backend.mu.Lock()
	n := ts.backend.counts["split"]
	ts.backend.mu.Unlock()
	if n != 2 {
		t.Fatalf("backend got %d records", n)
	}
}

func TestLargePayloadAtCap(t *testing.T) {
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.Limits.MaxPayload = 1 << 20 })
	c := ts.dial(t)
	send(t, c, createReq("big", 0))
	expect(t, c, okReply())
	body := make([]byte, 1<<20-8)
	rec := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	rec = append(append(rec, 0, 0, 0, 0), body...)
	send(t, c, pubReq("big", rec))
	expect(t, c, okReply())
}

// A refused oversize body that the client keeps sending must not turn the
// close into a reset that loses the 400.
// A client writes its whole body before it reads the reply (the original
// client does): an over-limit body up to limit.maxDiscard is read and
// discarded, so the client gets the 400 and keeps its connection; beyond,
// the 400 is still readable and the connection closed.
func TestOversizeBodyRefusalIsReadable(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxDiscard int64
		keep       bool
	}{
		{"discarded by default", 0, true},
		{"discarded up to the bound", 100_000 + 8, true},
		{"beyond the bound closes", 99_999, false},
		{"no discard closes", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, newFakeBackend(), func(o *Options) {
				o.Limits.MaxPayload, o.Limits.MaxDiscard = 1024, tc.maxDiscard
			})
			c := ts.dial(t)
			req := enc(protocol.AppendRequest(nil, protocol.CmdPub, protocol.PayloadArea(100_000), []byte("t"), nil, make([]byte, 100_000)))
			written := make(chan error, 1)
			go func() {
				_, err := c.Write(req)
				written <- err
			}()
			expect(t, c, errReply("payload of 100000 bytes exceeds limit.maxPayload 1024"))
			if !tc.keep {
				expectClosed(t, c)
				<-written
				return
			}
			if err := <-written; err != nil {
				t.Fatalf("the client could not write its whole body: %v", err)
			}
			send(t, c, aliveReq())
			expect(t, c, aliveReply())
		})
	}
}

func TestRefusalClosesOnlyItsConnection(t *testing.T) {
	ts := startServer(t, newFakeBackend(), nil)
	other := ts.dial(t)
	send(t, other, aliveReq())
	expect(t, other, aliveReply())

	bad := ts.dial(t)
	send(t, bad, enc(protocol.AppendRequest(nil, 90, [16]byte{}, nil, nil, nil)))
	expect(t, bad, errReply("don't support action"))
	expectClosed(t, bad)

	send(t, other, aliveReq())
	expect(t, other, aliveReply())
}
