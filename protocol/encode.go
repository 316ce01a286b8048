package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Limits of the header length fields (§1.6). Encoders refuse longer values
// instead of letting a length wrap and corrupt the stream (§10.28).
const (
	MaxTopicFieldLen = math.MaxUint16
	MaxTraceFieldLen = math.MaxUint8
)

// ErrFieldTooLong reports a value that does not fit its wire length field.
var ErrFieldTooLong = errors.New("field too long for its length prefix")

func appendReqHeader(dst []byte, cmd Command, area [16]byte, topic, traceID []byte) ([]byte, error) {
	if len(topic) > MaxTopicFieldLen {
		return dst, fmt.Errorf("topic of %d bytes (max %d): %w", len(topic), MaxTopicFieldLen, ErrFieldTooLong)
	}
	if len(traceID) > MaxTraceFieldLen {
		return dst, fmt.Errorf("traceId of %d bytes (max %d): %w", len(traceID), MaxTraceFieldLen, ErrFieldTooLong)
	}
	h := Header{Cmd: cmd, TopicLen: uint16(len(topic)), Area: area, TraceLen: uint8(len(traceID))}
	dst = h.AppendTo(dst)
	dst = append(dst, topic...)
	return append(dst, traceID...), nil
}

// AppendRequest appends a complete request: header, topic, traceId, body. The
// body must already be encoded for cmd; area is the header's bytes 3..18.
// On error dst is returned unchanged.
func AppendRequest(dst []byte, cmd Command, area [16]byte, topic, traceID, body []byte) ([]byte, error) {
	out, err := appendReqHeader(dst, cmd, area, topic, traceID)
	if err != nil {
		return dst, err
	}
	return append(out, body...), nil
}

func payloadArea(records []byte) ([16]byte, error) {
	if uint64(len(records)) > math.MaxUint32 {
		return [16]byte{}, fmt.Errorf("records of %d bytes: %w", len(records), ErrFieldTooLong)
	}
	return PayloadArea(uint32(len(records))), nil
}

// AppendPub appends a pub request carrying records (one or more encoded
// message records, §1.4).
func AppendPub(dst, topic, traceID, records []byte) ([]byte, error) {
	area, err := payloadArea(records)
	if err != nil {
		return dst, err
	}
	return AppendRequest(dst, CmdPub, area, topic, traceID, records)
}

// AppendDelay appends a delay pub: records are published delayMs from now.
func AppendDelay(dst, topic, traceID []byte, delayMs int64, records []byte) ([]byte, error) {
	area, err := payloadArea(records)
	if err != nil {
		return dst, err
	}
	out, err := appendReqHeader(dst, CmdDelay, area, topic, traceID)
	if err != nil {
		return dst, err
	}
	out = binary.LittleEndian.AppendUint64(out, uint64(delayMs))
	return append(out, records...), nil
}

// AppendCreate appends a create-topic request; expireAt is an absolute ms
// timestamp, 0 for a permanent topic.
func AppendCreate(dst, topic, traceID []byte, expireAt int64) ([]byte, error) {
	return appendInt64Req(dst, CmdCreate, topic, traceID, expireAt)
}

// AppendDelete appends a delete-topic request.
func AppendDelete(dst, topic, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdDelete, [16]byte{}, topic, traceID)
}

// AppendAlive appends an alive (ping) request.
func AppendAlive(dst, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdAlive, [16]byte{}, nil, traceID)
}

// AppendTopicInfo appends a topic-info request.
func AppendTopicInfo(dst, topic, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdTopicInfo, [16]byte{}, topic, traceID)
}

// AppendList appends a list request (all topic meta entries).
func AppendList(dst, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdList, [16]byte{}, nil, traceID)
}

// AppendValidList appends a valid-list request as a starting slave sends it.
func AppendValidList(dst, traceID []byte, eventID int64) ([]byte, error) {
	return appendInt64Req(dst, CmdValidList, nil, traceID, eventID)
}

// AppendReplica appends a replica request: eventID is the last event the
// slave already has.
func AppendReplica(dst []byte, eventID int64) ([]byte, error) {
	return appendInt64Req(dst, CmdReplica, nil, nil, eventID)
}

// AppendSub appends a subscribe request the way the Go client sends it: the
// ack-timeout flag is always set. eventID is the last event already consumed.
func AppendSub(dst, topic, traceID []byte, eventID int64, batch uint8, ackTimeout time.Duration, who []byte) ([]byte, error) {
	if uint64(len(who)) > math.MaxUint32 {
		return dst, fmt.Errorf("who of %d bytes: %w", len(who), ErrFieldTooLong)
	}
	out, err := appendReqHeader(dst, CmdSub, SubArea(batch, true), topic, traceID)
	if err != nil {
		return dst, err
	}
	out = binary.LittleEndian.AppendUint64(out, uint64(eventID))
	out = binary.LittleEndian.AppendUint64(out, uint64(ackTimeout))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(who)))
	return append(out, who...), nil
}

func appendInt64Req(dst []byte, cmd Command, topic, traceID []byte, v int64) ([]byte, error) {
	out, err := appendReqHeader(dst, cmd, [16]byte{}, topic, traceID)
	if err != nil {
		return dst, err
	}
	return binary.LittleEndian.AppendUint64(out, uint64(v)), nil
}
