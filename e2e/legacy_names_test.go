package e2e

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/topicblock"
)

// craftOriginalDir writes the binlog an original smss leaves after
// creating each topic and publishing two messages to it, with names this
// server refuses to create. No meta and no topic files: start-up recovery
// rebuilds both from the binlog, as for any data directory whose meta
// lacks a checkpoint.
func craftOriginalDir(t *testing.T, dataDir string, topics []string) {
	t.Helper()
	dir := filepath.Join(dataDir, "binlog")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var buf []byte
	id := int64(1)
	now := time.Now().UnixMilli()
	for _, name := range topics {
		buf = binlog.AppendBlock(buf, &binlog.Block{WriteTime: now, Cmd: binlog.CmdCreate, EventID: id, Timestamp: now,
			Topic: []byte(name), Payload: binary.LittleEndian.AppendUint64(nil, 0)})
		id++
		recs := append(record(nil, name+"-1"), record(nil, name+"-2")...)
		buf = binlog.AppendBlock(buf, &binlog.Block{WriteTime: now, Cmd: binlog.CmdPub, EventID: id, Timestamp: now,
			Topic: []byte(name), Payload: recs})
		id += 2
	}
	if err := os.WriteFile(filepath.Join(dir, "0.log"), buf, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A data directory of the original holding topics named "", ".", with a
// backslash and with a control byte, beside a normal topic hashed into the
// same bucket as "": the real server lists them, answers info, delivers
// their messages and deletes them, leaving the bucket mate intact; a new
// topic with such a name is still refused.
func TestOriginalDirWithRefusedTopicNames(t *testing.T) {
	p1, p2 := topicblock.Buckets(nil, 10)
	mate := ""
	for i := 0; mate == ""; i++ {
		if q1, q2 := topicblock.Buckets([]byte(fmt.Sprint("mate", i)), 10); q1 == p1 && q2 == p2 {
			mate = fmt.Sprint("mate", i)
		}
	}
	legacy := []string{"", ".", `a\b`, "ctl\x01"}
	dir := t.TempDir()
	writeConfig(t, dir, "")
	craftOriginalDir(t, filepath.Join(dir, "data"), append(append([]string{}, legacy...), mate))
	p := start(t, dir)
	c := dial(t, p.addr)

	body, err := c.roundTrip(must(protocol.AppendList(nil, nil)), protocol.ReplyJSON)
	if err != nil {
		t.Fatal(err)
	}
	var list []struct{ Name string }
	if err := json.Unmarshal(body, &list); err != nil || len(list) != len(legacy)+1 {
		t.Fatalf("list: %s (%v)", body, err)
	}
	for _, name := range legacy {
		if name != "" { // info needs a topic name on the wire (§1.5.8)
			body, err := c.roundTrip(must(protocol.AppendTopicInfo(nil, []byte(name), nil)), protocol.ReplyJSON)
			if err != nil || !strings.Contains(string(body), "topicRoot") {
				t.Errorf("info %q: %s %v", name, body, err)
			}
		}
		s := dial(t, p.addr)
		if err := s.sub(name, "w", 0, 10, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		u, err := s.nextData(10 * time.Second)
		if err != nil || len(u.msgs) != 2 || string(u.msgs[1].Body) != name+"-2" {
			t.Errorf("sub %q: %v %v", name, u, err)
		}
		s.c.Close()
		if err := c.create(name+"\x02", 0); err == nil || !strings.Contains(err.Error(), "invalid topic name") {
			t.Errorf("create of a refused name: %v", err)
		}
		if err := c.del(name); err != nil {
			t.Errorf("delete %q: %v", name, err)
		}
	}
	// The bucket mate of "" kept its messages through the delete of "".
	s := dial(t, p.addr)
	if err := s.sub(mate, "w", 0, 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if u, err := s.nextData(10 * time.Second); err != nil || len(u.msgs) != 2 {
		t.Fatalf("bucket mate %s after deleting \"\": %v %v", mate, u, err)
	}
	p.stop()
	// And after a restart.
	p = start(t, dir)
	s = dial(t, p.addr)
	if err := s.sub(mate, "w2", 0, 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if u, err := s.nextData(10 * time.Second); err != nil || len(u.msgs) != 2 {
		t.Fatalf("bucket mate %s after a restart: %v %v", mate, u, err)
	}
}
