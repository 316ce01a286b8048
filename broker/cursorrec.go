package broker

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/smssmq/smss/protocol"
)

// CursorTopic is the system topic that holds the stored consumer positions
// (cursor.go). Clients may read it but not write, create or delete it.
const CursorTopic = protocol.CursorTopic

// Operations of a cursor record.
const (
	cursorOpSet      = 1 // (topic, who) is at eventId
	cursorOpDelete   = 2 // (topic, who) has no stored position
	cursorOpSnapshot = 3 // forget every position: the set records after it in the same pub are all of them
)

// cursorMagic starts the body of every cursor record, so that foreign
// messages in a topic that happens to be named __cursors are ignored.
var cursorMagic = [4]byte{'S', 'C', 'R', '1'}

// cursorRec is one record of the cursor topic.
type cursorRec struct {
	op      byte
	created int64 // createEventId of the topic incarnation the position belongs to
	eventID int64
	updated int64 // ms of the ack the position comes from (retention of idle positions)
	topic   string
	who     string
}

// Record layout: a message record (docs/protocol.md §1.4) without headers whose body
// is
//
//	0  4  magic "SCR1"
//	4  1  op: 1 set, 2 delete, 3 snapshot
//	5  8  int64 LE createEventId of the topic (0 for a snapshot)
//	13 8  int64 LE eventId (set: the position; delete: 0; snapshot: ms time)
//	21 8  int64 LE updated: ms of the ack the position comes from
//	29 2  uint16 LE topic length T
//	31 T  topic
//	.  4  uint32 LE who length W
//	.  W  who
const cursorFixed = 4 + 1 + 8 + 8 + 8 + 2 + 4

var errCursorRecord = errors.New("not a cursor record")

// appendCursorRecord appends r as a whole message record.
func appendCursorRecord(dst []byte, r *cursorRec) []byte {
	body := cursorFixed + len(r.topic) + len(r.who)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(body))
	dst = binary.LittleEndian.AppendUint32(dst, 0) // no headers
	dst = append(dst, cursorMagic[:]...)
	dst = append(dst, r.op)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.created))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.eventID))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.updated))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(r.topic)))
	dst = append(dst, r.topic...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.who)))
	return append(dst, r.who...)
}

// decodeCursorRecord decodes one message record (prefix included) of the
// cursor topic. The bytes come from the binlog, possibly from a master over
// the network, so every length is checked.
func decodeCursorRecord(rec []byte) (cursorRec, error) {
	var r cursorRec
	if len(rec) < 8 {
		return r, fmt.Errorf("%w: %d bytes", errCursorRecord, len(rec))
	}
	size := binary.LittleEndian.Uint32(rec)
	if binary.LittleEndian.Uint32(rec[4:]) != 0 || uint64(size) != uint64(len(rec)-8) {
		return r, fmt.Errorf("%w: headers or size", errCursorRecord)
	}
	b := rec[8:]
	if len(b) < cursorFixed || [4]byte(b[:4]) != cursorMagic {
		return r, fmt.Errorf("%w: magic", errCursorRecord)
	}
	r.op = b[4]
	r.created = int64(binary.LittleEndian.Uint64(b[5:]))
	r.eventID = int64(binary.LittleEndian.Uint64(b[13:]))
	r.updated = int64(binary.LittleEndian.Uint64(b[21:]))
	tl := int(binary.LittleEndian.Uint16(b[29:]))
	b = b[31:]
	if len(b) < tl+4 {
		return r, fmt.Errorf("%w: topic length %d", errCursorRecord, tl)
	}
	r.topic = string(b[:tl])
	b = b[tl:]
	wl := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(wl) != uint64(len(b)) {
		return r, fmt.Errorf("%w: who length %d", errCursorRecord, wl)
	}
	r.who = string(b)
	switch r.op {
	case cursorOpSet:
		if r.eventID < 0 || r.topic == "" {
			return r, fmt.Errorf("%w: set of %q to %d", errCursorRecord, r.topic, r.eventID)
		}
	case cursorOpDelete:
		if r.topic == "" {
			return r, fmt.Errorf("%w: delete without topic", errCursorRecord)
		}
	case cursorOpSnapshot:
	default:
		return r, fmt.Errorf("%w: op %d", errCursorRecord, r.op)
	}
	return r, nil
}
