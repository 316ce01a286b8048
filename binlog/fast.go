package binlog

import (
	"encoding/binary"

	"github.com/smssmq/smss/internal/textline"
	"github.com/smssmq/smss/protocol"
)

// decodeFast decodes a whole, valid block in one pass over its command line.
// It is the replication stream's hot loop. It reports no reasons: ok is false
// for anything unusual (torn, corrupt, out of range) and DecodeBlock then asks
// decodeCareful, so errors are unchanged. When ok is true the result is
// exactly decodeCareful's; FuzzDecodeEquivalence checks that.
func decodeFast(buf []byte) (b Block, n int, ok bool) {
	b, n, _, ok = decodeFastCount(buf)
	return b, n, ok
}

// decodeFastCount is decodeFast that also returns how many eventIds the
// block consumes (Block.MessageCount), from the records walk it does anyway.
func decodeFastCount(buf []byte) (b Block, n, msgs int, ok bool) {
	if len(buf) < 4 {
		return Block{}, 0, 0, false
	}
	ll := binary.LittleEndian.Uint32(buf)
	if ll < minLineLen || ll > MaxLineLen {
		return Block{}, 0, 0, false
	}
	lineEnd := 4 + int(ll)
	if len(buf) < lineEnd || buf[lineEnd-1] != '\n' {
		return Block{}, 0, 0, false
	}
	var v [numFields]int64
	lo, hi, ok := textline.Scan(buf[4:lineEnd-1], v[:], 4)
	if !ok {
		return Block{}, 0, 0, false
	}
	// checkField's and checkPayloadLen's rules.
	eventID, payloadLen := v[2], v[5]
	if eventID < 1 || payloadLen > MaxPayloadLen {
		return Block{}, 0, 0, false
	}
	var cmd uint8
	switch v[1] {
	case int64(CmdPub):
		cmd = CmdPub
		ok = payloadLen >= minRecordsPayloadLen
	case int64(CmdCreate):
		cmd = CmdCreate
		ok = payloadLen == createPayloadLen
	case int64(CmdDelete):
		cmd = CmdDelete
		ok = payloadLen == 0
	case int64(CmdDelay), int64(CmdDelayApply):
		cmd = uint8(v[1])
		ok = payloadLen >= DelayPrefixLen+minRecordsPayloadLen
	default:
		ok = false
	}
	if !ok {
		return Block{}, 0, 0, false
	}
	b = Block{WriteTime: v[0], Cmd: cmd, EventID: eventID, Timestamp: v[3], Topic: buf[4+lo : 4+hi]}
	if payloadLen == 0 {
		return b, lineEnd, 1, true // delete
	}
	total := int64(lineEnd) + payloadLen
	if int64(len(buf)) < total || buf[total-1] != '\n' {
		return Block{}, 0, 0, false
	}
	b.Payload = buf[lineEnd : total-1]
	// checkPayload's rules, without building its error.
	records := b.Payload
	switch cmd {
	case CmdCreate:
		return b, int(total), 1, true
	case CmdDelay:
		if int64(binary.LittleEndian.Uint64(b.Payload[8:DelayPrefixLen])) != eventID {
			return Block{}, 0, 0, false
		}
		records = b.Payload[DelayPrefixLen:]
	case CmdDelayApply:
		records = b.Payload[DelayPrefixLen:]
	}
	k, err := protocol.CountRecords(records, 0)
	if err != nil {
		return Block{}, 0, 0, false
	}
	if cmd == CmdDelay {
		k = 1 // one delayed publication, one eventId
	}
	return b, int(total), k, true
}
