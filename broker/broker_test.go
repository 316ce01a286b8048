package broker

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

func rec(body string) []byte {
	r, err := protocol.AppendRecord(nil, protocol.Record{Body: []byte(body)})
	if err != nil {
		panic(err)
	}
	return r
}

func openTest(t *testing.T, dir string, mod func(*Options)) *Broker {
	t.Helper()
	o := Options{Dir: dir, FlushLevel: 1}
	if mod != nil {
		mod(&o)
	}
	b, err := Open(o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return b
}

// readTopic returns eventIds and records stored in a topic's files.
func readTopic(t *testing.T, dir, name string) ([]int64, [][]byte) {
	t.Helper()
	l, err := segment.Open(segment.Options{Dir: topicblock.Dir(filepath.Join(dir, "topic"), []byte(name), 10), Decode: decodeTopic})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	var recs [][]byte
	_, err = l.Scan(segment.Position{}, func(_ segment.Position, first, _ int64, raw []byte) error {
		blk, _, err := topicblock.DecodeBlock(raw)
		if err != nil {
			return err
		}
		ids = append(ids, first)
		recs = append(recs, append([]byte(nil), blk.Record...))
		return nil
	})
	if err != nil {
		t.Fatalf("scan topic %s: %v", name, err)
	}
	return ids, recs
}

func readBinlog(t *testing.T, dir string) []binlog.Block {
	t.Helper()
	l, err := segment.Open(segment.Options{Dir: filepath.Join(dir, "binlog"), Decode: decodeBinlog})
	if err != nil {
		t.Fatal(err)
	}
	var out []binlog.Block
	_, err = l.Scan(segment.Position{}, func(_ segment.Position, _, _ int64, raw []byte) error {
		blk, _, err := binlog.DecodeBlock(append([]byte(nil), raw...))
		out = append(out, blk)
		return err
	})
	if err != nil {
		t.Fatalf("scan binlog: %v", err)
	}
	return out
}

func TestPublishCreateDeleteReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b := openTest(t, dir, nil)
	if id, err := b.CreateTopic(ctx, []byte("order"), 0); err != nil || id != 1 {
		t.Fatalf("create: %d %v", id, err)
	}
	if _, err := b.CreateTopic(ctx, []byte("order"), 0); !errors.Is(err, protocol.ErrTopicExist) {
		t.Fatalf("duplicate create: %v", err)
	}
	if _, err := b.Publish(ctx, []byte("nope"), rec("x"), 1); !errors.Is(err, protocol.ErrTopicNotExist) {
		t.Fatalf("pub to missing: %v", err)
	}
	id, err := b.Publish(ctx, []byte("order"), rec("hello"), 1)
	if err != nil || id != 2 {
		t.Fatalf("pub: %d %v", id, err)
	}
	batch := append(append(rec("a"), rec("bb")...), rec("ccc")...)
	if id, err = b.Publish(ctx, []byte("order"), batch, 3); err != nil || id != 3 {
		t.Fatalf("batch pub: %d %v", id, err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	ids, recs := readTopic(t, dir, "order")
	if want := []int64{2, 3, 4, 5}; !equalIDs(ids, want) {
		t.Fatalf("topic ids %v want %v", ids, want)
	}
	if !bytes.Equal(recs[0], rec("hello")) || !bytes.Equal(recs[3], rec("ccc")) {
		t.Fatalf("records differ: %q", recs)
	}
	b = openTest(t, dir, nil)
	if id, err := b.Publish(ctx, []byte("order"), rec("after"), 1); err != nil || id != 6 {
		t.Fatalf("pub after reopen: %d %v", id, err)
	}
	if _, err := b.DeleteTopic(ctx, []byte("order")); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := b.Topic([]byte("order")); !errors.Is(err, protocol.ErrTopicNotExist) {
		t.Fatalf("info after delete: %v", err)
	}
	if _, err := b.CreateTopic(ctx, []byte("order"), 0); err != nil {
		t.Fatalf("recreate: %v", err)
	}
	b.Close()
	if ids, _ := readTopic(t, dir, "order"); len(ids) != 0 {
		t.Fatalf("recreated topic inherited %v", ids)
	}
	blocks := readBinlog(t, dir)
	var cmds []uint8
	for _, blk := range blocks {
		cmds = append(cmds, blk.Cmd)
	}
	if want := []uint8{2, 1, 1, 1, 3, 2}; !bytes.Equal(cmds, want) {
		t.Fatalf("binlog cmds %v want %v", cmds, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "trash")); err != nil {
		t.Fatal(err)
	}
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
