package broker

// The stage "stage" of a group commit (pipeline.go): the per-command
// staging steps, one function per writer op (stageGroup dispatches here).
// Staging validates each command, assigns its eventIds and appends its
// binlog block, topic blocks, meta entries and file-system actions to the
// group's buffers; it writes nothing. The later stages then write,
// sync and publish the group, or roll it back as a whole.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
)

// stageGroup stages every command of the group; the ones staged without
// error and not answered by the dedupe window join w.grp.ok, which the
// later stages write.
func (w *writer) stageGroup(g *groupRun) error {
	now, binStart := g.now, g.binStart
	w.dd.from = w.next
	w.reset()
	for _, c := range g.group {
		var err error
		switch c.op {
		case opPub:
			err = w.stagePub(c, now, binStart)
		case opCreate:
			err = w.stageCreate(c, now)
		case opDelete:
			err = w.stageDelete(c, now)
		case opDelay:
			err = w.stageDelay(c, now)
		case opDelayApply:
			err = w.stageDelayApply(c, now, binStart)
		case opReplicated:
			err = w.stageReplicated(c, now, binStart)
		case opSyncTopic:
			err = w.stageSyncTopic(c)
		case opCursorSnapshot:
			err = w.stageCursorSnapshot(c, now, binStart)
		case opOpenLog:
			if t := w.b.topics[c.topic]; t != nil {
				_, err = w.b.topicLog(t)
			}
			c.err = err
			continue
		case opPromote:
			c.err = w.promote(c)
			continue
		case opEpoch:
			c.err = w.learnEpoch(c)
			continue
		default:
			err = fmt.Errorf("broker: command %v is not a writer command", c.op)
		}
		if err != nil {
			c.err = err
			continue
		}
		if c.dup {
			continue // answered by the dedupe window (dedupe.go)
		}
		w.grp.ok = append(w.grp.ok, c)
	}
	g.writes = len(w.grp.ok) > 0 && (len(w.grp.binBuf) > 0 || !w.grp.mb.Empty())
	return nil
}

func (w *writer) stagePub(c *command, now int64, binStart segment.Position) error {
	t := w.b.topics[c.topic]
	if t == nil || t.meta.Expired(now) {
		return protocol.ErrTopicNotExist
	}
	existed := false
	if c.msgID.n != 0 {
		var dup bool
		if dup, existed = w.dd.check(t, c, now); dup {
			return nil
		}
	}
	l, err := w.b.topicLog(t)
	if err != nil {
		return fmt.Errorf("open topic %s: %w", c.topic, err)
	}
	c.eventID = w.next
	w.next += int64(c.count)
	if c.msgID.n != 0 {
		w.dd.stage(t, c, c.eventID, now, existed) // nothing below fails
	}
	off := w.appendBinlog(&binlog.Block{WriteTime: now, Cmd: binlog.CmdPub, EventID: c.eventID,
		Timestamp: c.timestamp, Topic: []byte(c.topic), Payload: c.records})
	tb := w.batchFor(t, l)
	w.appendTopicBlocks(tb, c.eventID, now, segment.Position{FileID: binStart.FileID, Offset: binStart.Offset + off}, c.records)
	if c.topic == CursorTopic {
		recs := c.records
		w.grp.post = append(w.grp.post, func() { w.b.applyCursorRecords(recs, tb) })
	}
	if c.topic == QueueTopic && startsQueueSnapshot(c.records) {
		w.grp.post = append(w.grp.post, func() { w.b.compactBefore(tb) })
	}
	if w.b.sample() {
		w.b.log.Info("pub", "topic", c.topic, "eventId", c.eventID, "records", c.count, "bytes", len(c.records))
	}
	return nil
}

func (w *writer) stageCreate(c *command, now int64) error {
	if w.b.topics[c.topic] != nil {
		return protocol.ErrTopicExist
	}
	c.eventID = w.next
	w.next++
	w.appendBinlog(&binlog.Block{WriteTime: now, Cmd: binlog.CmdCreate, EventID: c.eventID,
		Timestamp: c.timestamp, Topic: []byte(c.topic), Payload: int64Payload(c.expireAt)})
	m := meta.Topic{Name: c.topic, CreateTime: now, ExpireAt: c.expireAt, CreateEventID: c.eventID,
		StateChangeTime: now, StateChangeEventID: c.eventID}
	w.grp.mb.PutTopic(&m)
	dir := w.b.topicDir(c.topic)
	eid := c.eventID
	w.grp.pre = append(w.grp.pre, fsAction{
		do:   func() error { return w.b.freshDir(dir, eid) },
		undo: func() error { return removeAll(dir) },
	})
	w.grp.post = append(w.grp.post, func() {
		w.b.addTopic(m, dir)
		if f := w.b.hook().TopicExpiry; f != nil && m.ExpireAt > 0 {
			f(m.ExpireAt)
		}
	})
	w.b.log.Info("create topic", "topic", c.topic, "eventId", c.eventID, "expireAt", c.expireAt)
	return nil
}

func (w *writer) stageDelete(c *command, now int64) error {
	t := w.b.topics[c.topic]
	if t == nil {
		return protocol.ErrTopicNotExist
	}
	if c.expireAt != 0 && (t.meta.ExpireAt != c.expireAt || !t.meta.Expired(now)) {
		return nil // an expiry delete for an incarnation that is gone or not due
	}
	c.eventID = w.next
	w.next++
	w.appendBinlog(&binlog.Block{WriteTime: now, Cmd: binlog.CmdDelete, EventID: c.eventID,
		Timestamp: c.timestamp, Topic: []byte(c.topic)})
	w.stageTopicRemoval(t, c.eventID)
	w.b.log.Info("delete topic", "topic", c.topic, "eventId", c.eventID)
	return nil
}

func (w *writer) stageDelay(c *command, now int64) error {
	t := w.b.topics[c.topic]
	if t == nil || t.meta.Expired(now) {
		return protocol.ErrTopicNotExist
	}
	if c.msgID.n != 0 {
		dup, existed := w.dd.check(t, c, now)
		if dup {
			return nil
		}
		w.dd.stage(t, c, w.next, now, existed) // nothing below fails
	}
	c.eventID = w.next
	w.next++
	value := meta.DelayValue(c.trigger, c.eventID, c.records)
	w.appendBinlog(&binlog.Block{WriteTime: now, Cmd: binlog.CmdDelay, EventID: c.eventID,
		Timestamp: c.timestamp, Topic: []byte(c.topic), Payload: value})
	w.grp.mb.PutDelay(meta.DelayKey(c.trigger, c.eventID, []byte(c.topic)), value)
	trigger := c.trigger
	w.grp.post = append(w.grp.post, func() {
		if f := w.b.hook().DelayStored; f != nil {
			f(trigger)
		}
	})
	if w.b.sample() {
		w.b.log.Info("delay", "topic", c.topic, "eventId", c.eventID, "trigger", c.trigger, "records", c.count)
	}
	return nil
}

func (w *writer) stageDelayApply(c *command, now int64, binStart segment.Position) error {
	key, err := meta.DelayKeyFromValue(c.records, []byte(c.topic))
	if err != nil {
		return fmt.Errorf("delay apply: %w", err)
	}
	if w.grp.applied[string(key)] {
		return nil // the same key twice in one group
	}
	ok, err := w.b.meta.HasDelay(key)
	if err != nil {
		return fmt.Errorf("delay apply: %w", err)
	}
	if !ok {
		return nil // already applied
	}
	delayID := int64(binary.LittleEndian.Uint64(c.records[8:]))
	t := w.b.topics[c.topic]
	if t == nil || t.meta.Expired(now) || t.meta.CreateEventID > delayID {
		// The topic it was stored for is gone; a topic created later
		// under the same name must not inherit it (docs/protocol.md §11).
		w.b.log.Info("delayed message dropped: its topic is gone", "topic", c.topic, "delayEventId", delayID)
		w.grp.applied[string(key)] = true
		w.grp.mb.DeleteDelay(key)
		return nil
	}
	records := c.records[binlog.DelayPrefixLen:]
	count, err := protocol.CountRecords(records, 0)
	if err != nil {
		return fmt.Errorf("BUG: stored delay value has invalid records: %w", err)
	}
	l, err := w.b.topicLog(t)
	if err != nil {
		return fmt.Errorf("open topic %s: %w", c.topic, err)
	}
	// Nothing below can fail: the key's removal is staged together with
	// the publication it stands for, never without it.
	w.grp.applied[string(key)] = true
	w.grp.mb.DeleteDelay(key)
	c.eventID = w.next
	w.next += int64(count)
	off := w.appendBinlog(&binlog.Block{WriteTime: now, Cmd: binlog.CmdDelayApply, EventID: c.eventID,
		Timestamp: c.timestamp, Topic: []byte(c.topic), Payload: c.records})
	w.appendTopicBlocks(w.batchFor(t, l), c.eventID, now, segment.Position{FileID: binStart.FileID, Offset: binStart.Offset + off}, records)
	return nil
}

func (w *writer) stageReplicated(c *command, now int64, binStart segment.Position) error {
	if !w.b.IsSlave() {
		// Queued before a promotion that the writer ran first.
		return errors.New("broker: replicated block refused: this node was promoted to master")
	}
	if c.prevLast >= 0 && w.next-1 != c.prevLast {
		return fmt.Errorf("%w: the block before this one (ending at %d) was not applied; the slave has up to %d", ErrReplicaOrder, c.prevLast, w.next-1)
	}
	blk, last := &c.repl, c.replLast
	if blk.EventID < w.next {
		return fmt.Errorf("%w: block eventId %d, but the slave already has up to %d", ErrReplicaOrder, blk.EventID, w.next-1)
	}
	off := int64(len(w.grp.binBuf))
	w.grp.binMarks = append(w.grp.binMarks, segment.Mark{EventID: blk.EventID, Off: off})
	w.grp.binBuf = append(w.grp.binBuf, c.raw...)
	w.next = last + 1
	c.eventID = last
	src := segment.Position{FileID: binStart.FileID, Offset: binStart.Offset + off}
	name := string(blk.Topic)
	t := w.b.topics[name]
	// Expiry is not checked here: the master accepted the block by its
	// clock, and the slave follows the master's replicated deletes.
	switch blk.Cmd {
	case binlog.CmdPub:
		if t != nil {
			// count and records describe the publication for metrics,
			// read by the submitter (records aliases raw: no copy).
			c.count, c.records = int(last-blk.EventID+1), blk.Payload
			if name == CursorTopic {
				// The positions a promoted slave resumes from (cursor.go);
				// a snapshot is durable before the files it replaces go.
				if startsWithSnapshot(blk.Payload) {
					w.grp.syncMeta = w.b.opts.FlushLevel > 0
				}
				recs := blk.Payload
				w.grp.post = append(w.grp.post, func() { w.b.applyCursorRecords(recs, w.grp.batchOf[t]) })
			}
			if name == QueueTopic && startsQueueSnapshot(blk.Payload) {
				// As on the master: a snapshot is durable before the files
				// it replaces go.
				w.grp.syncMeta = w.b.opts.FlushLevel > 0
				w.grp.post = append(w.grp.post, func() { w.b.compactBefore(w.grp.batchOf[t]) })
			}
			if err := w.replicaTopicBlocks(t, blk.EventID, now, src, blk.Payload); err != nil {
				return err
			}
			w.replicatedID(t, c, blk.Payload, blk.WriteTime)
			return nil
		}
	case binlog.CmdDelayApply:
		key, err := meta.DelayKeyFromValue(blk.Payload, blk.Topic)
		if err != nil {
			return fmt.Errorf("invalid replicated delay apply: %w", err)
		}
		w.grp.mb.DeleteDelay(key)
		if t != nil {
			c.count, c.records = int(last-blk.EventID+1), blk.Payload[binlog.DelayPrefixLen:]
			return w.replicaTopicBlocks(t, blk.EventID, now, src, blk.Payload[binlog.DelayPrefixLen:])
		}
	case binlog.CmdDelay:
		if t != nil {
			key, err := meta.DelayKeyFromValue(blk.Payload, blk.Topic)
			if err != nil {
				return fmt.Errorf("invalid replicated delay: %w", err)
			}
			// Stored, ready for a promotion, but not scheduled.
			w.grp.mb.PutDelay(key, append([]byte(nil), blk.Payload...))
			w.replicatedID(t, c, blk.Payload[binlog.DelayPrefixLen:], blk.WriteTime)
		}
	case binlog.CmdCreate:
		if t != nil {
			return nil
		}
		// A name the original accepted and this server refuses to
		// create (".", a backslash, a space…) is applied as opening an
		// original data directory applies it: the topic exists, its
		// messages are kept and served. Only a name whose directory
		// could leave its hashing bucket ("..", '/') is never applied.
		if err := protocol.ValidateExistingTopicName(blk.Topic); err != nil {
			w.b.log.Error("replicated create of a topic name whose directory would leave the topic root; binlog kept, topic not created", "topic", name, "err", err)
			return nil
		}
		expireAt := int64(binary.LittleEndian.Uint64(blk.Payload))
		if expireAt != 0 && expireAt <= now {
			return nil
		}
		m := meta.Topic{Name: name, CreateTime: now, ExpireAt: expireAt, CreateEventID: blk.EventID,
			StateChangeTime: now, StateChangeEventID: blk.EventID}
		w.grp.mb.PutTopic(&m)
		dir := w.b.topicDir(name)
		w.grp.pre = append(w.grp.pre, fsAction{
			do:   func() error { return w.b.freshDir(dir, blk.EventID) },
			undo: func() error { return removeAll(dir) },
		})
		w.grp.post = append(w.grp.post, func() { w.b.addTopic(m, dir) })
	case binlog.CmdDelete:
		if t == nil {
			return nil
		}
		w.stageTopicRemoval(t, blk.EventID)
	}
	return nil
}

// stageTopicRemoval stages the meta removal of t, deleted by the block
// eventID, and, once the group committed, the removal of its files and of
// everything the writer keeps for it (a delete on a master or applied on a
// slave alike).
func (w *writer) stageTopicRemoval(t *topic, eventID int64) {
	w.grp.mb.DeleteTopic(&t.meta)
	// Moving the files away must never become durable before the binlog
	// block and meta removal that justify it.
	w.grp.syncMeta = w.b.opts.FlushLevel > 0
	w.grp.post = append(w.grp.post, func() {
		delete(w.dur.dirty, t)
		w.dd.drop(t)
		w.publishDedupeSize()
		w.forgetOpen(t)
		w.b.removeTopic(t, eventID)
	})
}

func (w *writer) stageSyncTopic(c *command) error {
	if w.b.topics[c.topic] != nil {
		return nil
	}
	m := *c.sync
	w.grp.mb.PutTopic(&m)
	dir := w.b.topicDir(m.Name)
	w.grp.pre = append(w.grp.pre, fsAction{
		do:   func() error { return w.b.freshDir(dir, m.CreateEventID) },
		undo: func() error { return removeAll(dir) },
	})
	w.grp.post = append(w.grp.post, func() { w.b.addTopic(m, dir) })
	c.eventID = m.CreateEventID
	return nil
}

// stageCursorSnapshot builds the snapshot from the table as committed so
// far (the command runs alone in its group, so nothing is pending) and
// stages it as a pub.
func (w *writer) stageCursorSnapshot(c *command, now int64, binStart segment.Position) error {
	cs := &w.b.cursors
	cs.mu.Lock()
	keys := make([]cursorKey, 0, len(cs.committed))
	idleBefore := int64(-1)
	if r := w.b.opts.CursorRetention; r > 0 {
		idleBefore = now - r.Milliseconds()
	}
	dropped := 0
	for k, p := range cs.committed {
		t := w.b.topics[k.topic]
		if t == nil || t.meta.CreateEventID != p.created {
			continue
		}
		if p.at < idleBefore && !t.hasSub(k.who) {
			dropped++ // idle longer than cursor.retentionDays: left out, so forgotten
			continue
		}
		keys = append(keys, k)
	}
	if dropped > 0 {
		w.b.log.Info("stored positions idle longer than the retention forgotten", "positions", dropped, "retention", w.b.opts.CursorRetention)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].topic != keys[j].topic {
			return keys[i].topic < keys[j].topic
		}
		return keys[i].who < keys[j].who
	})
	recs := appendCursorRecord(nil, &cursorRec{op: cursorOpSnapshot, eventID: now})
	for _, k := range keys {
		p := cs.committed[k]
		recs = appendCursorRecord(recs, &cursorRec{op: cursorOpSet, created: p.created, eventID: p.eventID, updated: p.at, topic: k.topic, who: k.who})
	}
	cs.mu.Unlock()
	c.op, c.records, c.count = opPub, recs, len(keys)+1
	// The files before the snapshot are removed after it commits; that
	// must never become durable before the snapshot does.
	w.grp.syncMeta = w.b.opts.FlushLevel > 0
	return w.stagePub(c, now, binStart)
}
