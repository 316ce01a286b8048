package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// corruptBase is a closed store with several binlog and topic files
// (maxLogSize 2 KiB): topics a and b, singles to b and batches of 1–4 to
// a.
type corruptBase struct {
	dir string
	// oldDir is dir with the checkpoint moved to the start of the binlog.
	oldOnce sync.Once
	oldDir  string
	oldErr  error

	blocks [][]byte // the binlog's blocks, raw
	lastID int64
	topics map[string][]topicblock.Block
}

func newCorruptBase(t *testing.T) *corruptBase {
	t.Helper()
	dir := t.TempDir()
	b := openTest(t, dir, func(o *Options) { o.MaxLogSize = 2048; o.Logger = quietLog })
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 60; i++ {
		if _, err := b.Publish(ctx, []byte("b"), rec(fmt.Sprintf("b-%d", i)), 1); err != nil {
			t.Fatal(err)
		}
		n := 1 + i%4
		var recs []byte
		for j := 0; j < n; j++ {
			recs = append(recs, rec(fmt.Sprintf("a-%d-%d", i, j))...)
		}
		if _, err := b.Publish(ctx, []byte("a"), recs, n); err != nil {
			t.Fatal(err)
		}
	}
	last := b.LastEventID()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	cb := &corruptBase{dir: dir, lastID: last, topics: map[string][]topicblock.Block{}}
	t.Cleanup(func() {
		if cb.oldDir != "" {
			os.RemoveAll(cb.oldDir)
		}
	})
	for _, blk := range readBinlog(t, dir) {
		cb.blocks = append(cb.blocks, binlog.AppendBlock(nil, &blk))
	}
	for _, name := range []string{"a", "b"} {
		cb.topics[name] = topicBlocks(t, dir, name)
	}
	if n := len(logPaths(t, filepath.Join(dir, "binlog"))); n < 3 {
		t.Fatalf("only %d binlog files", n)
	}
	if n := len(logPaths(t, topicblock.Dir(filepath.Join(dir, "topic"), []byte("a"), 10))); n < 3 {
		t.Fatalf("only %d topic files", n)
	}
	return cb
}

func topicBlocks(t *testing.T, dir, name string) []topicblock.Block {
	t.Helper()
	var out []topicblock.Block
	for _, p := range logPaths(t, topicblock.Dir(filepath.Join(dir, "topic"), []byte(name), 10)) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(data); {
			blk, n, err := topicblock.DecodeBlock(data[off:])
			if err != nil {
				t.Fatalf("%s at %d: %v", p, off, err)
			}
			blk.Record = bytes.Clone(blk.Record)
			out = append(out, blk)
			off += n
		}
	}
	return out
}

// logPaths lists a log directory's files in id order.
func logPaths(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	id := func(p string) (n int) {
		fmt.Sscanf(filepath.Base(p), "%d.log", &n)
		return n
	}
	sort.Slice(paths, func(i, j int) bool { return id(paths[i]) < id(paths[j]) })
	return paths
}

// blockAt returns the offsets of a file's blocks.
func blockOffsets(t *testing.T, path string, decode segment.Decoder) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int
	for off := 0; off < len(data); {
		_, _, n, err := decode(data[off:])
		if err != nil {
			t.Fatalf("%s at %d: %v", path, off, err)
		}
		offs = append(offs, off)
		off += n
	}
	return append(offs, len(data))
}

// copyWithCheckpoint copies the base store; old moves its checkpoint back
// to the start of the binlog, so that start-up replays (and checks) every
// block, as after a crash long after the last checkpoint.
func (cb *corruptBase) copyWithCheckpoint(t *testing.T, old bool) string {
	t.Helper()
	src := cb.dir
	if old {
		cb.oldOnce.Do(func() { cb.oldDir, cb.oldErr = oldCheckpointCopy(cb.dir) })
		if cb.oldErr != nil {
			t.Fatal(cb.oldErr)
		}
		src = cb.oldDir
	}
	dir := t.TempDir()
	copyDir(t, src, dir)
	return dir
}

func oldCheckpointCopy(base string) (string, error) {
	dir, err := os.MkdirTemp("", "smss-corrupt-base-")
	if err != nil {
		return "", err
	}
	if err := os.CopyFS(dir, os.DirFS(base)); err != nil {
		return "", err
	}
	ms, err := meta.Open(meta.Options{Dir: filepath.Join(dir, "meta"), Logger: quietLog})
	if err != nil {
		return "", err
	}
	mb := ms.NewBatch()
	mb.SetCheckpoint(meta.Checkpoint{BinlogFileID: 0, BinlogOffset: 0, NextEventID: 1})
	if err := ms.Commit(mb); err != nil {
		ms.Close()
		return "", err
	}
	return dir, ms.Close()
}

var offsetRe = regexp.MustCompile(`offset \d+`)

// outcome opens a damaged store and checks what start-up did with it. A
// refusal must name the damaged file and an offset. A start must leave a
// store that is safe to serve: eventIds strictly increasing over the
// binlog, the blocks before the damage untouched, every topic holding
// exactly the messages the binlog gives it, and a new publish getting an
// eventId above every one the undamaged store had handed out.
func (cb *corruptBase) outcome(t *testing.T, dir, damaged string, intactBlocks int) string {
	t.Helper()
	b, err := Open(Options{Dir: dir, FlushLevel: 1, Logger: quietLog})
	if err != nil {
		if !strings.Contains(err.Error(), damaged) || !offsetRe.MatchString(err.Error()) {
			t.Fatalf("start-up refused without naming %s and an offset: %v", damaged, err)
		}
		return "refused"
	}
	id, err := b.Publish(context.Background(), []byte("a"), rec("after-the-damage"), 1)
	if err != nil {
		t.Fatalf("publish after start-up: %v", err)
	}
	if id <= cb.lastID {
		t.Fatalf("new publish got eventId %d; the store had handed out up to %d before the damage (eventId reused)", id, cb.lastID)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	blocks := readBinlog(t, dir)
	blocks = blocks[:len(blocks)-1] // the publish above
	last := int64(0)
	want := map[string][]topicblock.Block{}
	created := map[string]int64{}
	for i, blk := range blocks {
		if blk.EventID <= last {
			t.Fatalf("binlog block %d has eventId %d after %d", i, blk.EventID, last)
		}
		k, err := blk.MessageCount()
		if err != nil {
			t.Fatal(err)
		}
		last = blk.EventID + int64(k) - 1
		if i < intactBlocks && !bytes.Equal(binlog.AppendBlock(nil, &blk), cb.blocks[i]) {
			t.Fatalf("binlog block %d, before the damage, changed", i)
		}
		name := string(blk.Topic)
		switch blk.Cmd {
		case binlog.CmdCreate:
			created[name] = blk.EventID
		case binlog.CmdPub:
			if _, ok := created[name]; !ok {
				continue
			}
			recs := blk.Payload
			for j := 0; len(recs) > 0; j++ {
				var r []byte
				r, recs = protocol.NextRecord(recs)
				want[name] = append(want[name], topicblock.Block{EventID: blk.EventID + int64(j), Record: r})
			}
		}
	}
	if len(blocks) < intactBlocks {
		t.Fatalf("start-up dropped binlog blocks before the damage: %d left, %d were before it", len(blocks), intactBlocks)
	}
	for _, name := range []string{"a", "b"} {
		got := topicBlocks(t, dir, name)
		got = got[:len(got)-boolInt(name == "a")]
		if len(got) != len(want[name]) {
			t.Fatalf("topic %s holds %d messages, its binlog blocks %d", name, len(got), len(want[name]))
		}
		for i := range got {
			if got[i].EventID != want[name][i].EventID || !bytes.Equal(got[i].Record, want[name][i].Record) {
				t.Fatalf("topic %s message %d: eventId %d %q, the binlog says %d %q", name, i,
					got[i].EventID, got[i].Record, want[name][i].EventID, want[name][i].Record)
			}
		}
	}
	switch {
	case len(blocks) < len(cb.blocks):
		return "repaired"
	case len(blocks) == len(cb.blocks) && blocksEqual(blocks, cb.blocks):
		return "intact"
	}
	return "altered"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func blocksEqual(got []binlog.Block, want [][]byte) bool {
	for i := range got {
		if !bytes.Equal(binlog.AppendBlock(nil, &got[i]), want[i]) {
			return false
		}
	}
	return true
}

func zeroFill(t *testing.T, path string, from, to int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, to-from), int64(from)); err != nil {
		t.Fatal(err)
	}
}

func flipBit(t *testing.T, path string, at int, bit uint) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[at] ^= 1 << bit
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptFiles damages the binlog and topic files of a closed store and
// checks start-up: damage it can repair is repaired (and the store is safe
// to serve, see outcome), damage it cannot is refused naming the file and
// offset. Truncation at every offset of the last blocks is TestTornTails.
func TestCorruptFiles(t *testing.T) {
	cb := newCorruptBase(t)
	binPaths := logPaths(t, filepath.Join(cb.dir, "binlog"))
	topicDir := topicblock.Dir(filepath.Join(cb.dir, "topic"), []byte("a"), 10)
	topicPaths := logPaths(t, topicDir)
	rel := func(p string) string { r, _ := filepath.Rel(cb.dir, p); return r }
	newestBin, olderBin := binPaths[len(binPaths)-1], binPaths[1]
	newestTopic, olderTopic := topicPaths[len(topicPaths)-1], topicPaths[1]
	binOffs := blockOffsets(t, newestBin, decodeBinlog)
	olderBinOffs := blockOffsets(t, olderBin, decodeBinlog)
	topicOffs := blockOffsets(t, newestTopic, decodeTopic)
	olderTopicOffs := blockOffsets(t, olderTopic, decodeTopic)
	// Blocks of the binlog before a position in it.
	blocksBefore := func(path string, off int) int {
		n := 0
		for _, p := range binPaths {
			offs := blockOffsets(t, p, decodeBinlog)
			for _, o := range offs[:len(offs)-1] {
				if p == path && o >= off {
					return n
				}
				n++
			}
			if p == path {
				return n
			}
		}
		return n
	}
	lastBin := binOffs[len(binOffs)-2]
	midBin := olderBinOffs[len(olderBinOffs)/2]
	for _, tc := range []struct {
		name    string
		file    string
		damage  func(path string)
		old     bool   // checkpoint at the start: the damage is in the replay range
		want    string // refused, repaired or intact (see outcome)
		intact  int    // binlog blocks that must survive
		readErr bool   // start-up does not see it; readers must stop at it
	}{
		{"newest binlog file: last block zero-filled, replayed", newestBin, func(p string) { zeroFill(t, p, lastBin, binOffs[len(binOffs)-1]) },
			true, "repaired", blocksBefore(newestBin, lastBin), false},
		{"newest binlog file: last block zero-filled, before the checkpoint", newestBin, func(p string) { zeroFill(t, p, lastBin, binOffs[len(binOffs)-1]) },
			false, "refused", 0, false},
		{"newest binlog file: 65 MiB of garbage appended", newestBin, func(p string) {
			f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			f.Write([]byte{0xff, 0xff, 0xff, 0xff})
			f.Close()
			os.Truncate(p, int64(binOffs[len(binOffs)-1])+65<<20)
		}, false, "refused", 0, false},
		{"older binlog file: middle block zero-filled, replayed", olderBin, func(p string) { zeroFill(t, p, midBin, midBin+8) },
			true, "refused", 0, false},
		{"older binlog file: middle block zero-filled, before the checkpoint", olderBin, func(p string) { zeroFill(t, p, midBin, midBin+8) },
			false, "intact", len(cb.blocks), true},
		{"newest topic file: last block zero-filled", newestTopic, func(p string) {
			zeroFill(t, p, topicOffs[len(topicOffs)-2], topicOffs[len(topicOffs)-1])
		}, false, "intact", len(cb.blocks), false},
		{"newest topic file: last block zero-filled, replayed", newestTopic, func(p string) {
			zeroFill(t, p, topicOffs[len(topicOffs)-2], topicOffs[len(topicOffs)-1])
		}, true, "intact", len(cb.blocks), false},
		{"newest topic file: garbage appended", newestTopic, func(p string) {
			f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			f.Write([]byte("\x10\x00\x00\x00not a block at all"))
			f.Close()
		}, false, "intact", len(cb.blocks), false},
		{"newest binlog file: last block re-encoded with the eventId before it, replayed", newestBin, func(p string) {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			prev, _, _ := binlog.DecodeBlock(data[binOffs[len(binOffs)-3]:])
			blk, _, err := binlog.DecodeBlock(data[lastBin:])
			if err != nil {
				t.Fatal(err)
			}
			blk.EventID = prev.EventID
			if err := os.WriteFile(p, binlog.AppendBlock(data[:lastBin:lastBin], &blk), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true, "repaired", blocksBefore(newestBin, lastBin), false},
		{"newest topic file: a body byte of the last block changed, replayed", newestTopic, func(p string) {
			flipBit(t, p, topicOffs[len(topicOffs)-1]-2, 0)
		}, true, "intact", len(cb.blocks), false},
		{"older topic file: middle block zero-filled, before the checkpoint", olderTopic, func(p string) {
			m := olderTopicOffs[len(olderTopicOffs)/2]
			zeroFill(t, p, m, m+8)
		}, false, "intact", len(cb.blocks), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := cb.copyWithCheckpoint(t, tc.old)
			path := filepath.Join(dir, rel(tc.file))
			tc.damage(path)
			if tc.readErr {
				checkReadersRefuse(t, cb, dir, path)
				return
			}
			if got := cb.outcome(t, dir, path, tc.intact); got != tc.want {
				t.Fatalf("start-up %s the damage, want %s", got, tc.want)
			}
		})
	}
}

// checkReadersRefuse: damage start-up does not look at (before the
// checkpoint, not at a tail) must stop readers with an error naming the
// file and offset, after delivering exactly the undamaged data before it.
func checkReadersRefuse(t *testing.T, cb *corruptBase, dir, damaged string) {
	t.Helper()
	b, err := Open(Options{Dir: dir, FlushLevel: 1, Logger: quietLog})
	if err != nil {
		t.Fatalf("start-up: %v", err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var readErr error
	if strings.Contains(damaged, string(filepath.Separator)+"binlog"+string(filepath.Separator)) {
		s, err := b.ReplicaStream(0)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for readErr == nil {
			_, readErr = s.Next(ctx, 100, time.Second, func(raw []byte) error {
				if i >= len(cb.blocks) || !bytes.Equal(raw, cb.blocks[i]) {
					return fmt.Errorf("replica block %d differs from the undamaged store", i)
				}
				i++
				return nil
			})
		}
	} else {
		s, err := b.Subscribe([]byte("a"), []byte("reader"), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		i := 0
		for readErr == nil {
			var out []byte
			var n int
			out, n, readErr = s.Next(ctx, nil, 50, time.Second)
			if n == 0 && readErr == nil {
				t.Fatal("the subscription reached the end without meeting the damage")
			}
			if n == 0 {
				break
			}
			msgs, err := protocol.ParseSubMessages(out, n)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if m.EventID != cb.topics["a"][i].EventID || !bytes.Equal(m.Raw, cb.topics["a"][i].Record) {
					t.Fatalf("message %d differs from the undamaged store", i)
				}
				i++
			}
		}
	}
	var be *protocol.BizError
	if errors.As(readErr, &be) && strings.Contains(readErr.Error(), "replica block") {
		t.Fatal(readErr)
	}
	if !strings.Contains(readErr.Error(), damaged) || !offsetRe.MatchString(readErr.Error()) {
		t.Fatalf("reader error does not name %s and an offset: %v", damaged, readErr)
	}
}

// TestCorruptBitFlips flips single bits of the last binlog block and of
// the last topic block, with the checkpoint moved back so that start-up
// replays them, and requires every start-up to refuse loudly or leave a
// store that is safe to serve (outcome). The format has no checksums: a
// flip that leaves a valid block (a digit of a timestamp, a byte of a
// body) can only be caught by comparing the two logs, and then the binlog
// wins. The default suite flips bits 0 and 7 of the length prefix and one
// bit of every fifth byte; SMSS_LONG=1 flips every bit of the length
// prefix and one bit of every byte.
func TestCorruptBitFlips(t *testing.T) {
	long := os.Getenv("SMSS_LONG") != ""
	cb := newCorruptBase(t)
	binPaths := logPaths(t, filepath.Join(cb.dir, "binlog"))
	topicPaths := logPaths(t, topicblock.Dir(filepath.Join(cb.dir, "topic"), []byte("a"), 10))
	for _, target := range []struct {
		name   string
		path   string
		decode segment.Decoder
	}{
		{"binlog", binPaths[len(binPaths)-1], decodeBinlog},
		{"topic", topicPaths[len(topicPaths)-1], decodeTopic},
	} {
		offs := blockOffsets(t, target.path, target.decode)
		start, end := offs[len(offs)-2], offs[len(offs)-1]
		intact := len(cb.blocks) - 1
		if target.name == "topic" {
			intact = len(cb.blocks)
		}
		rel, _ := filepath.Rel(cb.dir, target.path)
		counts := map[string]int{}
		var mu sync.Mutex
		t.Run(target.name, func(t *testing.T) {
			for at := start; at < end; at++ {
				var bits []uint
				switch {
				case at < start+4 && long:
					bits = []uint{0, 1, 2, 3, 4, 5, 6, 7}
				case at < start+4:
					bits = []uint{0, 7}
				case long || (at-start)%5 == 0:
					bits = []uint{uint(at % 8)}
				}
				for _, bit := range bits {
					t.Run(fmt.Sprintf("byte %d bit %d", at-start, bit), func(t *testing.T) {
						t.Parallel()
						dir := cb.copyWithCheckpoint(t, true)
						path := filepath.Join(dir, rel)
						flipBit(t, path, at, bit)
						got := cb.outcome(t, dir, path, intact)
						mu.Lock()
						counts[got]++
						mu.Unlock()
					})
				}
			}
		})
		t.Logf("%s: flips in its %d-byte last block: %v", target.name, end-start, counts)
	}
}
