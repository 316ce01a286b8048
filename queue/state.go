package queue

import (
	"sort"

	"github.com/smssmq/smss/protocol"
)

// groupState is what __queues records of one group add up to: its
// settings, the last eventId handed out for the first time (next), and
// the attempt count of every message delivered and not yet done
// (pending). Every message of the topic after startAfter and at or below
// next that is not pending is done: acknowledged, dead-lettered or
// dropped. Nothing else is durable: deadlines, holders and naks' delays
// are not, so after a restart or a failover every pending message waits
// one ack wait before it is delivered again.
type groupState struct {
	key        groupKey
	created    int64 // createEventId of the topic incarnation
	startAfter int64
	cfg        protocol.QueueConfig
	next       int64
	pending    map[int64]int

	delivered, redelivered, acked, dead, dropped int64
}

func newGroupState(c *configRec) *groupState {
	return &groupState{key: c.key, created: c.created, startAfter: c.startAfter, cfg: c.cfg,
		next: c.startAfter, pending: map[int64]int{}}
}

// apply folds one events entry. It reports whether it changed anything
// (an ack of a message no longer pending does not).
func (g *groupState) apply(e event) bool {
	switch e.op {
	case evDeliver:
		if e.eventID <= g.startAfter {
			return false
		}
		if e.eventID <= g.next {
			if _, ok := g.pending[e.eventID]; !ok {
				return false // done already: a delivery is never recorded after it
			}
		}
		g.pending[e.eventID] = e.attempt
		g.next = max(g.next, e.eventID)
		g.delivered++
		if e.attempt > 1 {
			g.redelivered++
		}
	case evAck, evDead, evDrop:
		if _, ok := g.pending[e.eventID]; !ok {
			return false
		}
		delete(g.pending, e.eventID)
		switch e.op {
		case evAck:
			g.acked++
		case evDead:
			g.dead++
		default:
			g.dropped++
		}
	default:
		return false
	}
	return true
}

// snapshot returns the records that recreate g.
func (g *groupState) snapshot() [][]byte {
	st := &stateRec{key: g.key, next: g.next, delivered: g.delivered, redelivered: g.redelivered,
		acked: g.acked, dead: g.dead, dropped: g.dropped}
	for id, a := range g.pending {
		st.pending = append(st.pending, event{eventID: id, attempt: a})
	}
	sort.Slice(st.pending, func(i, j int) bool { return st.pending[i].eventID < st.pending[j].eventID })
	return [][]byte{
		encodeConfig(&configRec{key: g.key, created: g.created, startAfter: g.startAfter, cfg: g.cfg}),
		encodeState(st),
	}
}

// fold is the state of every group as a sequence of records leaves it.
type fold struct {
	groups map[groupKey]*groupState
	bad    int // undecodable records, skipped
	// snapping: inside a snapshot's message, state records apply.
	snapping int64
}

func newFold() *fold { return &fold{groups: map[groupKey]*groupState{}} }

// add applies the record body of a message with eventId msgID.
func (f *fold) add(msgID int64, body []byte) error {
	rec, err := decodeRecord(body)
	if err != nil {
		f.bad++
		return err
	}
	switch rec.kind {
	case kindSnapshot:
		clear(f.groups)
		f.snapping = msgID
	case kindConfig:
		f.groups[rec.config.key] = newGroupState(rec.config)
	case kindDelete:
		delete(f.groups, rec.key)
	case kindEvents:
		if g := f.groups[rec.key]; g != nil {
			for _, e := range rec.events {
				g.apply(e)
			}
		}
	case kindState:
		g := f.groups[rec.state.key]
		if g == nil || f.snapping != msgID {
			return nil // a state record belongs to its snapshot's message
		}
		s := rec.state
		g.next, g.delivered, g.redelivered, g.acked, g.dead, g.dropped = s.next, s.delivered, s.redelivered, s.acked, s.dead, s.dropped
		for _, p := range s.pending {
			g.pending[p.eventID] = p.attempt
		}
	}
	return nil
}
