package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/topicblock"
)

// streamConfig is the config tail of the subscription tests: small topic
// files so frames meet file ends, and a short alive interval.
func streamConfig(maxLogSize int64, aliveMs int) string {
	return fmt.Sprintf("  maxLogSize: %d\ntimeout:\n  server:\n    alive: %d\n", maxLogSize, aliveMs)
}

// unit is one server→client unit of a subscription stream.
type unit struct {
	code uint16
	msgs []protocol.SubMessage
	text string // 400 text
}

func (u unit) String() string {
	switch u.code {
	case protocol.StatusOK:
		return fmt.Sprintf("data frame of %d messages", len(u.msgs))
	case protocol.StatusError:
		return "400 " + strconv.Quote(u.text)
	}
	return strconv.Itoa(int(u.code))
}

// sub sends a subscribe request (the Go client's encoding: ack timeout
// always present).
func (c *client) sub(topic, who string, after int64, batch uint8, ackTimeout time.Duration) error {
	c.c.SetDeadline(time.Now().Add(20 * time.Second))
	_, err := c.c.Write(must(protocol.AppendSub(nil, []byte(topic), []byte("sub-trace"), after, batch, ackTimeout, []byte(who))))
	return err
}

func (c *client) ack(code uint16) error {
	_, err := c.c.Write(binary.LittleEndian.AppendUint16(nil, code))
	return err
}

// next reads one unit within timeout, checking the header bytes a data
// frame must leave zero (§2.1) and parsing its messages strictly.
func (c *client) next(timeout time.Duration) (unit, error) {
	c.c.SetReadDeadline(time.Now().Add(timeout))
	var h protocol.RespHeader
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return unit{}, err
	}
	u := unit{code: h.Code()}
	switch u.code {
	case protocol.StatusAlive, protocol.StatusSubEnd:
		if h != (protocol.RespHeader{byte(u.code), byte(u.code >> 8)}) {
			return u, fmt.Errorf("unit %d with non-zero header bytes % x", u.code, h)
		}
	case protocol.StatusError:
		text := make([]byte, h.ErrLen())
		if _, err := io.ReadFull(c.r, text); err != nil {
			return u, err
		}
		u.text = string(text)
	case protocol.StatusOK:
		if h[3] != 0 || h[8] != 0 || h[9] != 0 || h.FrameCount() == 0 {
			return u, fmt.Errorf("bad data frame header % x", h)
		}
		body := make([]byte, h.FrameLen())
		if _, err := io.ReadFull(c.r, body); err != nil {
			return u, err
		}
		msgs, err := protocol.ParseSubMessages(body, int(h.FrameCount()))
		if err != nil {
			return u, err
		}
		u.msgs = msgs
	default:
		return u, fmt.Errorf("unexpected unit code %d", u.code)
	}
	return u, nil
}

// nextData reads units until a data frame, skipping alives.
func (c *client) nextData(timeout time.Duration) (unit, error) {
	deadline := time.Now().Add(timeout)
	for {
		u, err := c.next(time.Until(deadline))
		if err != nil || u.code != protocol.StatusAlive {
			return u, err
		}
	}
}

// expectEOF checks that the server closed the connection (nothing more
// arrives, then EOF) within timeout.
func (c *client) expectEOF(timeout time.Duration) error {
	c.c.SetReadDeadline(time.Now().Add(timeout))
	var b [1]byte
	n, err := c.r.Read(b[:])
	if n != 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("want EOF, got %d bytes (% x), err %v", n, b[:n], err)
	}
	return nil
}

// inSync sends a list request and checks that the reply is a JSON array:
// the connection is back in the command loop and in sync. (An alive
// request would not do: its 201 looks like a stream's alive.)
func (c *client) inSync() error {
	body, err := c.roundTrip(must(protocol.AppendList(nil, []byte("sync"))), protocol.ReplyJSON)
	if err != nil {
		return err
	}
	var list []json.RawMessage
	if err := json.Unmarshal(body, &list); err != nil || len(list) == 0 {
		return fmt.Errorf("list reply %q: %v", body, err)
	}
	return nil
}

// sent is a message as published: its eventId and record bytes.
type sent struct {
	id  int64
	rec []byte
}

// publisher publishes on one connection and predicts eventIds: on a fresh
// server every create takes one id and every pub one per record.
type publisher struct {
	t      testing.TB
	c      *client
	nextID int64
	topics map[string][]sent
}

func newPublisher(t testing.TB, addr string) *publisher {
	return &publisher{t: t, c: dial(t, addr), nextID: 1, topics: map[string][]sent{}}
}

func (p *publisher) create(topic string) int64 {
	p.t.Helper()
	if err := p.c.create(topic, 0); err != nil {
		p.t.Fatalf("create %s: %v", topic, err)
	}
	p.nextID++
	return p.nextID - 1
}

func (p *publisher) pub(topic string, recs ...[]byte) {
	p.t.Helper()
	if err := p.c.pub(topic, recs...); err != nil {
		p.t.Fatalf("pub %s: %v", topic, err)
	}
	for _, r := range recs {
		p.topics[topic] = append(p.topics[topic], sent{id: p.nextID, rec: r})
		p.nextID++
	}
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
	return record(hs, string(body))
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
func checkFrame(u unit, want []sent, layout map[int64]placed, batch int, last *int64, got *int) error {
	if u.code != protocol.StatusOK {
		return fmt.Errorf("got %v, want a data frame", u)
	}
	if len(u.msgs) > batch {
		return fmt.Errorf("frame of %d messages, batch %d", len(u.msgs), batch)
	}
	var fileID int64 = -1
	for i, m := range u.msgs {
		if *got >= len(want) {
			return fmt.Errorf("message %d beyond the %d expected", m.EventID, len(want))
		}
		w := want[*got]
		if m.EventID <= *last || m.EventID != w.id {
			return fmt.Errorf("message eventId %d after %d, want %d", m.EventID, *last, w.id)
		}
		if !bytes.Equal(m.Raw, w.rec) {
			return fmt.Errorf("eventId %d: record % x, want % x", m.EventID, m.Raw, w.rec)
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
		lastOfFrame := i == len(u.msgs)-1
		if lastOfFrame && p.atFileEnd && p.laterFiles {
			wantFile, wantPos = p.fileID+1, 0
		}
		if m.NextFileID != wantFile || m.NextPos != wantPos {
			return fmt.Errorf("eventId %d (file %d [%d,%d), last of frame %v): next (%d,%d), want (%d,%d)",
				m.EventID, p.fileID, p.off, p.end, lastOfFrame, m.NextFileID, m.NextPos, wantFile, wantPos)
		}
		if lastOfFrame && len(u.msgs) < batch && !p.atFileEnd && *got+1 < len(want) {
			return fmt.Errorf("short frame of %d (batch %d) ends at eventId %d inside file %d", len(u.msgs), batch, m.EventID, p.fileID)
		}
		*last = m.EventID
		*got++
	}
	return nil
}

// waitCaughtUp waits until count() reaches want, for as long as it keeps
// growing: it gives up only when count stands still for stall. A mirror
// that catches up slowly on a loaded machine is not a failure; one that
// stopped is.
func waitCaughtUp(stall time.Duration, want int64, count func() int64) bool {
	last, since := int64(-1), time.Now()
	for {
		n := count()
		if n >= want {
			return true
		}
		if n > last {
			last, since = n, time.Now()
		} else if time.Since(since) > stall {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
