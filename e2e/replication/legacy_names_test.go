package replication

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
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
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
		recs := append(kit.Record(nil, name+"-1"), kit.Record(nil, name+"-2")...)
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
	kit.WriteConfig(t, dir, "")
	craftOriginalDir(t, filepath.Join(dir, "data"), append(append([]string{}, legacy...), mate))
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)

	body, err := c.RoundTrip(kit.Must(protocol.AppendList(nil, nil)), protocol.ReplyJSON)
	if err != nil {
		t.Fatal(err)
	}
	var list []struct{ Name string }
	if err := json.Unmarshal(body, &list); err != nil || len(list) != len(legacy)+1 {
		t.Fatalf("list: %s (%v)", body, err)
	}
	for _, name := range legacy {
		if name != "" { // info needs a topic name on the wire (§1.5.8)
			body, err := c.RoundTrip(kit.Must(protocol.AppendTopicInfo(nil, []byte(name), nil)), protocol.ReplyJSON)
			if err != nil || !strings.Contains(string(body), "topicRoot") {
				t.Errorf("info %q: %s %v", name, body, err)
			}
		}
		s := kit.Dial(t, p.Addr)
		if err := s.Sub(name, "w", 0, 10, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		u, err := s.NextData(10 * time.Second)
		if err != nil || len(u.Msgs) != 2 || string(u.Msgs[1].Body) != name+"-2" {
			t.Errorf("sub %q: %v %v", name, u, err)
		}
		s.C.Close()
		if err := c.Create(name+"\x02", 0); err == nil || !strings.Contains(err.Error(), "invalid topic name") {
			t.Errorf("create of a refused name: %v", err)
		}
		if err := c.Del(name); err != nil {
			t.Errorf("delete %q: %v", name, err)
		}
	}
	// The bucket mate of "" kept its messages through the delete of "".
	s := kit.Dial(t, p.Addr)
	if err := s.Sub(mate, "w", 0, 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if u, err := s.NextData(10 * time.Second); err != nil || len(u.Msgs) != 2 {
		t.Fatalf("bucket mate %s after deleting \"\": %v %v", mate, u, err)
	}
	p.Term()
	// And after a restart.
	p = kit.Start(t, dir)
	s = kit.Dial(t, p.Addr)
	if err := s.Sub(mate, "w2", 0, 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if u, err := s.NextData(10 * time.Second); err != nil || len(u.Msgs) != 2 {
		t.Fatalf("bucket mate %s after a restart: %v %v", mate, u, err)
	}
}

// The rolling upgrade of docs/upgrading.md, on real
// processes: a master serving an original data directory whose topics
// include names this server refuses to create, a slave of it from the
// start (the creates come in the binlog) and one that starts after them
// (they come in the valid list). Both keep every topic; the first,
// promoted after the master is killed, serves every message of each, with
// the topicRoot the original prints (TestReplicatedLegacyTopicNames is the
// same in the broker).
func TestRollingUpgradeKeepsLegacyTopicNames(t *testing.T) {
	legacy := []string{"", ".", `a\b`, "ctl\x01", "with space"}
	mdir := t.TempDir()
	mport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, "")
	craftOriginalDir(t, filepath.Join(mdir, "data"), legacy)
	master := kit.StartArgs(t, mdir, "-role", "master")
	last := rawStatus(t, kit.Dial(t, master.Addr)).LastEventID

	fromStart, later := t.TempDir(), t.TempDir()
	kit.ReplConfig(t, fromStart, kit.FreePort(t), "replication:\n  promoteQuietMs: 200\n")
	kit.ReplConfig(t, later, kit.FreePort(t), "")
	s1 := kit.StartReplSlave(t, fromStart, mport, 0)
	s2 := kit.StartReplSlave(t, later, mport, last)
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(fromStart, "data"), s1, 30*time.Second)
	listed := func(p *kit.Proc) map[string]protocol.TopicInfo {
		body, err := kit.Dial(t, p.Addr).RoundTrip(kit.Must(protocol.AppendList(nil, nil)), protocol.ReplyJSON)
		if err != nil {
			t.Fatalf("list on %s: %v", p.Addr, err)
		}
		var list []protocol.TopicInfo
		if len(body) == 0 {
			return nil // no topic yet
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatalf("list on %s: %s: %v", p.Addr, body, err)
		}
		out := map[string]protocol.TopicInfo{}
		for _, ti := range list {
			out[ti.Name] = ti
		}
		return out
	}
	var got map[string]protocol.TopicInfo
	if !smsstest.Poll(30*time.Second, func() bool { got = listed(s2); return len(got) == len(legacy) }) {
		t.Fatalf("the slave that started at eventId %d lists %v, want %q\n%s", last, got, legacy, kit.Tail(s2.Out.String(), 3000))
	}
	// The README's steps: the stream is quiet (no write is missing here)
	// before the master goes and the slave is promoted.
	if !smsstest.Poll(30*time.Second, func() bool { st := slaveStreamOf(t, s1.Addr); return st != nil && st.CaughtUp }) {
		t.Fatalf("the slave never caught up: %+v", slaveStreamOf(t, s1.Addr))
	}
	master.Kill()
	sc := kit.Dial(t, s1.Addr)
	if body, err := sc.RoundTrip(kit.Must(protocol.AppendPromote(nil, nil)), protocol.ReplyJSON); err != nil {
		t.Fatalf("promote: %s %v", body, err)
	}
	got = listed(s1)
	for _, name := range legacy {
		ti, ok := got[name]
		if !ok {
			t.Errorf("the promoted slave lost topic %q: lists %v", name, got)
			continue
		}
		p1, p2 := topicblock.Buckets([]byte(name), 10)
		want := fmt.Sprintf("/%d/%d/%s", p1, p2, name)
		if name == "" || name == "." {
			want = fmt.Sprintf("/%d/%d", p1, p2)
		}
		if ti.TopicRoot != want {
			t.Errorf("topicRoot of %q is %q, the original prints %q", name, ti.TopicRoot, want)
		}
		s := kit.Dial(t, s1.Addr)
		if err := s.Sub(name, "w", 0, 10, 5*time.Second); err != nil {
			t.Fatalf("sub %q on the promoted slave: %v", name, err)
		}
		u, err := s.NextData(10 * time.Second)
		if err != nil || len(u.Msgs) != 2 || string(u.Msgs[0].Body) != name+"-1" || string(u.Msgs[1].Body) != name+"-2" {
			t.Errorf("sub %q on the promoted slave: %v %v", name, u, err)
		}
		s.C.Close()
	}
}
