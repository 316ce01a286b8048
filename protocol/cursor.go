package protocol

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Stored consumer positions (issue 22): an extension of docs/protocol.md §1.3 and
// §1.5.1 (§12.5, stored consumer positions).
//
// Resume: a sub (0) whose eventId is -1 starts after the position the
// server stored for (topic, who). Header bytes 5..12 (int64 LE, zero in
// every original request) say where a who without a stored position
// starts: 0 the oldest retained message, -1 after the last eventId, N > 0
// after eventId N. An original server answers eventId -1 with a 400.
//
// Commands 37..39 manage positions (admin role with authentication). An
// original server answers them with 400 "don't support action" and closes
// the connection.
const (
	// CmdCursorList lists stored positions: topic field = one topic, or
	// empty for all; no body. Reply: 200 + JSON array (as list, 100).
	CmdCursorList Command = 37
	// CmdCursorSet stores a position: topic field = the topic; body =
	// eventId int64 LE, whoLen uint32 LE, who. Reply: plain 200.
	CmdCursorSet Command = 38
	// CmdCursorReset removes a position: topic field = the topic; body =
	// whoLen uint32 LE, who. Reply: plain 200.
	CmdCursorReset Command = 39
)

// CursorTopic is the system topic holding the positions. Clients may read
// it but not write, create or delete it; list (100) leaves it out.
const CursorTopic = "__cursors"

// SubResumeEventID is the sub eventId that asks for the stored position.
const SubResumeEventID = -1

// ResumeDefault returns where a resuming sub (eventId -1) starts when no
// position is stored: header bytes 5..12 as int64 LE.
func (h Header) ResumeDefault() int64 { return int64(binary.LittleEndian.Uint64(h.Area[2:10])) }

// AppendSubResume appends a sub request with eventId -1; whenNone goes in
// header bytes 5..12.
func AppendSubResume(dst, topic, traceID []byte, whenNone int64, batch uint8, ackTimeout time.Duration, who []byte) ([]byte, error) {
	if uint64(len(who)) > math.MaxUint32 {
		return dst, fmt.Errorf("who of %d bytes: %w", len(who), ErrFieldTooLong)
	}
	area := SubArea(batch, true)
	binary.LittleEndian.PutUint64(area[2:10], uint64(whenNone))
	out, err := appendReqHeader(dst, CmdSub, area, topic, traceID)
	if err != nil {
		return dst, err
	}
	out = binary.LittleEndian.AppendUint64(out, math.MaxUint64) // -1
	out = binary.LittleEndian.AppendUint64(out, uint64(ackTimeout))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(who)))
	return append(out, who...), nil
}

// AppendCursorList appends a cursor list request (topic may be empty).
func AppendCursorList(dst, topic, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdCursorList, [16]byte{}, topic, traceID)
}

// AppendCursorSet appends a cursor set request.
func AppendCursorSet(dst, topic, who []byte, eventID int64, traceID []byte) ([]byte, error) {
	if uint64(len(who)) > math.MaxUint32 {
		return dst, fmt.Errorf("who of %d bytes: %w", len(who), ErrFieldTooLong)
	}
	out, err := appendReqHeader(dst, CmdCursorSet, [16]byte{}, topic, traceID)
	if err != nil {
		return dst, err
	}
	out = binary.LittleEndian.AppendUint64(out, uint64(eventID))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(who)))
	return append(out, who...), nil
}

// AppendCursorReset appends a cursor reset request.
func AppendCursorReset(dst, topic, who, traceID []byte) ([]byte, error) {
	if uint64(len(who)) > math.MaxUint32 {
		return dst, fmt.Errorf("who of %d bytes: %w", len(who), ErrFieldTooLong)
	}
	out, err := appendReqHeader(dst, CmdCursorReset, [16]byte{}, topic, traceID)
	if err != nil {
		return dst, err
	}
	out = binary.LittleEndian.AppendUint32(out, uint32(len(who)))
	return append(out, who...), nil
}

// readCursor reads the body of a cursor set (withEventID) or reset.
func (rr *RequestReader) readCursor(req *Request, tt int, withEventID bool) error {
	fixed := 4
	if withEventID {
		fixed += 8
	}
	head := make([]byte, tt+fixed)
	if err := rr.readFull(head, req.Header.Cmd.String()); err != nil {
		return err
	}
	b := head[tt:]
	if withEventID {
		req.EventID = int64(binary.LittleEndian.Uint64(b))
		b = b[8:]
	}
	whoLen := binary.LittleEndian.Uint32(b)
	req.setTopicTrace(head)
	if uint64(whoLen) > uint64(rr.lim.MaxWho) {
		return refuseClose(NewBizError(fmt.Sprintf("who of %d bytes exceeds limit.maxWho %d", whoLen, rr.lim.MaxWho)))
	}
	req.Who = make([]byte, whoLen)
	return rr.readFull(req.Who, req.Header.Cmd.String()+" who")
}
