package queue

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/protocol"
)

// entry is a pending message: delivered at least once, not done. It is in
// flight while holder is set (until deadline), else waiting to be
// delivered again from due on.
type entry struct {
	id       int64
	ts       int64
	rec      []byte // the stored record (§1.4), nil until read back after a restart
	attempt  int
	holder   *Consumer
	deadline time.Time
	due      time.Time
}

// fresh is a message read from the topic and not delivered yet.
type fresh struct {
	id  int64
	ts  int64
	rec []byte
}

// Events of a group's loop.
type (
	outcomesEv struct {
		c  *Consumer
		os []protocol.QueueOutcome
	}
	leaveEv struct{ c *Consumer }
	joinEv  struct {
		c   *Consumer
		err chan error
	}
	infoEv struct{ reply chan protocol.QueueInfo }
	stopEv struct{ err error } // end the loop; every consumer ends with err
	feedEv struct {
		msgs []fresh
		err  error
	}
)

// group runs one queue group: one goroutine (run) owns the runtime state
// and makes every decision, in the shape of go-diskqueue's ioLoop: every
// event arrives through one channel, and after each batch of events one
// record of __queues says what changed, before any consumer hears of it.
type group struct {
	m   *Manager
	key groupKey

	// st is the durable state, changed only by the loop after a record
	// committed; smu lets the snapshot writer and info read it.
	smu sync.Mutex
	st  *groupState

	events chan any
	quit   chan struct{} // closed when run returns
	ctx    context.Context
	cancel context.CancelFunc

	// loop-owned
	entries   map[int64]*entry
	fresh     []fresh
	consumers []*Consumer
	inbox     []outcomesEv
	rr        int // round-robin start among consumers
	feedBusy  bool
	feedWant  chan struct{}
	feedOut   chan feedEv
	sub       *broker.Subscription
	recover   []int64 // pending ids whose records must be read back
	timer     *time.Timer
	// wake is at or before the earliest deadline and due time of the
	// entries (zero: none): before it no step needs to look at them, so a
	// step costs O(its events), not O(pending).
	wake      time.Time
	ended     bool
	endReason error
}

func newGroup(m *Manager, st *groupState) *group {
	ctx, cancel := context.WithCancel(m.ctx)
	g := &group{m: m, key: st.key, st: st, events: make(chan any, 256), quit: make(chan struct{}),
		ctx: ctx, cancel: cancel, entries: map[int64]*entry{}, feedWant: make(chan struct{}, 1),
		feedOut: make(chan feedEv, 1)}
	now := m.now()
	for id, a := range st.pending {
		// Not durable: who held it and until when. Whoever held it may
		// still be working on it, so it waits a full ack wait.
		g.entries[id] = &entry{id: id, attempt: a, due: now.Add(g.ackWait())}
		g.recover = append(g.recover, id)
		g.wake = now.Add(g.ackWait())
	}
	sort.Slice(g.recover, func(i, j int) bool { return g.recover[i] < g.recover[j] })
	return g
}

func (g *group) ackWait() time.Duration { return time.Duration(g.st.cfg.AckWaitMs) * time.Millisecond }

// post hands an event to the loop; after the loop ended it answers what
// needs an answer.
func (g *group) post(ev any) {
	select {
	case g.events <- ev:
	case <-g.quit:
		switch e := ev.(type) {
		case joinEv:
			e.err <- ErrGroupGone
		case infoEv:
			close(e.reply)
		}
	}
}

// start reads back the records of recovered pending messages and starts
// the loop and the topic reader.
func (g *group) start() error {
	if err := g.readBack(); err != nil {
		return err
	}
	sub, err := g.m.b.Subscribe([]byte(g.key.topic), []byte(readerWho(g.key.group)), g.st.next)
	if err != nil {
		return fmt.Errorf("read topic %s from eventId %d: %w", g.key.topic, g.st.next, err)
	}
	g.sub = sub
	g.timer = time.NewTimer(time.Hour)
	g.m.wg.Add(2)
	go g.feed()
	go g.run()
	return nil
}

// readerWho is the subscriber name the group's topic reader registers.
func readerWho(group string) string { return "__queue." + group }

// readBack reads the stored records of the pending messages recovered from
// __queues, from the topic. One that retention removed meanwhile is
// dropped (recorded, counted).
func (g *group) readBack() error {
	if len(g.recover) == 0 {
		return nil
	}
	first, last := g.recover[0], g.recover[len(g.recover)-1]
	err := g.m.b.ReadMessages(g.key.topic, first-1, last, func(id, ts int64, rec []byte) error {
		if e := g.entries[id]; e != nil && e.rec == nil {
			e.ts, e.rec = ts, append([]byte(nil), rec...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read back %d pending message(s) of %s: %w", len(g.recover), g.key.topic, err)
	}
	var lost []event
	for _, id := range g.recover {
		if e := g.entries[id]; e.rec == nil {
			lost = append(lost, event{op: evDrop, eventID: id, attempt: e.attempt})
		}
	}
	g.recover = nil
	if len(lost) > 0 {
		g.m.log.Warn("pending messages of a queue group are no longer in their topic (retention removed them); dropped",
			"topic", g.key.topic, "group", g.key.group, "messages", len(lost))
		// Recorded without waiting for slaves: a failover before they
		// have it finds the same messages gone and drops them again.
		if err := g.m.write(g.ctx, g, lost, false); err != nil {
			return err
		}
		for _, e := range lost {
			delete(g.entries, e.eventID)
		}
	}
	return nil
}

// walkUnits calls fn for each subscription message unit (docs/protocol.md
// §2.4) of area.
func walkUnits(area []byte, n int, fn func(id, ts int64, rec []byte)) error {
	for i := 0; i < n; i++ {
		if len(area) < protocol.SubMessageFixedSize+protocol.RecordPrefixSize {
			return fmt.Errorf("BUG: subscription unit %d of %d truncated", i, n)
		}
		ts := int64(binary.LittleEndian.Uint64(area))
		id := int64(binary.LittleEndian.Uint64(area[8:]))
		rec := area[protocol.SubMessageFixedSize:]
		size := int(binary.LittleEndian.Uint32(rec)) + protocol.RecordPrefixSize
		if size > len(rec) {
			return fmt.Errorf("BUG: subscription unit %d of %d overruns its frame", i, n)
		}
		fn(id, ts, rec[:size])
		area = rec[size:]
	}
	return nil
}

// feed reads the topic for the loop, one batch per request on feedWant.
func (g *group) feed() {
	defer g.m.wg.Done()
	defer g.sub.Close()
	var buf []byte
	for {
		select {
		case <-g.feedWant:
		case <-g.ctx.Done():
			return
		}
		var ev feedEv
		var n int
		var err error
		buf, n, err = g.sub.Next(g.ctx, buf[:0], 256, g.m.opts.FeedWait)
		if err == nil && n > 0 {
			err = walkUnits(buf, n, func(id, ts int64, rec []byte) {
				ev.msgs = append(ev.msgs, fresh{id: id, ts: ts, rec: append([]byte(nil), rec...)})
			})
		}
		ev.err = err
		select {
		case g.feedOut <- ev:
		case <-g.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// run is the loop.
func (g *group) run() {
	defer g.m.wg.Done()
	defer close(g.quit)
	defer g.timer.Stop()
	for !g.ended {
		g.askFeed()
		g.step()
		if g.ended {
			break
		}
		g.armTimer()
		select {
		case ev := <-g.events:
			g.handle(ev)
		case fe := <-g.feedOut:
			g.feedBusy = false
			g.takeFeed(fe)
		case <-g.timer.C:
		case <-g.ctx.Done():
			g.finish(ErrNotActive)
		}
		// Take what else arrived, so one record covers it.
		for more := true; more && !g.ended && len(g.inbox) < 4096; {
			select {
			case ev := <-g.events:
				g.handle(ev)
			default:
				more = false
			}
		}
	}
	g.cancel()
	// Answer what is still queued.
	for {
		select {
		case ev := <-g.events:
			switch e := ev.(type) {
			case joinEv:
				e.err <- ErrGroupGone
			case infoEv:
				e.reply <- g.info()
			}
		default:
			return
		}
	}
}

// finish ends the loop and every consumer with err (nil: 255).
func (g *group) finish(err error) {
	if g.ended {
		return
	}
	g.ended, g.endReason = true, err
	for _, c := range g.consumers {
		c.end(err)
	}
	g.consumers = nil
}

func (g *group) handle(ev any) {
	switch e := ev.(type) {
	case joinEv:
		g.consumers = append(g.consumers, e.c)
		e.err <- nil
	case leaveEv:
		g.drop(e.c)
	case outcomesEv:
		g.inbox = append(g.inbox, e)
	case infoEv:
		e.reply <- g.info()
	case stopEv:
		g.finish(e.err)
	}
}

func (g *group) drop(c *Consumer) {
	for i, x := range g.consumers {
		if x == c {
			g.consumers = append(g.consumers[:i], g.consumers[i+1:]...)
			break
		}
	}
	c.end(nil)
}

// askFeed asks the reader for more while the buffer is short.
func (g *group) askFeed() {
	if g.feedBusy || len(g.fresh) >= g.st.cfg.MaxInFlightGroup || len(g.consumers) == 0 {
		return
	}
	g.feedBusy = true
	g.feedWant <- struct{}{}
}

func (g *group) takeFeed(fe feedEv) {
	g.fresh = append(g.fresh, fe.msgs...)
	switch {
	case fe.err == nil:
	case errors.Is(fe.err, protocol.ErrTopicDeleted):
		g.m.topicGone(g)
		g.finish(nil)
	case errors.Is(fe.err, context.Canceled):
		g.finish(ErrNotActive)
	default:
		g.m.log.Error("queue group stopped: reading its topic failed", "topic", g.key.topic, "group", g.key.group, "err", fe.err)
		g.finish(fmt.Errorf("reading topic %s failed: %w", g.key.topic, fe.err))
	}
}

func (g *group) armTimer() {
	if !g.timer.Stop() {
		select {
		case <-g.timer.C:
		default:
		}
	}
	if g.wake.IsZero() {
		g.timer.Reset(time.Hour)
		return
	}
	g.timer.Reset(max(time.Until(g.wake), time.Millisecond))
}

// lower moves wake to t if t is earlier.
func (g *group) lower(t time.Time) {
	if g.wake.IsZero() || t.Before(g.wake) {
		g.wake = t
	}
}

// deliveryPlan is one delivery the step decided on, sent once recorded.
type deliveryPlan struct {
	c       *Consumer
	e       *entry
	isFresh bool
}

// step decides what the events so far change, records it, then applies
// it and tells the consumers.
func (g *group) step() {
	now := g.m.now()
	cfg := &g.st.cfg
	var evs []event
	confirms := map[*Consumer][]protocol.QueueConfirm{}
	var stops []*Consumer
	done := map[int64]bool{} // decided done in this step
	var deadJobs []*entry
	deadReason := map[int64]string{}

	// 1. What the consumers said.
	for _, in := range g.inbox {
		for _, o := range in.os {
			if o.Op == protocol.QueueOpStop {
				in.c.stopping = true
				stops = append(stops, in.c)
				continue
			}
			e := g.entries[o.EventID]
			if e == nil || done[o.EventID] {
				confirms[in.c] = append(confirms[in.c], protocol.QueueConfirm{EventID: o.EventID, Op: o.Op, Result: protocol.QueueResultGone})
				continue
			}
			res := protocol.QueueConfirm{EventID: o.EventID, Op: o.Op}
			switch o.Op {
			case protocol.QueueOpAck:
				evs = append(evs, event{op: evAck, eventID: e.id})
				done[e.id] = true
				in.c.acked++
			case protocol.QueueOpTerm:
				deadJobs = append(deadJobs, e)
				deadReason[e.id] = "term"
				done[e.id] = true
			case protocol.QueueOpNak:
				if e.holder != nil {
					g.release(e)
					d := time.Duration(o.DelayMs) * time.Millisecond
					if o.DelayMs == 0 {
						d = cfg.Backoff(e.attempt)
					}
					e.due = now.Add(d)
					g.lower(e.due)
					if cfg.MaxDeliver > 0 && e.attempt >= cfg.MaxDeliver && e.rec != nil {
						deadJobs = append(deadJobs, e)
						deadReason[e.id] = "maxDeliver"
						done[e.id] = true
					}
				}
			case protocol.QueueOpProgress:
				if e.holder != nil {
					e.deadline = now.Add(g.ackWait())
				}
			}
			confirms[in.c] = append(confirms[in.c], res)
		}
	}
	g.inbox = g.inbox[:0]

	// 2. Ack waits that passed; 3. messages out of deliveries. Only once
	// the earliest deadline or due time came; the scan finds the next.
	var ready []*entry
	if scan := !g.wake.IsZero() && !now.Before(g.wake); scan {
		var next time.Time
		for _, e := range g.entries {
			if done[e.id] {
				continue
			}
			if e.holder != nil && !now.Before(e.deadline) {
				g.release(e)
				e.due = now.Add(cfg.Backoff(e.attempt))
			}
			if e.holder == nil && cfg.MaxDeliver > 0 && e.attempt >= cfg.MaxDeliver && e.rec != nil {
				deadJobs = append(deadJobs, e)
				deadReason[e.id] = "maxDeliver"
				done[e.id] = true
				continue
			}
			t := e.due
			if e.holder != nil {
				t = e.deadline
			} else if e.rec != nil && !now.Before(e.due) {
				ready = append(ready, e)
			}
			if next.IsZero() || t.Before(next) {
				next = t
			}
		}
		g.wake = next
	}

	// 4. Dead letters: published before they are recorded, with a message
	// id, so that a crash between the two publishes the letter once.
	for _, e := range deadJobs {
		if cfg.DeadLetter == "" {
			evs = append(evs, event{op: evDrop, eventID: e.id, attempt: e.attempt})
			continue
		}
		if err := g.deadLetter(e, deadReason[e.id]); err != nil {
			g.m.log.Warn("dead-letter publish failed; retried in a second", "topic", g.key.topic, "group", g.key.group,
				"eventId", e.id, "deadLetter", cfg.DeadLetter, "err", err)
			delete(done, e.id)
			g.lower(now.Add(time.Second))
			for c, cs := range confirms { // its term is not confirmed either
				confirms[c] = dropConfirm(cs, e.id)
			}
			continue
		}
		evs = append(evs, event{op: evDead, eventID: e.id, attempt: e.attempt})
	}

	// What is done frees its holder's room now, so that this step's
	// deliveries use it: they are recorded with the outcomes in one
	// record, and a failed record ends the group (every consumer) anyway.
	for id := range done {
		if e := g.entries[id]; e != nil {
			g.release(e)
		}
	}

	// 5. Deliveries: waiting messages first (oldest first), then fresh
	// ones while the group holds fewer than maxInFlightGroup pending.
	var plans []deliveryPlan
	if len(g.consumers) > 0 {
		sort.Slice(ready, func(i, j int) bool { return ready[i].id < ready[j].id })
		pending := len(g.entries) - len(done)
		nf := 0
		for {
			c := g.pick()
			if c == nil {
				break
			}
			if len(ready) > 0 {
				e := ready[0]
				ready = ready[1:]
				plans = append(plans, deliveryPlan{c: c, e: e})
			} else if nf < len(g.fresh) && pending < cfg.MaxInFlightGroup {
				f := g.fresh[nf]
				nf++
				pending++
				plans = append(plans, deliveryPlan{c: c, e: &entry{id: f.id, ts: f.ts, rec: f.rec}, isFresh: true})
			} else {
				break
			}
			c.inFlight++ // reserved; undone below if the record fails
		}
		for _, p := range plans {
			evs = append(evs, event{op: evDeliver, eventID: p.e.id, attempt: p.e.attempt + 1})
		}
	}

	// 6. Record, then apply and tell.
	if len(evs) > 0 {
		if err := g.m.write(g.ctx, g, evs, true); err != nil {
			for _, p := range plans {
				p.c.inFlight--
			}
			g.m.log.Warn("queue group state not recorded; its consumers are disconnected", "topic", g.key.topic,
				"group", g.key.group, "err", err)
			g.finish(fmt.Errorf("queue group %s of %s: state not recorded: %w", g.key.group, g.key.topic, err))
			return
		}
	}
	for id := range done {
		delete(g.entries, id)
	}
	frames := map[*Consumer][]deliveryPlan{}
	for _, p := range plans {
		e := p.e
		if p.isFresh {
			g.entries[e.id] = e
		}
		e.attempt++
		e.holder, e.deadline = p.c, now.Add(g.ackWait())
		g.lower(e.deadline)
		frames[p.c] = append(frames[p.c], p)
	}
	if n := countFresh(plans); n > 0 {
		g.fresh = g.fresh[n:]
		if len(g.fresh) == 0 {
			g.fresh = nil // do not pin a large batch's array
		}
	}
	for c, cs := range confirms {
		if len(cs) > 0 {
			c.queue(protocol.AppendQueueConfirms(nil, cs))
		}
	}
	for c, ps := range frames {
		c.queue(g.frame(ps))
	}
	for _, c := range stops {
		g.drop(c)
	}
}

func countFresh(ps []deliveryPlan) int {
	n := 0
	for _, p := range ps {
		if p.isFresh {
			n++
		}
	}
	return n
}

func dropConfirm(cs []protocol.QueueConfirm, id int64) []protocol.QueueConfirm {
	out := cs[:0]
	for _, c := range cs {
		if c.EventID != id {
			out = append(out, c)
		}
	}
	return out
}

// release takes e from its holder.
func (g *group) release(e *entry) {
	if e.holder != nil {
		e.holder.inFlight--
		e.holder = nil
	}
}

// pick returns the next consumer with room, round robin; nil when none.
func (g *group) pick() *Consumer {
	n := len(g.consumers)
	for i := 0; i < n; i++ {
		c := g.consumers[(g.rr+i)%n]
		if !c.stopping && c.inFlight < c.max {
			g.rr = (g.rr + i + 1) % n
			return c
		}
	}
	return nil
}

// frame builds the queue frames (at most 65535 messages or
// MaxFrameBytes each) for ps.
func (g *group) frame(ps []deliveryPlan) []byte {
	var out []byte
	for len(ps) > 0 {
		var area []byte
		n := 0
		for n < len(ps) && n < 65535 {
			e := ps[n].e
			unit := protocol.QueueMessageFixedSize + len(e.rec)
			if n > 0 && len(area)+unit > g.m.opts.MaxFrameBytes {
				break
			}
			area = protocol.AppendQueueMessage(area, e.ts, e.id, uint32(e.attempt), e.rec)
			n++
		}
		out = protocol.AppendQueueFrameHeader(out, uint16(n), uint32(len(area)))
		out = append(out, area...)
		ps = ps[n:]
	}
	return out
}

// applyDurable applies recorded events to the durable state; Manager.write
// calls it once their record is written.
func (g *group) applyDurable(evs []event) {
	g.smu.Lock()
	for _, e := range evs {
		g.st.apply(e)
	}
	g.smu.Unlock()
}

// deadLetter publishes e to the group's dead-letter topic, creating it
// when missing.
func (g *group) deadLetter(e *entry, reason string) error {
	cfg := &g.st.cfg
	r, _, err := protocol.ParseRecord(e.rec)
	if err != nil {
		return fmt.Errorf("BUG: stored record of eventId %d: %w", e.id, err)
	}
	hs := []protocol.KV{{Key: protocol.MsgIDHeader, Value: deadLetterID(g.key, e.id)}}
	for _, h := range r.Headers {
		if h.Key == protocol.MsgIDHeader {
			// The letter has its own id (above); the original's is kept.
			h.Key = "smss-dead-msg-id"
		}
		hs = append(hs, h)
	}
	hs = append(hs,
		protocol.KV{Key: protocol.DeadHeaderTopic, Value: g.key.topic},
		protocol.KV{Key: protocol.DeadHeaderGroup, Value: g.key.group},
		protocol.KV{Key: protocol.DeadHeaderEventID, Value: strconv.FormatInt(e.id, 10)},
		protocol.KV{Key: protocol.DeadHeaderAttempts, Value: strconv.Itoa(e.attempt)},
		protocol.KV{Key: protocol.DeadHeaderReason, Value: reason})
	rec, err := protocol.AppendRecord(nil, protocol.Record{Headers: hs, Body: r.Body})
	if err != nil {
		return err
	}
	return g.m.publishDead(g.ctx, cfg.DeadLetter, rec)
}

// deadLetterID is the message id of e's dead letter: the same for every
// attempt to publish it, so the broker stores it once. Names too long for
// a message id (protocol.MaxMsgIDLen) are hashed.
func deadLetterID(k groupKey, id int64) string {
	s := "dead/" + k.topic + "/" + k.group + "/" + strconv.FormatInt(id, 10)
	if len(s) <= protocol.MaxMsgIDLen {
		return s
	}
	sum := sha256.Sum256([]byte(k.topic + "\x00" + k.group + "\x00" + strconv.FormatInt(id, 10)))
	return "dead/" + hex.EncodeToString(sum[:])
}

// info reports the group; run by the loop.
func (g *group) info() protocol.QueueInfo {
	g.smu.Lock()
	st := g.st
	qi := protocol.QueueInfo{Topic: g.key.topic, Config: st.cfg, Delivered: st.delivered, Redelivered: st.redelivered,
		Acked: st.acked, DeadLettered: st.dead, Dropped: st.dropped, Next: st.next}
	g.smu.Unlock()
	now := g.m.now()
	oldest := int64(0)
	for _, e := range g.entries {
		if e.holder != nil {
			qi.InFlight++
		} else {
			qi.Waiting++
		}
		if e.ts > 0 && (oldest == 0 || e.ts < oldest) {
			oldest = e.ts
		}
	}
	after := qi.Next
	if len(g.fresh) > 0 {
		after = g.fresh[len(g.fresh)-1].id
	}
	qi.Backlog = int64(len(g.fresh))
	if n := g.m.b.MessagesAfter(g.key.topic, g.key.group, after); n > 0 {
		qi.Backlog += n
	}
	if oldest == 0 && len(g.fresh) > 0 {
		oldest = g.fresh[0].ts
	}
	if oldest > 0 {
		qi.OldestPendingMs = max(0, now.UnixMilli()-oldest)
	}
	qi.Pending = qi.Backlog + int64(qi.InFlight+qi.Waiting)
	qi.Consumers = []protocol.QueueConsumerInfo{}
	for _, c := range g.consumers {
		qi.Consumers = append(qi.Consumers, protocol.QueueConsumerInfo{Name: c.name, Addr: c.addr, InFlight: c.inFlight,
			Acked: c.acked, SinceMs: c.since.UnixMilli()})
	}
	return qi
}
