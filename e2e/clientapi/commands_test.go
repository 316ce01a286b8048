package clientapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/protocol"
)

type topicJSON struct {
	Name               string `json:"name"`
	CreateTimeStamp    int64  `json:"createTimeStamp"`
	ExpireAt           int64  `json:"expireAt"`
	CreateEventID      int64  `json:"createEventId"`
	StateChangeTime    int64  `json:"stateChangeTime"`
	StateChangeEventID int64  `json:"stateChangeEventId"`
	State              int    `json:"state"`
	TopicRoot          string `json:"topicRoot"`
}

// TestCommandsOverTCP drives every command of the write path through the
// real binary and checks replies and the files it leaves.
func TestCommandsOverTCP(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "")
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)

	// create, duplicate, expiry rules, name rules
	if err := c.Create("order", 0); err != nil {
		t.Fatalf("create: %v", err)
	}
	for _, tc := range []struct {
		name     string
		expireAt int64
		want     string
	}{
		{"order", 0, "topic exist"},
		{"soon", time.Now().UnixMilli() + 2000, "expire MUST more than 10s"},
		{"neg", -1, "expire MUST more than 10s"},
		{"bad name", 0, "invalid topic name"},
		{"../evil", 0, "invalid topic name"},
		{"..", 0, "invalid topic name"},
		{strings.Repeat("x", 129), 0, "invalid topic name"},
	} {
		if got := kit.BizText(c.Create(tc.name, tc.expireAt)); !strings.HasPrefix(got, tc.want) {
			t.Errorf("create %q expire %d: %q, want %q", tc.name, tc.expireAt, got, tc.want)
		}
	}
	if err := c.Create(strings.Repeat("y", 128), 0); err != nil {
		t.Fatalf("create 128-byte name: %v", err)
	}
	expireAt := time.Now().UnixMilli() + 3600_000
	if err := c.Create("life1", expireAt); err != nil {
		t.Fatalf("create with expiry: %v", err)
	}

	// publish one record with headers, then 100-record batches
	one := kit.Record([][2]string{{"traceId", "x1"}, {"k", ""}}, "hello")
	if err := c.Pub("order", one); err != nil {
		t.Fatalf("pub: %v", err)
	}
	var batch [][]byte
	for i := 0; i < 100; i++ {
		batch = append(batch, kit.Record([][2]string{{"i", fmt.Sprint(i)}}, fmt.Sprintf("body-%03d", i)))
	}
	for round := 0; round < 3; round++ {
		if err := c.Pub("order", batch...); err != nil {
			t.Fatalf("batch pub: %v", err)
		}
	}
	if got := kit.BizText(c.Pub("missing", one)); got != "topic not exist" {
		t.Errorf("pub to missing topic: %q", got)
	}
	if got := kit.BizText(c.Pub("bad name", one)); !strings.HasPrefix(got, "invalid topic name") {
		t.Errorf("pub to invalid name: %q", got)
	}

	// malformed payloads keep the connection usable
	for _, tc := range []struct {
		payload []byte
		want    string
	}{
		{[]byte{1, 2, 3}, "invalid request, payload size must be more than 8"},
		{append(one, 1, 2, 3), "invalid pub payload"},
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "invalid pub payload"},
	} {
		_, err := c.RoundTrip(kit.Must(protocol.AppendPub(nil, []byte("order"), nil, tc.payload)), protocol.ReplyPlain)
		if got := kit.BizText(err); got != tc.want {
			t.Errorf("pub payload %x: %q want %q", tc.payload, got, tc.want)
		}
	}
	if _, err := c.RoundTrip(kit.Must(protocol.AppendAlive(nil, nil)), protocol.ReplyPlain); err != nil {
		t.Fatalf("alive after errors: %v", err)
	}

	// info / list / valid list
	body, err := c.RoundTrip(kit.Must(protocol.AppendTopicInfo(nil, []byte("order"), nil)), protocol.ReplyJSON)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	wantPrefix := `{"name":"order","createTimeStamp":`
	if !bytes.HasPrefix(body, []byte(wantPrefix)) || !bytes.HasSuffix(body, []byte(`"state":0,"topicRoot":"/3/3/order"}`)) {
		t.Fatalf("info JSON %s", body)
	}
	var info topicJSON
	if err := json.Unmarshal(body, &info); err != nil || info.CreateEventID != 1 || info.StateChangeEventID != 1 || info.ExpireAt != 0 {
		t.Fatalf("info %+v %v", info, err)
	}
	if got := kit.BizText(must2(c.RoundTrip(kit.Must(protocol.AppendTopicInfo(nil, []byte("nope"), nil)), protocol.ReplyJSON))); got != "topic not exist" {
		t.Errorf("info missing: %q", got)
	}
	if got := kit.BizText(must2(c.RoundTrip(kit.Must(protocol.AppendTopicInfo(nil, nil, nil)), protocol.ReplyJSON))); got != "topic name is required" {
		t.Errorf("info without name: %q", got)
	}
	var list []topicJSON
	body, err = c.RoundTrip(kit.Must(protocol.AppendList(nil, nil)), protocol.ReplyJSON)
	if err != nil || json.Unmarshal(body, &list) != nil || len(list) != 3 || list[0].Name != "life1" || list[1].Name != "order" || list[0].ExpireAt != expireAt {
		t.Fatalf("list %s %v", body, err)
	}
	body, err = c.RoundTrip(kit.Must(protocol.AppendValidList(nil, nil, 1)), protocol.ReplyJSON)
	if err != nil || json.Unmarshal(body, &list) != nil || len(list) != 1 || list[0].Name != "order" {
		t.Fatalf("valid list from 1: %s %v", body, err)
	}

	// delete, then everything about the topic is gone
	if err := c.Del("order"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if got := kit.BizText(c.Del("order")); got != "topic not exist" {
		t.Errorf("second delete: %q", got)
	}
	if got := kit.BizText(c.Pub("order", one)); got != "topic not exist" {
		t.Errorf("pub after delete: %q", got)
	}

	// unknown commands are refused and the connection is closed
	req := make([]byte, protocol.HeaderSize)
	req[0] = 90 // no command: 41..44 are the queue commands (docs/protocol.md §12.6)
	_, err = c.RoundTrip(req, protocol.ReplyPlain)
	if got := kit.BizText(err); got != "don't support action" {
		t.Errorf("unknown command: %q", got)
	}
	c.C.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.R.ReadByte(); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Errorf("connection after unknown command: %v", err)
	}

	p.Term()
	s := kit.ReadStore(t, dir+"/data", []string{"order"})
	// binlog: create order(1), create y..(2), create life1(3), pub(4), 3×100 (5..304), delete(305)
	var ids []int64
	for _, b := range s.Binlog {
		ids = append(ids, b.EventID)
	}
	if fmt.Sprint(ids) != "[1 2 3 4 5 105 205 305]" {
		t.Fatalf("binlog eventIds %v", ids)
	}
	pubBlock := s.Binlog[3]
	if !bytes.Equal(pubBlock.Payload, one) {
		t.Fatalf("binlog payload %x want %x", pubBlock.Payload, one)
	}
}

func must2(_ []byte, err error) error { return err }

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}

// TestTopicFilesByteExact checks the bytes a publish leaves in the topic
// file: docs/protocol.md §5.6 command line, the record verbatim, a trailing newline.
func TestTopicFilesByteExact(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "")
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	if err := c.Create("order", 0); err != nil {
		t.Fatal(err)
	}
	recs := [][]byte{
		kit.Record([][2]string{{"traceId", "x1"}}, "hello"),
		kit.Record(nil, "a"),
		kit.Record([][2]string{{"k1", "v1"}, {"k2", "v2"}}, string([]byte{0, '\n', '\t', 0xff})),
	}
	if err := c.Pub("order", recs[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Pub("order", recs[1], recs[2]); err != nil {
		t.Fatal(err)
	}
	p.Term()
	s := kit.ReadStore(t, dir+"/data", []string{"order"})
	blocks := s.Topics["order"]
	if len(blocks) != 3 {
		t.Fatalf("%d topic blocks", len(blocks))
	}
	for i, b := range blocks {
		if !bytes.Equal(b.Record, recs[i]) {
			t.Errorf("record %d: %x want %x", i, b.Record, recs[i])
		}
		if b.EventID != int64(2+i) {
			t.Errorf("record %d eventId %d", i, b.EventID)
		}
	}
	// The first pub's binlog block starts right after the 53-byte create.
	if blocks[0].SrcFileID != 0 || blocks[0].SrcPos != 53 || blocks[1].SrcPos != blocks[2].SrcPos || blocks[2].Index != 1 {
		t.Fatalf("source positions %+v", blocks)
	}
	if len(s.Binlog) != 3 || s.Binlog[0].Cmd != 2 || !bytes.Equal(s.Binlog[0].Payload, make([]byte, 8)) {
		t.Fatalf("binlog %+v", s.Binlog)
	}
}
