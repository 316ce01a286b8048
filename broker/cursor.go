package broker

// Stored consumer positions ("cursors", issue 22): the last eventId each
// (topic, who) acknowledged, kept by the server so that a subscriber can
// resume with eventId -1 and so that the lag of a consumer that is down
// stays visible.
//
// Storage choice: the system topic __cursors (CursorTopic). A position is
// a message of that topic (cursorrec.go: topic, the topic's createEventId,
// who, eventId), written by the master's writer as an ordinary pub. So:
//
//   - The binlog stays byte-compatible with the original: the records are
//     ordinary create and pub blocks. Slaves, ours and the original, copy
//     them like any topic; there is no new replication path. Our slaves
//     (and a promoted slave) rebuild the positions from their own copy of
//     the topic: the writer applies every committed record of __cursors,
//     local or replicated, to the in-memory table, and start-up reads the
//     retained files of the topic once.
//   - Durability is the binlog's (store.flushLevel): a position is as
//     durable as a message published at the same time. Acks are coalesced
//     (below), so a kill -9 of the server, or a failover, loses at most the
//     positions acknowledged in the last cursor.flushInterval (plus what
//     the flush level loses of the binlog): their subscribers get those
//     messages again after a resume. A position never moves past what was
//     acknowledged, so a crash causes redelivery, never a skip.
//   - A position belongs to one incarnation of its topic (the createEventId
//     in the record): deleting a topic drops its positions at once, and
//     records of an earlier incarnation of a re-created name are ignored.
//
// Cost per ack: an ack only stores the eventId in memory (a map write under
// a mutex). A flusher writes every changed position once per
// cursor.flushInterval (default 1 s), all of them in one pub of one record
// each (about 40 bytes + topic + who), and at once when a subscription
// ends (ack 1 or disconnect), so a consumer acking 10,000 batches a second
// costs one small record a second, not 10,000 writes. The table costs
// about 100 bytes + topic + who of memory per (topic, who).
//
// Compaction (like Kafka's __consumer_offsets, but by snapshot): the topic
// rolls at cursor.segmentBytes (default 4 MiB). When it holds more than one
// file and more records were written since the last snapshot than the
// table has positions, or cursor.snapshotInterval passed since the last
// one, the writer appends a snapshot (one pub: a "snapshot" record, then
// every position) and removes the files before the one holding it, on the
// master and on every slave of ours when they apply it. Age retention
// (store.maxDays) skips __cursors, so positions of an idle system never
// age out; the periodic snapshot keeps a complete copy within the binlog's
// retention for slaves that start from an empty directory.
//
// Retention: a position whose who has not acknowledged anything for
// cursor.retentionDays (default 30; 0 keeps them forever) and is not
// subscribed is left out of the next snapshot, and so forgotten (like
// Kafka's offsets.retention): subscribers with throw-away names do not
// grow the table and the metrics without bound. The time of the ack
// travels in the record.
//
// Protection: clients may read __cursors (topic info, sub) but not publish
// to it, delay to it, create or delete it (400); it is left out of the list
// command (100) but not of valid list (99), which slaves need.
//
// On a slave, acks of its own subscribers are kept in memory only (a slave
// cannot write); they are written if the slave is promoted, and a record
// replicated from the master replaces an older one.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// Errors of the cursor commands.
var (
	// ErrCursorsDisabled is returned while cursor.enabled is false.
	ErrCursorsDisabled = protocol.NewBizError("stored positions are disabled on this server (cursor.enabled)")
	// ErrReservedTopic refuses client writes to the cursor topic.
	ErrReservedTopic = protocol.NewBizError("topic " + CursorTopic + " is reserved for the server's stored positions")
	// ErrCursorSlave refuses position changes on a slave.
	ErrCursorSlave = protocol.NewBizError("just master can change stored positions")
)

// Where a who without a stored position starts (SubscribeResume).
const (
	ResumeAtStart int64 = 0  // the oldest retained message
	ResumeAtEnd   int64 = -1 // after the last eventId at the time of the subscribe
)

type cursorKey struct{ topic, who string }

type cursorPos struct {
	created int64 // createEventId of the topic incarnation
	eventID int64
	at      int64 // ms of the ack (live) or of the write (committed)
}

type lagCache struct {
	t     *topic
	pos   int64
	loc   segment.Position
	end   segment.Position
	count int64
}

type cursorState struct {
	mu        sync.Mutex              // lock order: doc.go
	committed map[cursorKey]cursorPos // as written in __cursors
	live      map[cursorKey]cursorPos // acknowledged, not written yet
	dirty     map[cursorKey]struct{}
	sinceSnap int   // records written since the last snapshot
	lastSnap  int64 // ms of the last snapshot (or of the start)
	badRecs   int   // undecodable records seen, for sampled logging

	wmu  sync.Mutex // serialises writes: flush, set, reset, snapshot; outermost lock (doc.go)
	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	lagMu sync.Mutex // a leaf (lock order: doc.go)
	lags  map[cursorKey]*lagCache
}

func (b *Broker) cursorsOn() bool { return !b.opts.CursorsOff }

func (b *Broker) initCursors() {
	cs := &b.cursors
	cs.committed = map[cursorKey]cursorPos{}
	cs.live = map[cursorKey]cursorPos{}
	cs.dirty = map[cursorKey]struct{}{}
	cs.lags = map[cursorKey]*lagCache{}
	cs.kick = make(chan struct{}, 1)
	cs.stop = make(chan struct{})
	cs.done = make(chan struct{})
	cs.lastSnap = b.opts.Now()
}

// loadCursors reads the retained records of __cursors into the table. It
// runs in Open after recovery, before the writer starts.
func (b *Broker) loadCursors() error {
	t := b.topics[CursorTopic]
	if t == nil {
		return nil
	}
	l, err := b.topicLog(t)
	if err != nil {
		return fmt.Errorf("open %s: %w", CursorTopic, err)
	}
	files := l.Files()
	if len(files) == 0 {
		return nil
	}
	r := l.NewReader(segment.Position{FileID: files[0]})
	defer r.Close()
	n := 0
	for {
		got, _, err := r.Next(1024, func(_, _ int64, raw []byte, _ segment.Position) error {
			_, rec, ok := topicblock.Delivery(raw)
			if !ok {
				return fmt.Errorf("block without a record in %s", CursorTopic)
			}
			b.applyCursorRecords(rec, nil)
			return nil
		})
		n += got
		if err != nil {
			return fmt.Errorf("read %s: %w", CursorTopic, err)
		}
		if got == 0 {
			break
		}
	}
	b.log.Info("stored positions loaded", "records", n, "positions", len(b.cursors.committed), "files", len(files))
	return nil
}

// applyCursorRecords applies committed records of __cursors (a pub's
// records, back to back) to the table. The writer calls it after the pub
// committed (local or replicated); tb is the pub's topic batch, used after
// a snapshot to remove the files before it. Load calls it with nil.
func (b *Broker) applyCursorRecords(records []byte, tb *topicBatch) {
	cs := &b.cursors
	now := b.opts.Now()
	snapshot := false
	cs.mu.Lock()
	for len(records) > 0 {
		var rec []byte
		var ok bool
		if rec, records, ok = splitRecord(records); !ok {
			cs.badRecs++
			b.log.Warn("ignored the rest of a malformed pub to " + CursorTopic)
			break
		}
		r, err := decodeCursorRecord(rec)
		if err != nil {
			cs.badRecs++
			if cs.badRecs%1000 == 1 {
				b.log.Warn("ignored a message of "+CursorTopic+" that is not a position record", "err", err, "seen", cs.badRecs)
			}
			continue
		}
		k := cursorKey{r.topic, r.who}
		switch r.op {
		case cursorOpSnapshot:
			clear(cs.committed)
			cs.sinceSnap, cs.lastSnap = 0, now
			snapshot = true
			continue
		case cursorOpSet:
			t := b.topics[r.topic]
			if t == nil || t.meta.CreateEventID != r.created {
				continue // an earlier incarnation's, or the topic is gone
			}
			at := r.updated
			if at <= 0 {
				at = now
			}
			cs.committed[k] = cursorPos{created: r.created, eventID: r.eventID, at: at}
			if lv, ok := cs.live[k]; ok && (lv.created != r.created || lv.eventID <= r.eventID) {
				delete(cs.live, k)
				delete(cs.dirty, k)
			}
		case cursorOpDelete:
			delete(cs.committed, k)
			if lv, ok := cs.live[k]; ok && lv.created == r.created {
				delete(cs.live, k)
				delete(cs.dirty, k)
			}
		}
		cs.sinceSnap++
	}
	cs.mu.Unlock()
	if snapshot && tb != nil {
		// Every position is in the snapshot, which is in tb's file: the
		// files before it hold nothing needed any more.
		for _, id := range tb.log.Files() {
			if id >= tb.start.FileID {
				break
			}
			if err := tb.log.RemoveFile(id); err != nil && !errors.Is(err, os.ErrNotExist) {
				b.log.Warn("remove compacted file of "+CursorTopic, "file", id, "err", err)
			}
		}
	}
}

// startsWithSnapshot reports whether a pub's records to __cursors begin
// with a snapshot (after which its files before are removed).
func startsWithSnapshot(records []byte) bool {
	if len(records) == 0 {
		return false
	}
	rec, _, ok := splitRecord(records)
	if !ok {
		return false
	}
	r, err := decodeCursorRecord(rec)
	return err == nil && r.op == cursorOpSnapshot
}

// splitRecord is protocol.NextRecord that checks the length instead of
// trusting it (the records were validated where they came from; this keeps
// a panic out of reach anyway).
func splitRecord(records []byte) (rec, rest []byte, ok bool) {
	if len(records) < protocol.RecordPrefixSize {
		return nil, nil, false
	}
	size := uint64(binary.LittleEndian.Uint32(records)) + protocol.RecordPrefixSize
	if size > uint64(len(records)) {
		return nil, nil, false
	}
	return records[:size], records[size:], true
}

// dropTopicCursors forgets the positions of a deleted topic (writer).
func (b *Broker) dropTopicCursors(name string) {
	cs := &b.cursors
	cs.mu.Lock()
	for k := range cs.committed {
		if k.topic == name {
			delete(cs.committed, k)
		}
	}
	for k := range cs.live {
		if k.topic == name {
			delete(cs.live, k)
			delete(cs.dirty, k)
		}
	}
	cs.mu.Unlock()
	cs.lagMu.Lock()
	for k := range cs.lags {
		if k.topic == name {
			delete(cs.lags, k)
		}
	}
	cs.lagMu.Unlock()
}

// cursorAcked records an ack of who on t (every ack 0 and 1).
func (b *Broker) cursorAcked(t *topic, who string, eventID int64) {
	if !b.cursorsOn() || t.meta.Name == CursorTopic {
		return
	}
	cs := &b.cursors
	k := cursorKey{t.meta.Name, who}
	cs.mu.Lock()
	cs.live[k] = cursorPos{created: t.meta.CreateEventID, eventID: eventID, at: b.opts.Now()}
	cs.dirty[k] = struct{}{}
	cs.mu.Unlock()
}

// cursorTouch marks (t, who)'s position as used now (a subscription of it
// ended): being subscribed counts as activity for the retention.
func (b *Broker) cursorTouch(t *topic, who string) {
	if !b.cursorsOn() || t.meta.Name == CursorTopic {
		return
	}
	cs := &b.cursors
	k := cursorKey{t.meta.Name, who}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	p, ok := cs.live[k]
	if !ok {
		if p, ok = cs.committed[k]; !ok {
			return
		}
	}
	if p.created != t.meta.CreateEventID {
		return
	}
	p.at = b.opts.Now()
	cs.live[k] = p
	cs.dirty[k] = struct{}{}
}

// hasSub reports a live subscription of who on t on this server.
func (t *topic) hasSub(who string) bool {
	t.subMu.Lock()
	defer t.subMu.Unlock()
	_, ok := t.subs[who]
	return ok
}

// kickCursors asks the flusher to write now (a subscription ended).
func (b *Broker) kickCursors() {
	select {
	case b.cursors.kick <- struct{}{}:
	default:
	}
}

// storedPosition returns the position of (t, who): the newest acked one
// if not written yet, else the written one.
func (b *Broker) storedPosition(t *topic, who string) (int64, bool) {
	cs := &b.cursors
	k := cursorKey{t.meta.Name, who}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if p, ok := cs.live[k]; ok && p.created == t.meta.CreateEventID {
		return p.eventID, true
	}
	if p, ok := cs.committed[k]; ok && p.created == t.meta.CreateEventID {
		return p.eventID, true
	}
	return 0, false
}

// SubscribeResume subscribes who to topic after its stored position (the
// request's eventId -1). Without one it starts per whenNone: ResumeAtStart,
// ResumeAtEnd, or after that eventId (> 0); a start other than the oldest
// message is stored at once, so that a consumer that gets nothing before it
// stops resumes there and not at a later end.
func (b *Broker) SubscribeResume(topicName, who []byte, whenNone int64) (*Subscription, error) {
	// The rule of every sub first (Subscribe), then what resuming needs.
	if err := b.checkExistingName(topicName); err != nil {
		return nil, err
	}
	if !b.cursorsOn() {
		return nil, ErrCursorsDisabled
	}
	if err := protocol.ValidateTopicName(topicName); err != nil {
		return nil, err
	}
	b.mu.RLock()
	t := b.topics[string(topicName)]
	b.mu.RUnlock()
	if t == nil || t.meta.Expired(b.opts.Now()) {
		return nil, protocol.ErrTopicNotExist
	}
	after, ok := b.storedPosition(t, string(who))
	store := false
	if !ok {
		switch {
		case whenNone == ResumeAtEnd:
			after, store = b.LastEventID(), true
		case whenNone > 0:
			after, store = whenNone, true
		case whenNone == ResumeAtStart:
		default:
			return nil, protocol.NewBizError(fmt.Sprintf("invalid start for a new who %d: 0, -1 or an eventId", whenNone))
		}
	}
	s, err := b.Subscribe(topicName, who, after)
	if err != nil {
		return nil, err
	}
	if store {
		b.cursorAcked(t, string(who), after)
	}
	return s, nil
}

// runCursorFlusher writes changed positions every interval and when
// kicked, until haltCursors.
func (b *Broker) runCursorFlusher() {
	cs := &b.cursors
	defer close(cs.done)
	tick := time.NewTicker(b.opts.CursorFlushInterval)
	defer tick.Stop()
	fails := 0
	for {
		select {
		case <-cs.stop:
			return
		case <-tick.C:
		case <-cs.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.flushCursors(ctx)
		cancel()
		if err != nil {
			if fails++; fails%60 == 1 {
				b.log.Warn("stored positions not written; retrying", "err", err, "failures", fails)
			}
		} else {
			fails = 0
		}
	}
}

// haltCursors stops the flusher and writes what is pending (Close).
func (b *Broker) haltCursors() {
	cs := &b.cursors
	if cs.stop == nil || !b.cursorsOn() {
		return
	}
	close(cs.stop)
	<-cs.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.flushCursors(ctx); err != nil {
		b.log.Warn("stored positions not written at shutdown; subscribers resume from the previous ones", "err", err)
	}
}

// FlushCursors writes every changed position now (tests, shutdown).
func (b *Broker) FlushCursors(ctx context.Context) error { return b.flushCursors(ctx) }

func (b *Broker) flushCursors(ctx context.Context) error {
	if b.IsSlave() || !b.cursorsOn() || b.ReadOnly() != nil {
		return nil // a read-only start keeps positions in memory only
	}
	cs := &b.cursors
	cs.wmu.Lock()
	defer cs.wmu.Unlock()
	var recs []byte
	var keys []cursorKey
	cs.mu.Lock()
	for k := range cs.dirty {
		p := cs.live[k]
		keys = append(keys, k)
		recs = appendCursorRecord(recs, &cursorRec{op: cursorOpSet, created: p.created, eventID: p.eventID, updated: p.at, topic: k.topic, who: k.who})
	}
	clear(cs.dirty)
	cs.mu.Unlock()
	if len(keys) > 0 {
		if err := b.writeCursorRecords(ctx, recs, len(keys)); err != nil {
			cs.mu.Lock()
			for _, k := range keys {
				if _, ok := cs.live[k]; ok {
					cs.dirty[k] = struct{}{}
				}
			}
			cs.mu.Unlock()
			return err
		}
	}
	return b.maybeSnapshotCursors(ctx)
}

// writeCursorRecords publishes records to __cursors, creating the topic
// the first time. The caller holds wmu.
func (b *Broker) writeCursorRecords(ctx context.Context, recs []byte, n int) error {
	if err := b.ensureSystemTopic(ctx, CursorTopic); err != nil {
		return err
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.topic, c.records, c.count, c.timestamp = opPub, CursorTopic, recs, n, b.opts.Now()
	if err := b.submit(ctx, c); err != nil {
		return fmt.Errorf("write %d position(s): %w", n, err)
	}
	return nil
}

// maybeSnapshotCursors compacts __cursors when it is due (package doc).
// The caller holds wmu.
func (b *Broker) maybeSnapshotCursors(ctx context.Context) error {
	b.mu.RLock()
	t := b.topics[CursorTopic]
	var files int
	if t != nil && t.log != nil {
		files = len(t.log.Files())
	}
	b.mu.RUnlock()
	if t == nil {
		return nil
	}
	cs := &b.cursors
	now := b.opts.Now()
	cs.mu.Lock()
	since, size, last := cs.sinceSnap, len(cs.committed), cs.lastSnap
	intervalPassed := now-last >= b.opts.CursorSnapshotInterval.Milliseconds()
	idle := false
	if intervalPassed && since == 0 && b.opts.CursorRetention > 0 {
		// Nothing changed: snapshot only to forget idle positions.
		before := now - b.opts.CursorRetention.Milliseconds()
		for _, p := range cs.committed {
			if p.at < before {
				idle = true
				break
			}
		}
		if !idle {
			cs.lastSnap = now // look again one interval later
		}
	}
	cs.mu.Unlock()
	due := (files > 1 && since > size) || (intervalPassed && (since > 0 || idle))
	if !due {
		return nil
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.topic, c.timestamp = opCursorSnapshot, CursorTopic, b.opts.Now()
	if err := b.submit(ctx, c); err != nil {
		return fmt.Errorf("snapshot of the stored positions: %w", err)
	}
	return nil
}

// SetCursor stores eventID as the position of (topic, who); reset (delete)
// removes it. Refused on a slave and while who is subscribed to topic on
// this server (its next ack would overwrite the change).
func (b *Broker) SetCursor(ctx context.Context, topicName, who []byte, eventID int64) error {
	return b.changeCursor(ctx, topicName, who, eventID, cursorOpSet)
}

// ResetCursor removes the stored position of (topic, who).
func (b *Broker) ResetCursor(ctx context.Context, topicName, who []byte) error {
	return b.changeCursor(ctx, topicName, who, 0, cursorOpDelete)
}

func (b *Broker) changeCursor(ctx context.Context, topicName, who []byte, eventID int64, op byte) error {
	if !b.cursorsOn() {
		return ErrCursorsDisabled
	}
	if b.IsSlave() {
		return ErrCursorSlave
	}
	if err := protocol.ValidateTopicName(topicName); err != nil {
		return err
	}
	if string(topicName) == CursorTopic {
		return ErrReservedTopic
	}
	b.mu.RLock()
	t := b.topics[string(topicName)]
	b.mu.RUnlock()
	if t == nil {
		return protocol.ErrTopicNotExist
	}
	if op == cursorOpSet {
		if last := b.LastEventID(); eventID < 0 || eventID > last {
			return protocol.NewBizError(fmt.Sprintf("eventId %d is out of range 0..%d", eventID, last))
		}
	}
	t.subMu.Lock()
	_, active := t.subs[string(who)]
	t.subMu.Unlock()
	if active {
		return protocol.NewBizError(fmt.Sprintf("%s is subscribed to %s on this server; stop it before changing its position", who, topicName))
	}
	cs := &b.cursors
	cs.wmu.Lock()
	defer cs.wmu.Unlock()
	k := cursorKey{string(topicName), string(who)}
	cs.mu.Lock()
	delete(cs.live, k)
	delete(cs.dirty, k)
	cs.mu.Unlock()
	rec := appendCursorRecord(nil, &cursorRec{op: op, created: t.meta.CreateEventID, eventID: eventID, updated: b.opts.Now(), topic: k.topic, who: k.who})
	return b.writeCursorRecords(ctx, rec, 1)
}

// CursorList returns the stored positions, of one topic or (topic "") of
// all, with their lag in messages, sorted by topic then who.
func (b *Broker) CursorList(topicName string) []metrics.CursorInfo {
	if !b.cursorsOn() {
		return nil
	}
	cs := &b.cursors
	type row struct {
		k         cursorKey
		pos, stor cursorPos
		written   bool
	}
	rows := map[cursorKey]*row{}
	b.mu.RLock()
	cs.mu.Lock()
	for k, p := range cs.committed {
		if topicName != "" && k.topic != topicName {
			continue
		}
		if t := b.topics[k.topic]; t != nil && t.meta.CreateEventID == p.created {
			rows[k] = &row{k: k, pos: p, stor: p, written: true}
		}
	}
	for k, p := range cs.live {
		if topicName != "" && k.topic != topicName {
			continue
		}
		t := b.topics[k.topic]
		if t == nil || t.meta.CreateEventID != p.created {
			continue
		}
		if r := rows[k]; r != nil {
			r.pos = p
		} else {
			rows[k] = &row{k: k, pos: p}
		}
	}
	cs.mu.Unlock()
	b.mu.RUnlock()
	out := make([]metrics.CursorInfo, 0, len(rows))
	for _, r := range rows {
		in := metrics.CursorInfo{Topic: r.k.topic, Who: r.k.who, EventID: r.pos.eventID, Updated: r.pos.at, Lag: -1}
		if r.written {
			in.Stored = r.stor.eventID
		} else {
			in.Stored = -1
		}
		b.mu.RLock()
		t := b.topics[r.k.topic]
		b.mu.RUnlock()
		if t != nil {
			t.subMu.Lock()
			_, in.Active = t.subs[r.k.who]
			t.subMu.Unlock()
			in.Lag = b.cursorLag(r.k, t, r.pos.eventID)
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Who < out[j].Who
	})
	return out
}

// cursorLag counts the messages of t after eventId pos, -1 if unknown.
// Counting reads blocks, so it is cached per position: when the position
// or the topic's end moves, only the blocks between the old and the new
// place are read (what was consumed or published since the last call).
func (b *Broker) cursorLag(k cursorKey, t *topic, pos int64) int64 {
	l, err := b.readLog(t)
	if err != nil {
		return -1
	}
	cs := &b.cursors
	cs.lagMu.Lock()
	defer cs.lagMu.Unlock()
	end := l.Committed()
	c := cs.lags[k]
	files := l.Files()
	oldest := int64(-1)
	if len(files) > 0 {
		oldest = files[0]
	}
	valid := c != nil && c.t == t && pos >= c.pos && c.loc.FileID >= oldest
	if valid && pos > c.pos {
		loc, err := b.lagLocate(l, pos)
		if err == nil {
			var gone int64
			gone, err = countBetween(l, c.loc, loc)
			c.count -= gone
			c.loc, c.pos = loc, pos
		}
		valid = err == nil
	}
	if valid {
		added, err := countBetween(l, c.end, end)
		if err == nil {
			c.count += added
			c.end = end
			return c.count
		}
	}
	loc, err := b.lagLocate(l, pos)
	if err != nil {
		delete(cs.lags, k)
		return -1
	}
	n, err := countBetween(l, loc, end)
	if err != nil {
		delete(cs.lags, k)
		return -1
	}
	cs.lags[k] = &lagCache{t: t, pos: pos, loc: loc, end: end, count: n}
	return n
}

func (b *Broker) lagLocate(l *segment.Log, pos int64) (segment.Position, error) {
	loc, err := l.Locate(pos)
	if err != nil {
		return segment.Position{}, err
	}
	return loc.Pos, nil
}

// countBetween counts the whole blocks of l from one block boundary to a
// later one.
func countBetween(l *segment.Log, from, to segment.Position) (int64, error) {
	if !from.Less(to) {
		return 0, nil
	}
	var n int64
	for _, id := range l.Files() {
		if id < from.FileID || id > to.FileID {
			continue
		}
		start, stop := int64(0), to.Offset
		if id == from.FileID {
			start = from.Offset
		}
		if id != to.FileID {
			st, err := os.Stat(l.Path(id))
			if err != nil {
				return 0, err
			}
			stop = st.Size()
		}
		if stop <= start {
			continue
		}
		c, err := l.CountBlocks(id, start, stop, nil)
		if err != nil {
			return 0, err
		}
		n += c.Blocks
	}
	return n, nil
}
