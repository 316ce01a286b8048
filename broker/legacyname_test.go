package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/topicblock"
)

// legacySubmit writes a command the way an original server would have
// accepted it: without this server's name rule, so the binlog, meta and
// files are what the original left for such a topic.
func legacySubmit(t *testing.T, b *Broker, op writerOp, name string, records []byte, count int) {
	t.Helper()
	c := getCommand()
	defer putCommand(c)
	c.op, c.topic, c.records, c.count, c.timestamp = op, name, records, count, b.opts.Now()
	if err := b.submit(context.Background(), c); err != nil {
		t.Fatalf("legacy %v %q: %v", op, name, err)
	}
}

// bucketMate returns a valid topic name hashed into the same bucket as name.
func bucketMate(t *testing.T, name string) string {
	p1, p2 := topicblock.Buckets([]byte(name), 10)
	for i := range 100000 {
		n := fmt.Sprintf("mate%d", i)
		if q1, q2 := topicblock.Buckets([]byte(n), 10); q1 == p1 && q2 == p2 {
			return n
		}
	}
	t.Fatal("no bucket mate")
	return ""
}

// A data directory of the original with topics named "", ".", with a
// backslash, a control byte and a space: they open in place, are listed,
// can be read and deleted, and deleting "" or "." (whose directory is the
// hashing bucket itself) leaves the other topics of that bucket intact.
// Creating or publishing to such names stays refused.
func TestLegacyTopicNames(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b := openTest(t, dir, nil)
	legacy := []string{"", ".", `a\b`, "ctl\x01", "with space"}
	mates := map[string]string{}
	for _, n := range legacy {
		legacySubmit(t, b, opCreate, n, nil, 0)
		legacySubmit(t, b, opPub, n, append(rec(n+"-1"), rec(n+"-2")...), 2)
		if n == "" || n == "." {
			m := bucketMate(t, n)
			mates[n] = m
			if _, err := b.CreateTopic(ctx, []byte(m), 0); err != nil && !errors.Is(err, protocol.ErrTopicExist) {
				t.Fatal(err)
			}
			if _, err := b.Publish(ctx, []byte(m), rec("mate of "+n), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openTest(t, dir, nil)
	defer b.Close()
	all, err := b.Topics()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range all {
		listed[m.Name] = true
	}
	for _, n := range legacy {
		t.Run(fmt.Sprintf("%q", n), func(t *testing.T) {
			if !listed[n] {
				t.Fatalf("not listed: %v", all)
			}
			m, err := b.Topic([]byte(n))
			if err != nil {
				t.Fatalf("info: %v", err)
			}
			if want := topicblock.RelRoot([]byte(n), 10); m.TopicRoot != want {
				t.Errorf("topicRoot %q, want the original's %q", m.TopicRoot, want)
			}
			s, err := b.Subscribe([]byte(n), []byte("w"), 0)
			if err != nil {
				t.Fatalf("sub: %v", err)
			}
			_, got, err := s.Next(ctx, nil, 10, time.Second)
			s.Close()
			if err != nil || got != 2 {
				t.Fatalf("sub read %d messages (%v), want 2", got, err)
			}
			if _, err := b.CreateTopic(ctx, []byte(n+"x\x02"), 0); err == nil || !strings.Contains(err.Error(), "invalid topic name") {
				t.Errorf("create of a refused name: %v", err)
			}
			if _, err := b.Publish(ctx, []byte(n), rec("new"), 1); err == nil || !strings.Contains(err.Error(), "invalid topic name") {
				t.Errorf("pub to a legacy name: %v", err)
			}
			if _, err := b.DeleteTopic(ctx, []byte(n)); err != nil {
				t.Fatalf("delete: %v", err)
			}
			// Once no topic has the name, it gets the rule's refusal, as
			// a name that never named one (docs/protocol.md §11).
			if _, err := b.Topic([]byte(n)); err == nil || !strings.Contains(err.Error(), "invalid topic name") {
				t.Errorf("info after delete: %v", err)
			}
			logs, _ := filepath.Glob(filepath.Join(topicblock.Dir(filepath.Join(dir, "topic"), []byte(n), 10), "*.log"))
			if len(logs) != 0 {
				t.Errorf("files left after delete: %v", logs)
			}
			// Now that it is gone, the name is refused like any other.
			if _, err := b.Subscribe([]byte(n), []byte("w"), 0); err == nil || !strings.Contains(err.Error(), "invalid topic name") {
				t.Errorf("sub after delete: %v", err)
			}
		})
	}
	for _, bad := range []string{"a/b", "..", "../x"} {
		if _, err := b.Subscribe([]byte(bad), []byte("w"), 0); err == nil || !strings.Contains(err.Error(), "invalid topic name") {
			t.Errorf("sub %q: %v", bad, err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The bucket mates kept their directories and messages.
	for n, m := range mates {
		if _, err := os.Stat(topicblock.Dir(filepath.Join(dir, "topic"), []byte(m), 10)); err != nil {
			t.Errorf("deleting %q removed %q's directory: %v", n, m, err)
			continue
		}
		if ids, _ := readTopic(t, dir, m); len(ids) != 1 {
			t.Errorf("deleting %q: %q holds %v", n, m, ids)
		}
	}
}

// A slave of a master holding topics with names the original accepted and
// this server refuses to create applies their creates and messages as
// opening the original's data directory does (TestLegacyTopicNames): after
// a promotion every one is listed and read, with its topicRoot as the
// original prints it. The topic sync of a slave that starts after the
// creates keeps them too. A create whose directory would leave the bucket
// ("..") is never applied.
func TestReplicatedLegacyTopicNames(t *testing.T) {
	ctx := context.Background()
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openTest(t, mdir, nil)
	legacy := []string{"", ".", `a\b`, "ctl\x01", "with space"}
	for _, n := range legacy {
		legacySubmit(t, m, opCreate, n, nil, 0)
		legacySubmit(t, m, opPub, n, append(rec(n+"-1"), rec(n+"-2")...), 2)
	}
	mate := bucketMate(t, ".")
	if _, err := m.CreateTopic(ctx, []byte(mate), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Publish(ctx, []byte(mate), rec("mate"), 1); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, sdir, func(o *Options) { o.Slave = true })
	replicateAll(t, m, s, 0)
	// A create of "..": refused, logged, the binlog still kept whole.
	dotdot := binlog.AppendBlock(nil, &binlog.Block{WriteTime: 1, Cmd: binlog.CmdCreate, EventID: m.LastEventID() + 1,
		Timestamp: 1, Topic: []byte(".."), Payload: make([]byte, 8)})
	if _, err := s.ApplyReplicated(ctx, dotdot); err != nil {
		t.Fatalf("apply a create of \"..\": %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, sdir, func(o *Options) { o.Slave = true })
	if _, err := s.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	all, err := s.Topics()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(legacy)+1 {
		t.Fatalf("promoted slave lists %d topics, want %d: %v", len(all), len(legacy)+1, all)
	}
	for _, n := range append(legacy, mate) {
		info, err := s.Topic([]byte(n))
		if err != nil {
			t.Fatalf("info %q on the promoted slave: %v", n, err)
		}
		if want := topicblock.RelRoot([]byte(n), 10); info.TopicRoot != want {
			t.Errorf("topicRoot of %q %q, want %q", n, info.TopicRoot, want)
		}
		want := 2
		if n == mate {
			want = 1
		}
		sub, err := s.Subscribe([]byte(n), []byte("w"), 0)
		if err != nil {
			t.Fatalf("sub %q on the promoted slave: %v", n, err)
		}
		_, got, err := sub.Next(ctx, nil, 10, time.Second)
		sub.Close()
		if err != nil || got != want {
			t.Errorf("sub %q on the promoted slave read %d messages (%v), want %d", n, got, err, want)
		}
	}
	if _, err := s.Topic([]byte("..")); err == nil {
		t.Error("a replicated create of \"..\" made a topic")
	}

	// A slave that starts after the creates learns the topics from the
	// valid list.
	s2 := openTest(t, t.TempDir(), func(o *Options) { o.Slave = true })
	defer s2.Close()
	for _, n := range append(legacy, "..") {
		info, err := m.Topic([]byte(n))
		if n == ".." {
			info, err = meta.Topic{Name: ".."}, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		ok, err := s2.SyncTopic(ctx, info)
		if n == ".." {
			if err == nil || ok {
				t.Errorf("topic sync of \"..\": %v %v, want refused", ok, err)
			}
			continue
		}
		if err != nil || !ok {
			t.Errorf("topic sync of %q: %v %v", n, ok, err)
		}
	}
}
