package clientapi

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/topicblock"
)

// streamConfig is the config tail of the subscription tests: small topic
// files so frames meet file ends, and a short alive interval.
func streamConfig(maxLogSize int64, aliveMs int) string {
	return fmt.Sprintf("  maxLogSize: %d\ntimeout:\n  server:\n    alive: %d\n", maxLogSize, aliveMs)
}

// testRecord builds a varied record: i selects headers and a body length
// from 1 to size bytes of non-text bytes.
func testRecord(i, size int) []byte {
	var hs [][2]string
	for h := 0; h < i%3; h++ {
		hs = append(hs, [2]string{"k" + strconv.Itoa(h), strings.Repeat("v", (i+h)%7)})
	}
	body := make([]byte, 1+(i*37)%size)
	for j := range body {
		body[j] = byte(i + j*13)
	}
	return kit.Record(hs, string(body))
}

// placed is a stored topic block and where it lies.
type placed struct {
	blk        topicblock.Block
	fileID     int64
	off, end   int64
	atFileEnd  bool // the block ends its file
	laterFiles bool // a file with a higher id exists
}

// topicLayout reads a topic's log files straight from disk (read-only; the
// server may be running) and returns its blocks by eventId.
func topicLayout(t testing.TB, dataDir, topic string) map[int64]placed {
	t.Helper()
	dir := topicblock.Dir(filepath.Join(dataDir, "topic"), []byte(topic), 10)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, e := range entries {
		if id, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".log"), 10, 64); err == nil && strings.HasSuffix(e.Name(), ".log") {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := map[int64]placed{}
	for i, id := range ids {
		data, err := os.ReadFile(filepath.Join(dir, strconv.FormatInt(id, 10)+".log"))
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(data); {
			b, n, err := topicblock.DecodeBlock(data[off:])
			if err != nil {
				t.Fatalf("topic %s file %d offset %d: %v", topic, id, off, err)
			}
			b.Record = bytes.Clone(b.Record)
			out[b.EventID] = placed{blk: b, fileID: id, off: int64(off), end: int64(off + n),
				atFileEnd: off+n == len(data), laterFiles: i < len(ids)-1}
			off += n
		}
	}
	return out
}

// checkFrame checks one data frame of a subscription against what was
// published and how it is stored: byte-exact records, strictly increasing
// ids continuing from *last, one file per frame, full frames unless a file
// or the data ends, and the next file id/position of §2.4.
func checkFrame(u kit.Unit, want []kit.Sent, layout map[int64]placed, batch int, last *int64, got *int) error {
	if u.Code != protocol.StatusOK {
		return fmt.Errorf("got %v, want a data frame", u)
	}
	if len(u.Msgs) > batch {
		return fmt.Errorf("frame of %d messages, batch %d", len(u.Msgs), batch)
	}
	var fileID int64 = -1
	for i, m := range u.Msgs {
		if *got >= len(want) {
			return fmt.Errorf("message %d beyond the %d expected", m.EventID, len(want))
		}
		w := want[*got]
		if m.EventID <= *last || m.EventID != w.ID {
			return fmt.Errorf("message eventId %d after %d, want %d", m.EventID, *last, w.ID)
		}
		if !bytes.Equal(m.Raw, w.Rec) {
			return fmt.Errorf("eventId %d: record % x, want % x", m.EventID, m.Raw, w.Rec)
		}
		p, ok := layout[m.EventID]
		if !ok {
			return fmt.Errorf("eventId %d not in the topic files", m.EventID)
		}
		if m.Ts != p.blk.Ts {
			return fmt.Errorf("eventId %d: ts %d, stored %d", m.EventID, m.Ts, p.blk.Ts)
		}
		if fileID >= 0 && p.fileID != fileID {
			return fmt.Errorf("frame spans files %d and %d", fileID, p.fileID)
		}
		fileID = p.fileID
		wantFile, wantPos := p.fileID, p.end
		lastOfFrame := i == len(u.Msgs)-1
		if lastOfFrame && p.atFileEnd && p.laterFiles {
			wantFile, wantPos = p.fileID+1, 0
		}
		if m.NextFileID != wantFile || m.NextPos != wantPos {
			return fmt.Errorf("eventId %d (file %d [%d,%d), last of frame %v): next (%d,%d), want (%d,%d)",
				m.EventID, p.fileID, p.off, p.end, lastOfFrame, m.NextFileID, m.NextPos, wantFile, wantPos)
		}
		if lastOfFrame && len(u.Msgs) < batch && !p.atFileEnd && *got+1 < len(want) {
			return fmt.Errorf("short frame of %d (batch %d) ends at eventId %d inside file %d", len(u.Msgs), batch, m.EventID, p.fileID)
		}
		*last = m.EventID
		*got++
	}
	return nil
}
