package protocol

import (
	"encoding/binary"
	"strconv"
)

// Fixed sizes of the request and response headers (docs/protocol.md §1.2, §2.1).
const (
	HeaderSize     = 20
	RespHeaderSize = 10
)

// Command is the request command code (header byte 0).
type Command uint8

// Command codes of docs/protocol.md §1.3.
const (
	CmdSub        Command = 0
	CmdPub        Command = 1
	CmdCreate     Command = 2
	CmdDelete     Command = 3
	CmdDelay      Command = 16
	CmdAlive      Command = 17
	CmdReplica    Command = 64
	CmdTopicInfo  Command = 65
	CmdValidList  Command = 99
	CmdList       Command = 100
	CmdDelayApply Command = 101
)

// String names the command as the spec does; unknown codes print as cmd(N).
func (c Command) String() string {
	switch c {
	case CmdSub:
		return "sub"
	case CmdPub:
		return "pub"
	case CmdCreate:
		return "create"
	case CmdDelete:
		return "delete"
	case CmdDelay:
		return "delay"
	case CmdAlive:
		return "alive"
	case CmdReplica:
		return "replica"
	case CmdTopicInfo:
		return "info"
	case CmdValidList:
		return "validList"
	case CmdList:
		return "list"
	case CmdDelayApply:
		return "delayApply"
	case CmdAuthStart:
		return "authStart"
	case CmdAuthContinue:
		return "authContinue"
	case CmdStatus:
		return "status"
	case CmdPromote:
		return "promote"
	case CmdFollow:
		return "follow"
	case CmdCursorList:
		return "cursorList"
	case CmdCursorSet:
		return "cursorSet"
	case CmdCursorReset:
		return "cursorReset"
	case CmdSwitchover:
		return "switchover"
	case CmdQueueCreate:
		return "queueCreate"
	case CmdQueueDelete:
		return "queueDelete"
	case CmdQueueInfo:
		return "queueInfo"
	case CmdQueueConsume:
		return "queueConsume"
	}
	return "cmd(" + strconv.Itoa(int(c)) + ")"
}

// Acceptable reports whether the command may arrive from the network, i.e.
// whether its body layout is known (101 is internal only, §1.5.11).
func (c Command) Acceptable() bool {
	switch c {
	case CmdSub, CmdPub, CmdCreate, CmdDelete, CmdDelay, CmdAlive,
		CmdReplica, CmdTopicInfo, CmdValidList, CmdList, CmdAuthStart, CmdAuthContinue,
		CmdStatus, CmdPromote, CmdFollow, CmdCursorList, CmdCursorSet, CmdCursorReset, CmdSwitchover,
		CmdQueueCreate, CmdQueueDelete, CmdQueueInfo, CmdQueueConsume:
		return true
	}
	return false
}

// Response status codes (docs/protocol.md §2.1).
const (
	StatusOK    uint16 = 200
	StatusAlive uint16 = 201
	// StatusCommit is a commit frame on a version 2 replica stream
	// (docs/protocol.md §4.6): CommitFrameLen bytes after the header.
	StatusCommit uint16 = 202
	StatusSubEnd uint16 = 255
	StatusError  uint16 = 400
)

// Header is the fixed 20-byte request header (docs/protocol.md §1.2).
type Header struct {
	Cmd      Command
	TopicLen uint16
	// Area is bytes 3..18; its meaning depends on Cmd.
	Area     [16]byte
	TraceLen uint8
}

// ParseHeader decodes the 20 header bytes of a request.
func ParseHeader(b *[HeaderSize]byte) Header {
	var h Header
	h.Cmd = Command(b[0])
	h.TopicLen = binary.LittleEndian.Uint16(b[1:3])
	copy(h.Area[:], b[3:19])
	h.TraceLen = b[19]
	return h
}

// AppendTo appends the 20 encoded header bytes to dst.
func (h Header) AppendTo(dst []byte) []byte {
	dst = append(dst, byte(h.Cmd))
	dst = binary.LittleEndian.AppendUint16(dst, h.TopicLen)
	dst = append(dst, h.Area[:]...)
	return append(dst, h.TraceLen)
}

// PayloadSize is the record byte count of pub and delay (bytes 3..6).
func (h Header) PayloadSize() uint32 { return binary.LittleEndian.Uint32(h.Area[0:4]) }

// BatchSize is the sub batch size (byte 3); 0 means 1 to the server.
func (h Header) BatchSize() uint8 { return h.Area[0] }

// HasAckTimeout reports whether a sub body carries the 8-byte ack timeout:
// only the exact value 1 in byte 4 means present (§1.2).
func (h Header) HasAckTimeout() bool { return h.Area[1] == 1 }

// PayloadArea returns the command area of pub/delay for records of size n.
func PayloadArea(n uint32) [16]byte {
	var a [16]byte
	binary.LittleEndian.PutUint32(a[0:4], n)
	return a
}

// SubArea returns the command area of sub: batch size, and the flag that says
// an ack timeout follows in the body.
func SubArea(batch uint8, withAckTimeout bool) [16]byte {
	var a [16]byte
	a[0] = batch
	if withAckTimeout {
		a[1] = 1
	}
	return a
}
