package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// copyTree copies a closed data directory.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// binlogConcat concatenates the binlog files of a data directory.
func binlogConcat(t *testing.T, dir string) []byte {
	t.Helper()
	l, err := segment.Open(segment.Options{Dir: filepath.Join(dir, "binlog"), Decode: decodeBinlog})
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, id := range l.Files() {
		b, err := os.ReadFile(l.Path(id))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// state is what a node serves: topics (name, createEventId, expireAt),
// their messages and the pending delays.
type nodeState struct {
	Topics   []string
	Messages map[string][]string
	Delays   []string
	Lifetime []string // topics with an lf@ entry, in expiry order
	Last     int64
}

func stateOf(t *testing.T, dir string) nodeState {
	t.Helper()
	b := openTest(t, dir, func(o *Options) { o.Slave = true })
	defer b.Close()
	st := nodeState{Messages: map[string][]string{}, Last: b.LastEventID()}
	ts, _ := b.Topics()
	for _, m := range ts {
		st.Topics = append(st.Topics, m.Name+"@"+itoa(m.CreateEventID)+"/"+itoa(m.ExpireAt))
		ids, recs := readTopic(t, dir, m.Name)
		for i := range ids {
			st.Messages[m.Name] = append(st.Messages[m.Name], itoa(ids[i])+":"+string(recs[i]))
		}
	}
	ds, err := b.meta.DueDelays(math.MaxInt64, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		st.Delays = append(st.Delays, string(d.Key)+"="+string(d.Value))
	}
	sort.Strings(st.Delays)
	if st.Lifetime, err = b.meta.ExpiredTopics(math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	return st
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestRewind: the tail surgery on real files and a real badger. Each case
// builds one common history, copies the closed data directory at that
// point as the reference, writes a divergent tail and rewinds: the binlog
// must be byte-identical to the reference, topics, messages and delays
// equal to it, the node must reopen at the prefix's last eventId, and the
// moved tail must be in the diverged directory with a manifest.
func TestRewind(t *testing.T) {
	far := time.Now().Add(240 * time.Hour).UnixMilli()
	type tc struct {
		name    string
		tail    func(t *testing.T, b *Broker, delay []byte)
		actions map[string]string // topic → manifest action
		delays  RewoundDelays
	}
	must := func(t *testing.T) func(int64, error) {
		return func(_ int64, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := context.Background()
	cases := []tc{
		{name: "not diverged", tail: func(*testing.T, *Broker, []byte) {}},
		{name: "ahead by blocks", tail: func(t *testing.T, b *Broker, _ []byte) {
			id, err := b.Publish(ctx, []byte("keep"), append(rec("y1"), rec("y2")...), 2)
			must(t)(id, err)
			must(t)(b.Publish(ctx, []byte("keep"), rec("y3"), 1))
			must(t)(b.Publish(ctx, []byte("victim"), rec("y4"), 1))
		}, actions: map[string]string{"keep": "truncated", "victim": "truncated"}},
		{name: "topic created after", tail: func(t *testing.T, b *Broker, _ []byte) {
			must(t)(b.CreateTopic(ctx, []byte("fresh"), far+1))
			must(t)(b.Publish(ctx, []byte("fresh"), rec("f1"), 1))
			must(t)(b.Publish(ctx, []byte("keep"), rec("k1"), 1))
		}, actions: map[string]string{"fresh": "removed", "keep": "truncated"}},
		{name: "topic deleted after", tail: func(t *testing.T, b *Broker, _ []byte) {
			must(t)(b.DeleteTopic(ctx, []byte("victim")))
			must(t)(b.Publish(ctx, []byte("keep"), rec("k1"), 1))
		}, actions: map[string]string{"victim": "restored", "keep": "truncated"}},
		{name: "topic deleted and re-created after", tail: func(t *testing.T, b *Broker, _ []byte) {
			must(t)(b.DeleteTopic(ctx, []byte("victim")))
			must(t)(b.CreateTopic(ctx, []byte("victim"), 0))
			must(t)(b.Publish(ctx, []byte("victim"), rec("v-new"), 1))
		}, actions: map[string]string{"victim": "restored"}},
		{name: "topic created and deleted after", tail: func(t *testing.T, b *Broker, _ []byte) {
			must(t)(b.CreateTopic(ctx, []byte("brief"), 0))
			must(t)(b.Publish(ctx, []byte("brief"), rec("b1"), 1))
			must(t)(b.DeleteTopic(ctx, []byte("brief")))
		}},
		{name: "delay stored after", tail: func(t *testing.T, b *Broker, _ []byte) {
			must(t)(b.PublishDelay(ctx, []byte("keep"), rec("later"), 1, 3_600_000))
		}, delays: RewoundDelays{Removed: 1}},
		{name: "delay applied after", tail: func(t *testing.T, b *Broker, delay []byte) {
			must(t)(b.ApplyDelay(ctx, "keep", delay))
		}, actions: map[string]string{"keep": "truncated"}, delays: RewoundDelays{Restored: 1}},
		{name: "everything", tail: func(t *testing.T, b *Broker, delay []byte) {
			must(t)(b.ApplyDelay(ctx, "keep", delay))
			must(t)(b.PublishDelay(ctx, []byte("victim"), rec("later"), 1, 3_600_000))
			must(t)(b.CreateTopic(ctx, []byte("fresh"), 0))
			must(t)(b.Publish(ctx, []byte("fresh"), append(rec("f1"), rec("f2")...), 2))
			must(t)(b.DeleteTopic(ctx, []byte("victim")))
			must(t)(b.DeleteTopic(ctx, []byte("lifed")))
			must(t)(b.Publish(ctx, []byte("keep"), rec("k1"), 1))
		}, actions: map[string]string{"keep": "truncated", "fresh": "removed", "victim": "restored", "lifed": "restored"},
			delays: RewoundDelays{Removed: 1, Restored: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, ref := t.TempDir(), t.TempDir()
			b := openTest(t, dir, nil)
			must(t)(b.CreateTopic(ctx, []byte("keep"), 0))
			must(t)(b.Publish(ctx, []byte("keep"), append(append(rec("a"), rec("b")...), rec("c")...), 3))
			must(t)(b.CreateTopic(ctx, []byte("victim"), 0))
			must(t)(b.Publish(ctx, []byte("victim"), rec("v1"), 1))
			must(t)(b.Publish(ctx, []byte("victim"), rec("v2"), 1))
			must(t)(b.CreateTopic(ctx, []byte("lifed"), far))
			must(t)(b.Publish(ctx, []byte("lifed"), rec("l1"), 1))
			must(t)(b.PublishDelay(ctx, []byte("keep"), rec("d1"), 1, 3_600_000))
			must(t)(b.Publish(ctx, []byte("keep"), rec("d"), 1))
			ds, err := b.meta.DueDelays(math.MaxInt64, 10)
			if err != nil || len(ds) != 1 {
				t.Fatalf("delays %v %v", ds, err)
			}
			delay := ds[0].Value
			at, commonLast := b.binlog.Committed(), b.LastEventID()
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			copyTree(t, dir, ref)
			want := stateOf(t, ref)
			wantBin := binlogConcat(t, ref)

			b = openTest(t, dir, nil)
			c.tail(t, b, delay)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			before := binlogConcat(t, dir)
			beforeMsgs := map[string][]string{}
			for _, name := range []string{"keep", "victim", "lifed"} {
				beforeMsgs[name] = messagesOf(t, dir, name)
			}
			man, out, err := Rewind(Options{Dir: dir, Logger: b.log}, RewindRequest{At: at, CommonLast: commonLast, Master: "test:1", Reason: "test"})
			if err != nil {
				t.Fatalf("rewind: %v", err)
			}
			if got := binlogConcat(t, dir); !bytes.Equal(got, wantBin) {
				t.Fatalf("binlog after rewind: %d bytes, want the %d bytes of the prefix", len(got), len(wantBin))
			}
			// The surgery itself cut the topics (not the recovery of the
			// next start): their files hold the reference's messages.
			for _, name := range []string{"keep"} {
				if got := messagesOf(t, dir, name); strings.Join(got, ",") != strings.Join(want.Messages[name], ",") {
					t.Fatalf("topic %s right after the rewind: %v, want %v", name, got, want.Messages[name])
				}
			}
			if got := stateOf(t, dir); !equalJSON(got, want) {
				t.Fatalf("state after rewind\n got %s\nwant %s", js(got), js(want))
			}
			if len(before) == len(wantBin) {
				if man != nil || out != "" {
					t.Fatalf("not diverged, yet a rewind: %+v", man)
				}
				if _, err := os.Stat(filepath.Join(dir, DivergedDir)); !os.IsNotExist(err) {
					t.Fatalf("diverged directory created without a tail: %v", err)
				}
				return
			}
			if man == nil {
				t.Fatal("no manifest for a tail")
			}
			// The moved binlog bytes are exactly the tail.
			var moved []byte
			for _, f := range man.BinlogFiles {
				data, err := os.ReadFile(filepath.Join(out, f.Path))
				if err != nil {
					t.Fatal(err)
				}
				moved = append(moved, data...)
			}
			if !bytes.Equal(moved, before[len(wantBin):]) {
				t.Fatalf("moved binlog: %d bytes, want the %d bytes of the tail", len(moved), len(before)-len(wantBin))
			}
			var onDisk RewindManifest
			data, err := os.ReadFile(filepath.Join(out, "manifest.json"))
			if err != nil || json.Unmarshal(data, &onDisk) != nil || !equalJSON(onDisk, *man) {
				t.Fatalf("manifest on disk %s (%v), returned %s", data, err, js(man))
			}
			if man.CommonLastEventID != commonLast || man.FirstEventID != commonLast+1 || man.Blocks[0].EventID != commonLast+1 {
				t.Fatalf("manifest range %+v, common %d", man, commonLast)
			}
			got := map[string]string{}
			for _, mt := range man.Topics {
				got[mt.Name] = mt.Action
				if mt.Action == "truncated" {
					// Moved + kept = what the topic held before.
					moved := messagesIn(t, filepath.Join(out, "topic", mt.Name))
					if len(moved) != mt.Messages || len(mt.Files) == 0 {
						t.Fatalf("topic %s: %d messages in the moved files, manifest says %d in %v", mt.Name, len(moved), mt.Messages, mt.Files)
					}
					all := append(append([]string(nil), want.Messages[mt.Name]...), moved...)
					if strings.Join(all, ",") != strings.Join(beforeMsgs[mt.Name], ",") {
						t.Fatalf("topic %s: kept %v + moved %v, before %v", mt.Name, want.Messages[mt.Name], moved, beforeMsgs[mt.Name])
					}
				}
				if mt.Action == "removed" {
					if _, err := os.Stat(filepath.Join(out, mt.Dir)); err != nil {
						t.Fatalf("moved topic dir: %v", err)
					}
				}
			}
			if len(c.actions) == 0 {
				c.actions = map[string]string{}
			}
			if !equalJSON(got, c.actions) {
				t.Fatalf("topic actions %v, want %v", got, c.actions)
			}
			if man.Delays != c.delays {
				t.Fatalf("delays %+v, want %+v", man.Delays, c.delays)
			}
			// The node writes on from the prefix (as a master here).
			b = openTest(t, dir, nil)
			defer b.Close()
			if id, err := b.Publish(ctx, []byte("keep"), rec("next"), 1); err != nil || id != commonLast+1 {
				t.Fatalf("publish after rewind: %d %v, want eventId %d", id, err, commonLast+1)
			}
		})
	}
}

// TestRewindRefusesAWrongPoint: a position that is not the block boundary
// after the named eventId changes nothing.
func TestRewindRefusesAWrongPoint(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b := openTest(t, dir, nil)
	b.CreateTopic(ctx, []byte("keep"), 0)
	b.Publish(ctx, []byte("keep"), append(rec("a"), rec("b")...), 2) // 2..3
	at := b.binlog.Committed()
	b.Publish(ctx, []byte("keep"), rec("c"), 1)
	b.Close()
	before := binlogConcat(t, dir)
	for _, req := range []RewindRequest{
		{At: at, CommonLast: 2}, // inside the block
		{At: segment.Position{FileID: at.FileID, Offset: 3}, CommonLast: 3}, // not a boundary
		{At: segment.Position{FileID: at.FileID + 5}, CommonLast: 0},        // empty prefix not at the start
	} {
		if _, _, err := Rewind(Options{Dir: dir}, req); err == nil {
			t.Fatalf("rewind %+v accepted", req)
		}
	}
	if !bytes.Equal(binlogConcat(t, dir), before) {
		t.Fatal("a refused rewind changed the binlog")
	}
	if _, err := os.Stat(filepath.Join(dir, DivergedDir)); !os.IsNotExist(err) {
		t.Fatalf("a refused rewind created %s: %v", DivergedDir, err)
	}
}

// messagesOf lists "eventId:record" of a topic in a data directory.
func messagesOf(t *testing.T, dir, name string) []string {
	t.Helper()
	ids, recs := readTopic(t, dir, name)
	var out []string
	for i := range ids {
		out = append(out, itoa(ids[i])+":"+string(recs[i]))
	}
	return out
}

// messagesIn lists "eventId:record" of the topic files in a directory.
func messagesIn(t *testing.T, dir string) []string {
	t.Helper()
	l, err := segment.Open(segment.Options{Dir: dir, Decode: decodeTopic})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if _, err := l.Scan(segment.Position{}, func(_ segment.Position, first, _ int64, raw []byte) error {
		blk, _, err := topicblock.DecodeBlock(raw)
		out = append(out, itoa(first)+":"+string(blk.Record))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func equalJSON(a, b any) bool { return js(a) == js(b) }

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
