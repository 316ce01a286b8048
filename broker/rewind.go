package broker

// Rewind: the surgery behind `smss -rejoin` (issue 16). A node whose binlog
// diverged from its master's (an old master that took writes its slave never
// got) is cut back to the common prefix. Nothing is deleted: the divergent
// binlog tail, the topic-file tails after the prefix and the directories of
// topics created after it are moved under <store.path>/diverged/<UTC time>/
// with a manifest, and meta (topics, lifetimes, delays, checkpoint) is rolled
// back to what it was at the prefix.
//
// It runs on a closed data directory (no writer, no readers): the caller
// opens the broker once to recover and detect the divergence, closes it,
// rewinds, and opens it again.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/smssmq/smss/internal/fsmode"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker/msgcount"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// DivergedDir is the directory under store.path that keeps moved tails.
const DivergedDir = "diverged"

// ErrRewindMismatch is wrapped when the rewind point does not name a block
// boundary ending at the common prefix's last eventId.
var ErrRewindMismatch = errors.New("rewind point does not match the binlog")

// RewindManifest describes one rewind; it is written as manifest.json in the
// rewind's directory and returned to the caller.
type RewindManifest struct {
	Time   string `json:"time"`   // UTC, RFC 3339
	Master string `json:"master"` // the master the node rejoined, for the operator
	Reason string `json:"reason"` // how the divergence was found
	// CommonLastEventID is the last eventId both binlogs share (0: none).
	CommonLastEventID int64 `json:"commonLastEventId"`
	// FirstEventID..LastEventID is the range of the moved binlog blocks.
	FirstEventID int64 `json:"firstEventId"`
	LastEventID  int64 `json:"lastEventId"`
	// BinlogFrom is where the moved tail started: "file:offset". The first
	// moved file holds the bytes from that offset on (see BinlogFiles).
	BinlogFrom  string        `json:"binlogFrom"`
	BinlogFiles []MovedFile   `json:"binlogFiles"`
	Blocks      []MovedBlock  `json:"blocks"`
	Topics      []MovedTopic  `json:"topics"`
	Delays      RewoundDelays `json:"delays"`
	// Warnings are things the rewind could not restore.
	Warnings []string `json:"warnings,omitempty"`
}

// MovedFile is one file copied out of a log: the bytes of the original file
// Name from Offset on.
type MovedFile struct {
	Name   string `json:"name"`   // original base name, e.g. 3.log
	Offset int64  `json:"offset"` // where the copied bytes started in it
	Bytes  int64  `json:"bytes"`
	Path   string `json:"path"` // relative to the rewind directory
}

// MovedBlock is one moved binlog block.
type MovedBlock struct {
	EventID     int64  `json:"eventId"`
	LastEventID int64  `json:"lastEventId"`
	Cmd         string `json:"cmd"`
	Topic       string `json:"topic"`
}

// MovedTopic says what happened to one topic.
type MovedTopic struct {
	Name string `json:"name"`
	// Action: "truncated" (messages after the prefix moved), "removed"
	// (created after the prefix: meta removed, directory moved),
	// "restored" (deleted after the prefix: meta and messages rebuilt from
	// the binlog prefix), "not-restored" (deleted after the prefix, but its
	// create is no longer in the local binlog).
	Action   string      `json:"action"`
	Messages int         `json:"messages,omitempty"` // messages moved out of its files
	Files    []MovedFile `json:"files,omitempty"`
	Dir      string      `json:"dir,omitempty"` // for "removed": the moved directory, relative
}

// RewoundDelays counts delay entries rolled back.
type RewoundDelays struct {
	Removed  int `json:"removed"`  // stored after the prefix
	Restored int `json:"restored"` // stored before, applied after the prefix
}

// RewindRequest names the common prefix.
type RewindRequest struct {
	// At is the binlog position where the divergent tail starts.
	At segment.Position
	// CommonLast is the last eventId of the block before At (0 when At is
	// the start of the binlog).
	CommonLast int64
	Master     string
	Reason     string
	// Now is the time that names the rewind directory (default time.Now).
	Now time.Time
}

// Rewind cuts the closed data directory opts.Dir back to the common prefix
// of req, moving the divergent tail aside. It returns the manifest and the
// directory it wrote. Re-running it after a crash part-way is safe: the
// binlog is truncated last, so a second run sees the tail again (the meta
// roll-back is idempotent) and writes another directory.
func Rewind(opts Options, req RewindRequest) (*RewindManifest, string, error) {
	opts.setDefaults()
	if opts.Dir == "" {
		return nil, "", errors.New("broker: Options.Dir is required")
	}
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	b := &Broker{opts: opts, log: opts.Logger, topicRoot: filepath.Join(opts.Dir, "topic"),
		trashDir: filepath.Join(opts.Dir, "trash"), topics: map[string]*topic{}}
	ms, err := meta.Open(meta.Options{Dir: filepath.Join(opts.Dir, "meta"), Logger: opts.Logger})
	if err != nil {
		return nil, "", fmt.Errorf("rewind: open meta: %w", err)
	}
	b.meta = ms
	defer ms.Close()
	b.binlog, err = segment.Open(segment.Options{Dir: filepath.Join(opts.Dir, "binlog"), MaxFileSize: opts.MaxLogSize,
		Decode: decodeBinlog, Logger: opts.Logger})
	if err != nil {
		return nil, "", fmt.Errorf("rewind: open binlog: %w", err)
	}
	rw := &rewinder{b: b, req: req}
	return rw.run()
}

type rewinder struct {
	b   *Broker
	req RewindRequest
	out string // the rewind directory
	man RewindManifest
	// tail blocks in order (payloads copied: scan buffers are reused).
	tail []tailBlock
}

type tailBlock struct {
	pos  segment.Position
	blk  binlog.Block
	last int64
}

func (r *rewinder) run() (*RewindManifest, string, error) {
	b := r.b
	if err := r.checkPoint(); err != nil {
		return nil, "", err
	}
	if _, err := b.binlog.Scan(r.req.At, func(pos segment.Position, _, last int64, raw []byte) error {
		blk, _, err := binlog.DecodeBlock(raw)
		if err != nil {
			return err
		}
		blk.Topic = append([]byte(nil), blk.Topic...)
		if blk.Cmd == binlog.CmdDelay || blk.Cmd == binlog.CmdDelayApply {
			// The roll-back needs their delay keys and values; the
			// messages of a pub are in the moved files (a long tail
			// must not be held in memory).
			blk.Payload = append([]byte(nil), blk.Payload...)
		} else {
			blk.Payload = nil
		}
		r.tail = append(r.tail, tailBlock{pos: pos, blk: blk, last: last})
		return nil
	}); err != nil {
		return nil, "", fmt.Errorf("rewind: read the binlog tail from %s: %w", r.req.At, err)
	}
	if len(r.tail) == 0 {
		return nil, "", nil // nothing after the prefix: not diverged
	}
	r.man = RewindManifest{Time: r.req.Now.UTC().Format(time.RFC3339Nano), Master: r.req.Master, Reason: r.req.Reason,
		CommonLastEventID: r.req.CommonLast, FirstEventID: r.tail[0].blk.EventID, LastEventID: r.tail[len(r.tail)-1].last,
		BinlogFrom: r.req.At.String()}
	for _, t := range r.tail {
		r.man.Blocks = append(r.man.Blocks, MovedBlock{EventID: t.blk.EventID, LastEventID: t.last, Cmd: binlog.CmdName(t.blk.Cmd), Topic: string(t.blk.Topic)})
	}
	if err := r.makeDir(); err != nil {
		return nil, "", err
	}
	// 1. Copy the binlog tail out before anything changes.
	files, err := r.copyTail(b.binlog, r.req.At, "binlog")
	if err != nil {
		return nil, "", err
	}
	r.man.BinlogFiles = files
	// 2. Roll meta back and move topic data aside.
	if err := r.rollBack(); err != nil {
		return nil, "", err
	}
	// 3. The manifest, then the binlog: once it is cut the node is a
	// prefix of its master and follows it.
	if err := r.writeManifest(); err != nil {
		return nil, "", err
	}
	mb := b.meta.NewBatch()
	mb.SetCheckpoint(meta.Checkpoint{BinlogFileID: r.req.At.FileID, BinlogOffset: r.req.At.Offset, NextEventID: r.req.CommonLast + 1})
	if err := b.meta.Commit(mb); err != nil {
		return nil, "", fmt.Errorf("rewind: write checkpoint: %w", err)
	}
	if err := b.meta.Sync(); err != nil {
		return nil, "", fmt.Errorf("rewind: sync meta: %w", err)
	}
	if err := b.binlog.TruncateTo(r.req.At); err != nil {
		return nil, "", fmt.Errorf("rewind: truncate the binlog to %s: %w", r.req.At, err)
	}
	b.log.Warn("REJOIN: divergent tail moved aside", "dir", r.out, "commonLastEventId", r.man.CommonLastEventID,
		"movedFirstEventId", r.man.FirstEventID, "movedLastEventId", r.man.LastEventID, "blocks", len(r.man.Blocks),
		"topics", topicSummary(r.man.Topics), "delaysRemoved", r.man.Delays.Removed, "delaysRestored", r.man.Delays.Restored)
	for _, w := range r.man.Warnings {
		b.log.Error("REJOIN: " + w)
	}
	return &r.man, r.out, nil
}

// checkPoint verifies that At is the block boundary right after the block
// ending with CommonLast.
func (r *rewinder) checkPoint() error {
	l := r.b.binlog
	if r.req.CommonLast == 0 {
		files := l.Files()
		if r.req.At.Offset != 0 || (len(files) > 0 && r.req.At.FileID != files[0]) {
			return fmt.Errorf("%w: an empty common prefix must start at the oldest binlog file, not %s", ErrRewindMismatch, r.req.At)
		}
		return nil
	}
	loc, err := l.Locate(r.req.CommonLast)
	if err != nil {
		return fmt.Errorf("rewind: locate eventId %d: %w", r.req.CommonLast, err)
	}
	if loc.BeforeOldest || loc.PrevLast != r.req.CommonLast || !samePos(l, loc.Pos, r.req.At) {
		return fmt.Errorf("%w: eventId %d does not end the block before %s (found the block %d..%d before %s)",
			ErrRewindMismatch, r.req.CommonLast, r.req.At, loc.PrevFirst, loc.PrevLast, loc.Pos)
	}
	return nil
}

// samePos treats the end of a file and the start of the next as equal.
func samePos(l *segment.Log, a, b segment.Position) bool {
	if a == b {
		return true
	}
	norm := func(p segment.Position) segment.Position {
		if st, err := os.Stat(l.Path(p.FileID)); err == nil && st.Size() == p.Offset {
			return segment.Position{FileID: p.FileID + 1}
		}
		return p
	}
	return norm(a) == norm(b)
}

func (r *rewinder) makeDir() error {
	base := filepath.Join(r.b.opts.Dir, DivergedDir, r.req.Now.UTC().Format("20060102T150405.000Z"))
	dir := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
			break
		}
		dir = base + "-" + strconv.Itoa(i)
	}
	if err := os.MkdirAll(dir, fsmode.Dir()); err != nil {
		return fmt.Errorf("rewind: create %s: %w", dir, err)
	}
	r.out = dir
	return nil
}

// copyTail copies everything of l from pos on into out/<sub>/, one file per
// log file, fsynced.
func (r *rewinder) copyTail(l *segment.Log, pos segment.Position, sub string) ([]MovedFile, error) {
	dst := filepath.Join(r.out, sub)
	if err := os.MkdirAll(dst, fsmode.Dir()); err != nil {
		return nil, fmt.Errorf("rewind: create %s: %w", dst, err)
	}
	var out []MovedFile
	for _, id := range l.Files() {
		if id < pos.FileID {
			continue
		}
		off := int64(0)
		if id == pos.FileID {
			off = pos.Offset
		}
		name := segment.FileName(id)
		n, err := copyFrom(l.Path(id), off, filepath.Join(dst, name))
		if err != nil {
			return nil, fmt.Errorf("rewind: copy %s from %d: %w", l.Path(id), off, err)
		}
		if n == 0 {
			os.Remove(filepath.Join(dst, name))
			continue
		}
		out = append(out, MovedFile{Name: name, Offset: off, Bytes: n, Path: filepath.Join(sub, name)})
	}
	return out, syncDir(dst)
}

func copyFrom(src string, off int64, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	if _, err := in.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fsmode.File())
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// rollBack undoes the tail's effects on meta, newest block first, then
// cuts the topics' message tails and rebuilds topics the tail deleted.
func (r *rewinder) rollBack() error {
	b := r.b
	metas, err := b.meta.Topics()
	if err != nil {
		return fmt.Errorf("rewind: read topics: %w", err)
	}
	// state of each topic just after the block being undone: present in
	// live, absent, or in unknown (it existed, a later block deleted it and
	// its meta is gone).
	live := map[string]meta.Topic{}
	for _, m := range metas {
		live[m.Name] = m
	}
	unknown := map[string]bool{}
	touched := map[string]bool{} // topics that got messages in the tail
	removed := map[string]bool{} // created in the tail: directory moves aside
	mb := b.meta.NewBatch()
	for i := len(r.tail) - 1; i >= 0; i-- {
		blk := &r.tail[i].blk
		name := string(blk.Topic)
		m, exists := live[name]
		switch blk.Cmd {
		case binlog.CmdPub:
			touched[name] = true
		case binlog.CmdDelayApply:
			touched[name] = true
			key, err := meta.DelayKeyFromValue(blk.Payload, blk.Topic)
			if err != nil {
				return fmt.Errorf("rewind: delay apply %d: %w", blk.EventID, err)
			}
			delayID := int64(binary.LittleEndian.Uint64(blk.Payload[8:]))
			// The delay was pending at the prefix: it comes back, to be
			// fired by the master (its apply arrives by replication).
			if delayID <= r.req.CommonLast && ((exists && m.CreateEventID < delayID) || unknown[name]) {
				mb.PutDelay(key, append([]byte(nil), blk.Payload...))
				r.man.Delays.Restored++
			}
		case binlog.CmdDelay:
			key, err := meta.DelayKeyFromValue(blk.Payload, blk.Topic)
			if err != nil {
				return fmt.Errorf("rewind: delay %d: %w", blk.EventID, err)
			}
			if ok, err := b.meta.HasDelay(key); err != nil {
				return err
			} else if ok {
				r.man.Delays.Removed++
			}
			mb.DeleteDelay(key)
		case binlog.CmdCreate:
			switch {
			case exists && m.CreateEventID == blk.EventID:
				mb.DeleteTopic(&m)
				delete(live, name)
				removed[name] = true
			case unknown[name]:
				// Created and deleted again in the tail: its files
				// are gone already; before this create it was absent.
				delete(unknown, name)
			}
		case binlog.CmdDelete:
			if !exists {
				// It existed before this delete (or the delete was a
				// no-op on a slave): the prefix will tell.
				unknown[name] = true
			}
		}
	}
	if err := b.meta.Commit(mb); err != nil {
		return fmt.Errorf("rewind: roll back meta: %w", err)
	}
	if err := b.meta.Sync(); err != nil {
		return fmt.Errorf("rewind: sync meta: %w", err)
	}
	names := func(m map[string]bool) []string {
		out := make([]string, 0, len(m))
		for n := range m {
			out = append(out, n)
		}
		sort.Strings(out)
		return out
	}
	// Topics created in the tail: their whole directory goes aside.
	for _, name := range names(removed) {
		rel := filepath.Join("topic", sanitize(name))
		dir := b.topicDir(name)
		if err := os.MkdirAll(filepath.Join(r.out, "topic"), fsmode.Dir()); err != nil {
			return err
		}
		if err := os.Rename(dir, filepath.Join(r.out, rel)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rewind: move %s aside: %w", dir, err)
		}
		r.man.Topics = append(r.man.Topics, MovedTopic{Name: name, Action: "removed", Dir: rel})
	}
	// Topics that existed at the prefix and got messages after it.
	for _, name := range names(touched) {
		m, ok := live[name]
		if !ok {
			continue
		}
		mt, err := r.cutTopic(m)
		if err != nil {
			return err
		}
		if mt != nil {
			r.man.Topics = append(r.man.Topics, *mt)
		}
	}
	// Topics the tail deleted: rebuild meta and messages from the prefix.
	for _, name := range names(unknown) {
		mt, err := r.restoreTopic(name)
		if err != nil {
			return err
		}
		if mt != nil {
			r.man.Topics = append(r.man.Topics, *mt)
		}
	}
	return syncDir(b.topicRoot)
}

func sanitize(name string) string {
	if name == "" || name == "." || name == ".." {
		return "_" + name
	}
	return name // topic names never hold '/' (protocol.ValidateTopicName)
}

// cutTopic moves m's messages after the prefix aside.
func (r *rewinder) cutTopic(m meta.Topic) (*MovedTopic, error) {
	t := &topic{meta: m, dir: r.b.topicDir(m.Name)}
	l, err := r.b.topicLog(t)
	if err != nil {
		return nil, fmt.Errorf("rewind: open topic %s: %w", m.Name, err)
	}
	if err := l.DropEmptyTail(); err != nil {
		return nil, err
	}
	loc, err := l.Locate(r.req.CommonLast)
	if err != nil {
		return nil, fmt.Errorf("rewind: topic %s: locate eventId %d: %w", m.Name, r.req.CommonLast, err)
	}
	n := 0
	if _, err := l.Scan(loc.Pos, func(segment.Position, int64, int64, []byte) error { n++; return nil }); err != nil {
		return nil, fmt.Errorf("rewind: topic %s: read the tail: %w", m.Name, err)
	}
	if n == 0 {
		return nil, nil
	}
	sub := filepath.Join("topic", sanitize(m.Name))
	files, err := r.copyTail(l, loc.Pos, sub)
	if err != nil {
		return nil, err
	}
	if err := l.TruncateTo(loc.Pos); err != nil {
		return nil, fmt.Errorf("rewind: topic %s: truncate to %s: %w", m.Name, loc.Pos, err)
	}
	// Count sidecars of the cut files describe bytes that are gone; the
	// counter rebuilds them.
	for _, f := range files {
		os.Remove(filepath.Join(t.dir, strings.TrimSuffix(f.Name, ".log")+msgcount.SidecarExt))
	}
	return &MovedTopic{Name: m.Name, Action: "truncated", Messages: n, Files: files}, nil
}

// restoreTopic rebuilds a topic that existed at the prefix and was deleted
// in the tail (its files are gone): the last create of it in the prefix
// gives the meta, the pubs and delay applies after that create the
// messages, exactly as recovery's replay writes them.
func (r *rewinder) restoreTopic(name string) (*MovedTopic, error) {
	b := r.b
	files := b.binlog.Files()
	if len(files) == 0 {
		return nil, nil
	}
	var (
		m       *meta.Topic
		created segment.Position
	)
	// Pass 1: the incarnation alive at the prefix.
	if _, err := b.binlog.Scan(segment.Position{FileID: files[0]}, func(pos segment.Position, first, _ int64, raw []byte) error {
		if !pos.Less(r.req.At) {
			return errStopScan
		}
		blk, _, err := binlog.DecodeBlock(raw)
		if err != nil || string(blk.Topic) != name {
			return err
		}
		switch blk.Cmd {
		case binlog.CmdCreate:
			nm := meta.Topic{Name: name, CreateTime: blk.WriteTime, CreateEventID: blk.EventID,
				StateChangeTime: blk.WriteTime, StateChangeEventID: blk.EventID}
			if len(blk.Payload) >= 8 {
				nm.ExpireAt = int64(binary.LittleEndian.Uint64(blk.Payload))
			}
			m, created = &nm, pos
		case binlog.CmdDelete:
			if m != nil && m.CreateEventID < first {
				m = nil
			}
		}
		return nil
	}); err != nil && !errors.Is(err, errStopScan) {
		return nil, fmt.Errorf("rewind: restore topic %s: scan the binlog: %w", name, err)
	}
	if m == nil {
		w := fmt.Sprintf("topic %q was deleted after the common prefix, but its create is not in the local binlog (retention): it is NOT restored; messages the master publishes to it are skipped here until it is re-created (re-sync this node from an empty data directory to get it back)", name)
		r.man.Warnings = append(r.man.Warnings, w)
		return &MovedTopic{Name: name, Action: "not-restored"}, nil
	}
	b.log.Info("rejoin: rebuilding a topic deleted after the common prefix from the binlog", "topic", name, "createEventId", m.CreateEventID, "from", created.String())
	t := &topic{meta: *m, dir: b.topicDir(name)}
	if err := b.freshDir(t.dir, m.CreateEventID); err != nil {
		return nil, err
	}
	l, err := b.topicLog(t)
	if err != nil {
		return nil, err
	}
	// Pass 2: its messages, from the create to the prefix.
	var buf []byte
	var marks []segment.Mark
	msgs := 0
	if _, err := b.binlog.Scan(created, func(pos segment.Position, _, _ int64, raw []byte) error {
		if !pos.Less(r.req.At) {
			return errStopScan
		}
		blk, _, err := binlog.DecodeBlock(raw)
		if err != nil || string(blk.Topic) != name {
			return err
		}
		records := blk.Payload
		switch blk.Cmd {
		case binlog.CmdPub:
		case binlog.CmdDelayApply:
			if int64(binary.LittleEndian.Uint64(blk.Payload[8:])) <= m.CreateEventID {
				return nil
			}
			records = blk.Payload[binlog.DelayPrefixLen:]
		default:
			return nil
		}
		buf, marks = buf[:0], marks[:0]
		tb := topicblock.Block{Ts: blk.WriteTime, SaveTime: blk.WriteTime, SrcFileID: pos.FileID, SrcPos: pos.Offset}
		for i := 0; len(records) > 0; i++ {
			tb.Record, records = protocol.NextRecord(records)
			tb.EventID, tb.Index = blk.EventID+int64(i), i
			marks = append(marks, segment.Mark{EventID: tb.EventID, Off: int64(len(buf))})
			buf = topicblock.AppendBlock(buf, &tb)
			msgs++
		}
		if _, err := l.Append(buf, marks); err != nil {
			return err
		}
		l.Commit()
		return nil
	}); err != nil && !errors.Is(err, errStopScan) {
		return nil, fmt.Errorf("rewind: restore topic %s: rebuild its messages: %w", name, err)
	}
	if err := l.Close(); err != nil {
		return nil, fmt.Errorf("rewind: restore topic %s: %w", name, err)
	}
	mb := b.meta.NewBatch()
	mb.PutTopic(m)
	if err := b.meta.Commit(mb); err != nil {
		return nil, fmt.Errorf("rewind: restore topic %s meta: %w", name, err)
	}
	if err := b.meta.Sync(); err != nil {
		return nil, err
	}
	return &MovedTopic{Name: name, Action: "restored", Messages: msgs}, nil
}

func (r *rewinder) writeManifest() error {
	data, err := json.MarshalIndent(&r.man, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(r.out, "manifest.json")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fsmode.File())
	if err != nil {
		return fmt.Errorf("rewind: write %s: %w", p, err)
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rewind: write %s: %w", p, err)
	}
	return syncDir(r.out)
}

func topicSummary(ts []MovedTopic) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Name+":"+t.Action)
	}
	return out
}
