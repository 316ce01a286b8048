package broker

import (
	"crypto/sha256"
	"errors"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
)

// Exactly-once publishing: the dedupe window of message ids (issue 17,
// docs/protocol.md §12.4, message ids).
//
// A pub or delay request may carry an id (protocol.MessageID). The writer
// owns the window, so the check and the insertion are serialised with the
// group commits: a duplicate can never slip in between two groups.
//
//   - The window holds, per topic incarnation, the ids of requests that were
//     committed within the last Options.DedupeWindow (by the binlog block's
//     writeTime), at most Options.DedupeMaxIDs ids over all topics (the
//     oldest go first).
//   - A request whose id is in the window is not staged: it gets the
//     original's eventId and a nil error.
//   - A request whose id was staged earlier in the same group (in flight:
//     not yet committed) waits with the group and gets the first one's
//     outcome: its eventId, or its error when the group failed. A request
//     queued behind a group that failed finds nothing in the window and is
//     processed as a new publish (nothing of the failed one was stored).
//   - An id is entered when its request is staged and is a window entry
//     once its group committed; a failed group's ids are removed. Deleting
//     a topic drops its ids. A delay apply (101) is never checked or added:
//     it carries the records of the delay request, whose id is already in
//     the window.
//   - On a slave the writer adds the ids of the replicated pub and delay
//     blocks it applies (without checking: the master decided), so a
//     promoted slave already holds the window.
//   - At start-up the window is rebuilt from the binlog blocks written
//     within the window (rebuildDedupe): nothing is persisted for it and
//     the binlog stays byte-identical.
//
// Memory: one id costs about 140 bytes of heap (its 17-byte key and
// entry in a map slot, with the map's growth slack, and its eviction queue
// item), none of it scanned by the garbage collector; measured by
// BenchmarkDedupeMemory (BENCHMARKS.md, dedupe.maxIds).

// Defaults of Options.DedupeWindow and Options.DedupeMaxIDs.
const (
	DefaultDedupeWindow = 2 * time.Minute
	DefaultDedupeMaxIDs = 1_000_000
)

// idKey is a message id as the window keys it, in 17 bytes: the id itself
// when it has at most 16 bytes; the 16 bytes that 32 lowercase hex
// characters (the Go client's ids) decode to; else the first 16 bytes of
// its SHA-256 (two different ids then share a key with a probability of
// about n²/2¹²⁹ for n ids: never, in practice). It holds no pointer, so
// neither the window's maps nor its queue are scanned by the garbage
// collector, and making one allocates nothing. The zero idKey is "no id".
type idKey struct {
	n uint8 // the id's length 1..16, hexID or hashedID
	b [16]byte
}

const (
	hexID    = 0xfe // b is what 32 lowercase hex characters decode to
	hashedID = 0xff // b is the SHA-256 prefix of any other longer id
)

// makeIDKey returns the key of a valid id (1..protocol.MaxMsgIDLen bytes).
func makeIDKey(id []byte) idKey {
	var k idKey
	if len(id) <= len(k.b) {
		k.n = uint8(len(id))
		copy(k.b[:], id)
		return k
	}
	if len(id) == 2*len(k.b) && decodeLowerHex(k.b[:], id) {
		k.n = hexID
		return k
	}
	sum := sha256.Sum256(id)
	k.n = hashedID
	copy(k.b[:], sum[:])
	return k
}

// decodeLowerHex decodes src (2×len(dst) bytes of 0-9a-f only, so that one
// key stands for one id) into dst.
func decodeLowerHex(dst, src []byte) bool {
	for i := range dst {
		hi, ok1 := lowerHexVal(src[2*i])
		lo, ok2 := lowerHexVal(src[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func lowerHexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// dedupeSet is the window of one topic incarnation. Only the writer (and
// recovery, before the writer starts) touches it.
type dedupeSet struct {
	m  map[idKey]dedupeVal // nil once the topic was deleted
	id uint32              // its key in dedupeState.sets
}

// dedupeVal is one id's entry. An entry is entered when its request is
// staged, with its final values: while the group is being staged, entries
// whose eventID is at or above dedupeState.from are that group's, in
// flight; once the group committed the next group's from is above them
// and they are window entries without another map write. A failed group's
// entries are removed (settle). So a request with an id costs the writer
// one lookup and one insert.
type dedupeVal struct {
	eventID int64 // first eventId of the original request
	at      int64 // writeTime (ms) of its binlog block
}

// dedupeItem is one id in insertion (time) order, for eviction. It names
// its set by number, not by pointer, so the queue holds no pointer.
type dedupeItem struct {
	set     uint32
	id      idKey
	eventID int64
	at      int64
}

// dedupeState is the writer's window over all topics.
type dedupeState struct {
	window int64 // ms; <= 0: dedupe off
	max    int

	fifo idQueue
	live int

	// sets are the live topic windows by number, for the queue's items.
	sets    map[uint32]*dedupeSet
	nextSet uint32 // ids held over all sets, in-flight ones included

	// from is the first eventId of the group being staged (set by
	// process): entries at or above it are in flight.
	from int64
	// This group's requests with an id (pend) and the in-flight
	// duplicates of them (dups).
	pend []*command
	dups []*command
}

func (d *dedupeState) on() bool { return d.window > 0 }

// setOf returns t's window, creating it on first use.
func (d *dedupeState) setOf(t *topic) *dedupeSet {
	if t.ids == nil {
		if d.sets == nil {
			d.sets = map[uint32]*dedupeSet{}
		}
		d.nextSet++
		t.ids = &dedupeSet{m: map[idKey]dedupeVal{}, id: d.nextSet}
		d.sets[t.ids.id] = t.ids
	}
	return t.ids
}

// check looks c's id up in t's window. A duplicate of a request committed
// within the window, or of one in flight in this group, is settled as such
// (dup: c must not be staged). Otherwise the caller stages c and then
// enters its id with stage; existed says whether the id has an (expired)
// entry.
func (d *dedupeState) check(t *topic, c *command, now int64) (dup, existed bool) {
	if t.ids == nil {
		d.setOf(t)
		return false, false
	}
	v, ok := t.ids.m[c.msgID]
	if !ok {
		return false, false
	}
	if v.eventID >= d.from {
		// In flight: the request of this group that entered it.
		for i := len(d.pend) - 1; i >= 0; i-- {
			if p := d.pend[i]; p.ddTopic == t && p.msgID == c.msgID {
				c.dup, c.dupOf = true, p
				d.dups = append(d.dups, c)
				return true, true
			}
		}
	}
	if v.at >= now-d.window {
		c.dup, c.eventID = true, v.eventID
		return true, true
	}
	return false, true
}

// stage enters c's id into t's window as in flight: eventID is the first
// eventId c was given, at the writeTime of its block.
func (d *dedupeState) stage(t *topic, c *command, eventID, at int64, existed bool) {
	if !existed {
		d.live++
	}
	c.ddTopic, c.ddID, c.ddAt = t, eventID, at
	t.ids.m[c.msgID] = dedupeVal{eventID: eventID, at: at}
	d.pend = append(d.pend, c)
}

// settle ends a group: the ids of a committed group join the eviction
// queue, those of a failed one are removed, and in-flight duplicates take
// the outcome of the request they duplicate.
func (d *dedupeState) settle(committed bool, now int64) {
	for i, c := range d.pend {
		set := c.ddTopic.ids
		if committed && c.err == nil {
			d.fifo.push(dedupeItem{set: set.id, id: c.msgID, eventID: c.ddID, at: c.ddAt})
		} else if v, ok := set.m[c.msgID]; ok && v.eventID == c.ddID {
			// (A later request of the group that re-entered the id, a
			// slave applying a master's blocks that hold it twice,
			// removes its own entry.)
			delete(set.m, c.msgID)
			d.live--
		}
		c.ddTopic = nil
		d.pend[i] = nil
	}
	for i, c := range d.dups {
		c.eventID, c.err = c.dupOf.eventID, c.dupOf.err
		if c.err != nil {
			c.eventID = 0
		}
		c.dupOf = nil
		d.dups[i] = nil
	}
	d.pend, d.dups = d.pend[:0], d.dups[:0]
	if committed {
		d.evict(now)
	}
}

// add puts id into t's window. An entry already there (expired, or the
// master's choice on a slave) is replaced.
func (d *dedupeState) add(t *topic, id idKey, eventID, at int64) {
	set := d.setOf(t)
	if _, ok := set.m[id]; !ok {
		d.live++
	}
	set.m[id] = dedupeVal{eventID: eventID, at: at}
	d.fifo.push(dedupeItem{set: set.id, id: id, eventID: eventID, at: at})
}

// evict drops the ids older than the window and the oldest beyond max.
func (d *dedupeState) evict(now int64) {
	cut := now - d.window
	for d.fifo.len() > 0 {
		it := d.fifo.front()
		if it.at >= cut && d.live <= d.max {
			break
		}
		// An item whose id was replaced by a newer entry, or whose topic
		// was deleted, only leaves the queue.
		if set := d.sets[it.set]; set != nil {
			if v, ok := set.m[it.id]; ok && v.eventID == it.eventID {
				delete(set.m, it.id)
				d.live--
			}
		}
		d.fifo.pop()
	}
}

// drop forgets the ids of a deleted topic: a topic created later under the
// same name starts with an empty window.
func (d *dedupeState) drop(t *topic) {
	s := t.ids
	if s == nil {
		return
	}
	d.live -= len(s.m)
	s.m = nil
	t.ids = nil
	delete(d.sets, s.id)
	// Deletes are rare and run alone in their group: filter the queue now
	// so it never holds more than the live ids plus the expired ones.
	d.fifo.filter(func(it *dedupeItem) bool { return it.set != s.id })
}

// idQueueChunk is the number of items of one idQueue chunk (160 KiB).
const idQueueChunk = 4096

// idQueue is the eviction queue: fixed-size chunks, so that growing it
// never copies what it holds (a slice's doubling moved up to tens of MB
// on the writer's goroutine and kept up to twice the memory), and popped
// chunks are reused.
type idQueue struct {
	chunks [][]dedupeItem
	head   int // next item to pop in chunks[0]
	n      int
	spare  []dedupeItem
}

func (q *idQueue) len() int { return q.n }

func (q *idQueue) push(it dedupeItem) {
	last := len(q.chunks) - 1
	if last < 0 || len(q.chunks[last]) == idQueueChunk {
		c := q.spare
		q.spare = nil
		if c == nil {
			c = make([]dedupeItem, 0, idQueueChunk)
		}
		q.chunks = append(q.chunks, c)
		last++
	}
	q.chunks[last] = append(q.chunks[last], it)
	q.n++
}

// front is the oldest item; the queue must not be empty.
func (q *idQueue) front() *dedupeItem { return &q.chunks[0][q.head] }

func (q *idQueue) pop() {
	c := q.chunks[0]
	c[q.head] = dedupeItem{} // release the id and the set
	q.head++
	q.n--
	if q.head == len(c) && (len(c) == idQueueChunk || q.n == 0) {
		q.spare = c[:0]
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
		q.head = 0
		if len(q.chunks) == 0 {
			q.chunks = nil
		}
	}
}

// filter keeps the items keep accepts, in order.
func (q *idQueue) filter(keep func(*dedupeItem) bool) {
	old := *q
	*q = idQueue{spare: old.spare}
	for i, c := range old.chunks {
		from := 0
		if i == 0 {
			from = old.head
		}
		for j := from; j < len(c); j++ {
			if keep(&c[j]) {
				q.push(c[j])
			}
		}
	}
}

// publishID returns the key of the message id of a pub or delay request's
// records, the zero key when it has none or dedupe is off, and the refusal of an invalid one
// (which is checked even when dedupe is off, so a client sees the same
// protocol whatever the configuration).
func (b *Broker) publishID(records []byte) (idKey, error) {
	id, err := protocol.MessageID(records)
	if err != nil || id == nil || b.opts.DedupeWindow <= 0 {
		return idKey{}, err
	}
	return makeIDKey(id), nil
}

// DedupeIDs returns the number of message ids the dedupe window holds.
func (b *Broker) DedupeIDs() int64 { return b.dedupeIDs.Load() }

// publishDedupeSize makes the window's size visible to DedupeIDs.
func (w *writer) publishDedupeSize() {
	w.b.dedupeIDs.Store(int64(w.dd.live))
}

// replicatedID adds the id of a replicated pub or delay block to the
// pending ids of the group (slave side; no check, the master decided).
func (w *writer) replicatedID(t *topic, c *command, records []byte, at int64) {
	if !w.dd.on() {
		return
	}
	id, err := protocol.MessageID(records)
	if err != nil || id == nil {
		return // an id the master accepted is valid; anything else is no id
	}
	// No check: the master decided. Should the master have stored the
	// id twice in one group (outside its window), settle adds both in
	// order and the later one is what the window keeps.
	c.msgID = makeIDKey(id)
	_, existed := w.dd.setOf(t).m[c.msgID]
	w.dd.stage(t, c, c.repl.EventID, at, existed)
}

// dedupeRecords returns the records of a pub or delay block that may carry
// a message id, nil for other blocks.
func dedupeRecords(blk *binlog.Block) []byte {
	switch blk.Cmd {
	case binlog.CmdPub:
		return blk.Payload
	case binlog.CmdDelay:
		if len(blk.Payload) > binlog.DelayPrefixLen {
			return blk.Payload[binlog.DelayPrefixLen:]
		}
	}
	return nil
}

// dedupeProgressEvery is how often a long window rebuild logs where it is.
// A variable for tests.
var dedupeProgressEvery = 5 * time.Second

// rebuildDedupe fills d from the binlog blocks written within the window,
// before the writer starts. It reads only the tail files that can hold
// such blocks: from the newest file whose first block is older than the
// window. A damaged older file ends the rebuild early (logged): recovery
// already vouched for the tail it serves from, and a shorter window only
// means an old retry may be stored again.
func (b *Broker) rebuildDedupe(d *dedupeState) {
	if !d.on() {
		return
	}
	start := time.Now()
	now := b.opts.Now()
	cut := now - d.window
	files := b.binlog.Files()
	from := -1
	for i := len(files) - 1; i >= 0; i-- {
		wt, ok, err := b.firstWriteTime(files[i])
		if err != nil {
			b.log.Warn("dedupe window: read binlog file start", "file", b.binlog.Path(files[i]), "err", err)
			break
		}
		if !ok {
			continue
		}
		from = i
		if wt < cut {
			break
		}
	}
	if from < 0 {
		return
	}
	pos := segment.Position{FileID: files[from]}
	end := b.binlog.Committed()
	blocks, logAt := 0, time.Now().Add(dedupeProgressEvery)
	_, err := b.binlog.Scan(pos, func(p segment.Position, _, _ int64, raw []byte) error {
		blocks++
		if blocks%256 == 0 && time.Now().After(logAt) {
			logAt = time.Now().Add(dedupeProgressEvery)
			b.log.Info("rebuilding dedupe window from the binlog", "at", p.String(), "to", end.String(),
				"blocks", blocks, "ids", d.live)
		}
		blk, _, err := binlog.DecodeBlock(raw)
		if err != nil {
			return err
		}
		if blk.WriteTime < cut {
			return nil
		}
		recs := dedupeRecords(&blk)
		if recs == nil {
			return nil
		}
		id, err := protocol.MessageID(recs)
		if err != nil || id == nil {
			return nil
		}
		t := b.topics[string(blk.Topic)]
		if t == nil || t.meta.CreateEventID > blk.EventID {
			return nil // an earlier incarnation's id
		}
		d.add(t, makeIDKey(id), blk.EventID, blk.WriteTime)
		if d.live > d.max {
			d.evict(now)
		}
		return nil
	})
	if err != nil {
		b.log.Error("dedupe window: binlog scan stopped early; older ids are not in the window", "from", pos.String(), "err", err)
	}
	d.evict(now)
	b.dedupeIDs.Store(int64(d.live))
	b.log.Info("dedupe window rebuilt", "ids", d.live, "from", pos.String(), "blocks", blocks, "took", time.Since(start))
}

var errFirstBlock = errors.New("first block read")

// firstWriteTime returns the writeTime of the first block of binlog file
// id; ok is false when the file holds no whole block.
func (b *Broker) firstWriteTime(id int64) (int64, bool, error) {
	var wt int64
	found := false
	_, err := b.binlog.Scan(segment.Position{FileID: id}, func(p segment.Position, _, _ int64, raw []byte) error {
		if p.FileID == id {
			blk, _, err := binlog.DecodeBlock(raw)
			if err != nil {
				return err
			}
			wt, found = blk.WriteTime, true
		}
		return errFirstBlock
	})
	if err != nil && !errors.Is(err, errFirstBlock) {
		return 0, false, err
	}
	return wt, found, nil
}
