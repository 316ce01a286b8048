package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/codec"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/topicblock"
)

// errTorn means a file ends inside a block: a server is writing it, or a
// killed one left it for recovery. Checks retry on it.
var errTorn = errors.New("log ends inside a block")

// logFiles returns the ids of "<id>.log" files in dir, ascending, and
// fails on a gap (files are contiguous, segment package invariant).
func logFiles(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, e := range ents {
		name := e.Name()
		id, err := strconv.ParseInt(strings.TrimSuffix(name, ".log"), 10, 64)
		if err != nil || !strings.HasSuffix(name, ".log") || strconv.FormatInt(id, 10)+".log" != name {
			continue
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[i-1]+1 {
			return nil, fmt.Errorf("%s: file %d.log follows %d.log", dir, ids[i], ids[i-1])
		}
	}
	return ids, nil
}

// readBinlog concatenates a data directory's binlog files in id order:
// what a slave's binlog must be a byte prefix of.
func readBinlog(dataDir string) ([]byte, error) {
	dir := filepath.Join(dataDir, "binlog")
	ids, err := logFiles(dir)
	if err != nil {
		return nil, err
	}
	var out []byte
	for _, id := range ids {
		b, err := os.ReadFile(filepath.Join(dir, strconv.FormatInt(id, 10)+".log"))
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

// binlogSize is the total size of a data directory's binlog files.
func binlogSize(dataDir string) (int64, error) {
	dir := filepath.Join(dataDir, "binlog")
	ids, err := logFiles(dir)
	if err != nil {
		return 0, err
	}
	total := int64(0)
	for _, id := range ids {
		st, err := os.Stat(filepath.Join(dir, strconv.FormatInt(id, 10)+".log"))
		if err != nil {
			return 0, err
		}
		total += st.Size()
	}
	return total, nil
}

// topicMsg is one message of a topic: its eventId and record bytes.
type topicMsg struct {
	id  int64
	rec []byte
}

// readTopic decodes a topic's files. exists is false when the topic has no
// directory. Every block must decode and eventIds must increase; a partial
// block at the very end is errTorn.
func readTopic(dataDir, name string) (msgs []topicMsg, exists bool, err error) {
	dir := topicblock.Dir(filepath.Join(dataDir, "topic"), []byte(name), 10)
	ids, err := logFiles(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	last := int64(0)
	for i, id := range ids {
		path := filepath.Join(dir, strconv.FormatInt(id, 10)+".log")
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, true, err
		}
		for off := 0; off < len(data); {
			b, n, err := topicblock.DecodeBlock(data[off:])
			if errors.Is(err, codec.ErrIncomplete) && i == len(ids)-1 {
				return nil, true, fmt.Errorf("%s at %d: %w", path, off, errTorn)
			}
			if err != nil {
				return nil, true, fmt.Errorf("%s at %d: %w", path, off, err)
			}
			if b.EventID <= last {
				return nil, true, fmt.Errorf("%s at %d: eventId %d after %d", path, off, b.EventID, last)
			}
			last = b.EventID
			msgs = append(msgs, topicMsg{id: b.EventID, rec: b.Record})
			off += n
		}
	}
	return msgs, true, nil
}

type bodyLoc struct {
	count int
	id    int64
	topic string
}

type delayLoc struct {
	blocks, applies  int
	delayID, applyID int64
	trigger          int64
	topic            string
}

type createRec struct{ id, expireAt int64 }

type liveTopic struct {
	createID, expireAt int64
	msgs               []topicMsg
}

// binState is what a binlog says: every message by body, the delays and
// their applications, and the topics it leaves alive with their messages.
type binState struct {
	blocks   int
	lastID   int64
	size     int // bytes of whole blocks
	pubs     map[string]*bodyLoc
	delays   map[string]*delayLoc
	delayIDs map[int64]*delayLoc
	creates  map[string][]createRec
	deletes  map[string]int
	live     map[string]*liveTopic
}

func bodyOf(rec []byte) (string, error) {
	r, _, err := protocol.ParseRecord(rec)
	return string(r.Body), err
}

// parseBinlog decodes a concatenated binlog. With tolerant, a partial last
// block ends the parse (a killed server's tail); otherwise it is errTorn.
// Any other bad byte, a non-increasing eventId or a command that makes no
// sense at that point (a pub to a topic that is not alive, a create of a
// live topic) is an error.
func parseBinlog(data []byte, tolerant bool) (*binState, error) {
	st := &binState{pubs: map[string]*bodyLoc{}, delays: map[string]*delayLoc{}, delayIDs: map[int64]*delayLoc{},
		creates: map[string][]createRec{}, deletes: map[string]int{}, live: map[string]*liveTopic{}}
	for off := 0; off < len(data); {
		b, n, err := binlog.DecodeBlock(data[off:])
		if errors.Is(err, codec.ErrIncomplete) {
			if tolerant {
				break
			}
			return nil, fmt.Errorf("binlog byte %d: %w", off, errTorn)
		}
		if err != nil {
			return nil, fmt.Errorf("binlog byte %d: %w", off, err)
		}
		if err := st.apply(&b); err != nil {
			return nil, fmt.Errorf("binlog byte %d (eventId %d): %w", off, b.EventID, err)
		}
		off += n
		st.size = off
	}
	return st, nil
}

func (st *binState) apply(b *binlog.Block) error {
	k, err := b.MessageCount()
	if err != nil {
		return err
	}
	if b.EventID <= st.lastID {
		return fmt.Errorf("eventId %d after %d: an eventId was reused", b.EventID, st.lastID)
	}
	st.lastID = b.EventID + int64(k) - 1
	st.blocks++
	name := string(b.Topic)
	lt := st.live[name]
	switch b.Cmd {
	case binlog.CmdCreate:
		if lt != nil {
			return fmt.Errorf("create of live topic %s", name)
		}
		expireAt := int64(binary.LittleEndian.Uint64(b.Payload))
		st.creates[name] = append(st.creates[name], createRec{id: b.EventID, expireAt: expireAt})
		st.live[name] = &liveTopic{createID: b.EventID, expireAt: expireAt}
	case binlog.CmdDelete:
		if lt == nil {
			return fmt.Errorf("delete of topic %s, which is not alive", name)
		}
		st.deletes[name]++
		delete(st.live, name)
	case binlog.CmdPub:
		if lt == nil {
			return fmt.Errorf("pub to topic %s, which is not alive", name)
		}
		return st.messages(lt, b.EventID, b.Payload, func(body string, id int64) error {
			if name == protocol.CursorTopic {
				return nil // the server's stored consumer positions, not the workload's
			}
			loc := st.pubs[body]
			if loc == nil {
				loc = &bodyLoc{}
				st.pubs[body] = loc
			}
			loc.count++
			loc.id, loc.topic = id, name
			return nil
		})
	case binlog.CmdDelay:
		if lt == nil {
			return fmt.Errorf("delay to topic %s, which is not alive", name)
		}
		trigger := int64(binary.LittleEndian.Uint64(b.Payload))
		return st.messages(nil, b.EventID, b.Payload[binlog.DelayPrefixLen:], func(body string, _ int64) error {
			d := st.delays[body]
			if d == nil {
				d = &delayLoc{}
				st.delays[body] = d
			}
			d.blocks++
			d.delayID, d.trigger, d.topic = b.EventID, trigger, name
			st.delayIDs[b.EventID] = d
			return nil
		})
	case binlog.CmdDelayApply:
		if lt == nil {
			return fmt.Errorf("delay apply to topic %s, which is not alive", name)
		}
		delayID := int64(binary.LittleEndian.Uint64(b.Payload[8:]))
		return st.messages(lt, b.EventID, b.Payload[binlog.DelayPrefixLen:], func(body string, id int64) error {
			d := st.delays[body]
			if d == nil || d.delayID != delayID {
				return fmt.Errorf("delay apply of %q names delay %d, which the binlog does not hold", body, delayID)
			}
			d.applies++
			d.applyID = id
			return nil
		})
	}
	return nil
}

// messages walks the records of a pub or delay payload; lt, when set,
// receives them as topic messages.
func (st *binState) messages(lt *liveTopic, first int64, records []byte, fn func(body string, id int64) error) error {
	for i := 0; len(records) > 0; i++ {
		var rec []byte
		rec, records = protocol.NextRecord(records)
		body, err := bodyOf(rec)
		if err != nil {
			return err
		}
		id := first + int64(i)
		if lt != nil {
			lt.msgs = append(lt.msgs, topicMsg{id: id, rec: rec})
		}
		if err := fn(body, id); err != nil {
			return err
		}
	}
	return nil
}

// sameMsgs compares two message lists; prefix allows got to be a prefix of
// want.
func sameMsgs(got, want []topicMsg, prefix bool) error {
	if len(got) > len(want) || (!prefix && len(got) < len(want)) {
		return fmt.Errorf("%d messages, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].id != want[i].id || string(got[i].rec) != string(want[i].rec) {
			return fmt.Errorf("message %d: eventId %d (%d bytes), want eventId %d (%d bytes)",
				i, got[i].id, len(got[i].rec), want[i].id, len(want[i].rec))
		}
	}
	return nil
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
