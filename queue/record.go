package queue

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/smssmq/smss/protocol"
)

// Records of __queues (the body of each message; docs/protocol.md §12.6).
// Every record starts with a version byte (recVersion) and a kind byte.
// Strings are uint16 LE length + bytes; numbers are unsigned varints.
//
//	config   topic, created (createEventId of the topic incarnation),
//	         startAfter, uint32 LE length + QueueConfig JSON
//	delete   topic, group
//	events   topic, group, then entries until the end: op byte, eventId,
//	         attempt (deliver, dead, drop; 0 for ack)
//	snapshot (no fields): the records after it in the same message replace
//	         every group; each group as a config then a state record
//	state    topic, group, next, delivered, redelivered, acked, dead,
//	         dropped, n, then n × (eventId, attempt) of its pending messages
const recVersion = 1

const (
	kindConfig   = 1
	kindDelete   = 2
	kindEvents   = 3
	kindSnapshot = 4
	kindState    = 5
)

// Event ops of an events record.
const (
	evDeliver = 1 // handed to a consumer, attempt n
	evAck     = 2 // acknowledged (or its consumer's ack arrived late): done
	evDead    = 3 // published to the dead-letter topic: done
	evDrop    = 4 // deliveries exhausted or termed without a dead-letter topic: done
)

// errRecord is an undecodable record of __queues.
var errRecord = errors.New("malformed queue record")

type event struct {
	op      byte
	eventID int64
	attempt int
}

// groupKey names a group: its topic and name.
type groupKey struct{ topic, group string }

type configRec struct {
	key        groupKey
	created    int64
	startAfter int64
	cfg        protocol.QueueConfig
}

type stateRec struct {
	key                                          groupKey
	next                                         int64
	delivered, redelivered, acked, dead, dropped int64
	pending                                      []event // op unused
}

type record struct {
	kind   byte
	config *configRec
	key    groupKey // delete, events
	events []event
	state  *stateRec
}

func appendStr(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendKey(b []byte, k groupKey) []byte { return appendStr(appendStr(b, k.topic), k.group) }

func encodeConfig(c *configRec) []byte {
	js, _ := json.Marshal(&c.cfg) // plain struct: cannot fail
	b := []byte{recVersion, kindConfig}
	b = appendStr(b, c.key.topic)
	b = binary.AppendUvarint(b, uint64(c.created))
	b = binary.AppendUvarint(b, uint64(c.startAfter))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(js)))
	return append(b, js...)
}

func encodeDelete(k groupKey) []byte { return appendKey([]byte{recVersion, kindDelete}, k) }

func encodeEvents(k groupKey, evs []event) []byte {
	b := appendKey(make([]byte, 0, 8+len(k.topic)+len(k.group)+len(evs)*6), k)
	b = append([]byte{recVersion, kindEvents}, b...)
	for _, e := range evs {
		b = append(b, e.op)
		b = binary.AppendUvarint(b, uint64(e.eventID))
		b = binary.AppendUvarint(b, uint64(e.attempt))
	}
	return b
}

func encodeSnapshot() []byte { return []byte{recVersion, kindSnapshot} }

func encodeState(s *stateRec) []byte {
	b := appendKey([]byte{recVersion, kindState}, s.key)
	for _, v := range []int64{s.next, s.delivered, s.redelivered, s.acked, s.dead, s.dropped, int64(len(s.pending))} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	for _, p := range s.pending {
		b = binary.AppendUvarint(b, uint64(p.eventID))
		b = binary.AppendUvarint(b, uint64(p.attempt))
	}
	return b
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errRecord, what)
	}
}

func (r *reader) str(what string) string {
	if r.err != nil || len(r.b) < 2 {
		r.fail(what)
		return ""
	}
	n := int(binary.LittleEndian.Uint16(r.b))
	if len(r.b) < 2+n {
		r.fail(what)
		return ""
	}
	s := string(r.b[2 : 2+n])
	r.b = r.b[2+n:]
	return s
}

// num reads a varint that must fit an int64 (every field is ≥ 0).
func (r *reader) num(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > math.MaxInt64 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return int64(v)
}

func (r *reader) key() groupKey { return groupKey{r.str("topic"), r.str("group")} }

// decodeRecord decodes one record body.
func decodeRecord(b []byte) (record, error) {
	if len(b) < 2 || b[0] != recVersion {
		return record{}, fmt.Errorf("%w: no version %d header", errRecord, recVersion)
	}
	rec := record{kind: b[1]}
	r := &reader{b: b[2:]}
	switch rec.kind {
	case kindConfig:
		c := &configRec{}
		c.key.topic = r.str("topic")
		c.created = r.num("created")
		c.startAfter = r.num("startAfter")
		if r.err == nil && len(r.b) < 4 {
			r.fail("config length")
		}
		if r.err == nil {
			n := binary.LittleEndian.Uint32(r.b)
			if uint64(len(r.b)-4) != uint64(n) {
				r.fail("config length")
			} else if err := protocol.DecodeQueueBody(r.b[4:], &c.cfg); err != nil {
				r.fail("config: " + err.Error())
			} else if err := c.cfg.Normalize(); err != nil {
				r.fail("config: " + err.Error())
			}
			r.b = nil
		}
		c.key.group = c.cfg.Group
		rec.config = c
	case kindDelete:
		rec.key = r.key()
	case kindEvents:
		rec.key = r.key()
		for r.err == nil && len(r.b) > 0 {
			e := event{op: r.b[0]}
			r.b = r.b[1:]
			e.eventID = r.num("eventId")
			a := r.num("attempt")
			if a > math.MaxInt32 {
				r.fail("attempt")
			}
			e.attempt = int(a)
			if e.op < evDeliver || e.op > evDrop || e.eventID < 1 {
				r.fail("event")
			}
			rec.events = append(rec.events, e)
		}
	case kindSnapshot:
	case kindState:
		s := &stateRec{key: r.key()}
		for _, p := range []*int64{&s.next, &s.delivered, &s.redelivered, &s.acked, &s.dead, &s.dropped} {
			*p = r.num("counter")
		}
		n := r.num("pending")
		if r.err == nil && n > int64(len(r.b)) { // at least one byte each
			r.fail("pending count")
		}
		for i := int64(0); r.err == nil && i < n; i++ {
			id, a := r.num("pending eventId"), r.num("pending attempt")
			if a > math.MaxInt32 || id < 1 {
				r.fail("pending")
			}
			s.pending = append(s.pending, event{eventID: id, attempt: int(a)})
		}
		rec.state = s
	default:
		return record{}, fmt.Errorf("%w: unknown kind %d", errRecord, rec.kind)
	}
	if r.err == nil && len(r.b) > 0 {
		r.fail("trailing bytes")
	}
	return rec, r.err
}

// wrap makes one §1.4 record (no headers) of body.
func wrap(dst, body []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(body)))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	return append(dst, body...)
}

// unwrap returns the body of a §1.4 record without headers.
func unwrap(rec []byte) ([]byte, error) {
	r, _, err := protocol.ParseRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errRecord, err)
	}
	return r.Body, nil
}
