package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// MaxErrorText is the longest error text a 400 reply can carry (uint16 length,
// §11: longer texts are truncated).
const MaxErrorText = math.MaxUint16

// unknownErrText is what the Go client reports for a 400 with an empty text.
const unknownErrText = "unknown err"

// RespHeader is the 10-byte header starting every server→client unit. Which
// accessor is meaningful depends on Code and on the command sent (§2.1).
type RespHeader [RespHeaderSize]byte

// Code is the status code (bytes 0..1).
func (h *RespHeader) Code() uint16 { return binary.LittleEndian.Uint16(h[0:2]) }

// ErrLen is the error-text length of a 400 (bytes 2..3).
func (h *RespHeader) ErrLen() uint16 { return binary.LittleEndian.Uint16(h[2:4]) }

// JSONLen is the body length of an info/list/valid-list 200 (bytes 2..5).
func (h *RespHeader) JSONLen() uint32 { return binary.LittleEndian.Uint32(h[2:6]) }

// FrameCount is the message count of a subscription data frame (byte 2).
func (h *RespHeader) FrameCount() uint8 { return h[2] }

// FrameLen is the message-area length of a subscription data frame (bytes 4..7).
func (h *RespHeader) FrameLen() uint32 { return binary.LittleEndian.Uint32(h[4:8]) }

func appendCode(dst []byte, code uint16) []byte {
	var h RespHeader
	binary.LittleEndian.PutUint16(h[0:2], code)
	return append(dst, h[:]...)
}

// AppendReplyOK appends a plain 200.
func AppendReplyOK(dst []byte) []byte { return appendCode(dst, StatusOK) }

// AppendReplyAlive appends a 201.
func AppendReplyAlive(dst []byte) []byte { return appendCode(dst, StatusAlive) }

// CommitFrameLen is the body of a commit frame: the commit point (int64
// LE) and the master's epoch (uint64 LE).
const CommitFrameLen = 16

// AppendCommitFrame appends a commit frame (202, docs/protocol.md §4.6):
// the 10-byte header with bytes 2..9 zero, then the commit point and the
// master's epoch.
func AppendCommitFrame(dst []byte, commitPoint int64, epoch uint64) []byte {
	dst = appendCode(dst, StatusCommit)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(commitPoint))
	return binary.LittleEndian.AppendUint64(dst, epoch)
}

// DecodeCommitFrame decodes the CommitFrameLen bytes after a commit
// frame's header; a negative commit point is malformed.
func DecodeCommitFrame(b []byte) (commitPoint int64, epoch uint64, err error) {
	if len(b) != CommitFrameLen {
		return 0, 0, fmt.Errorf("commit frame body of %d bytes, want %d", len(b), CommitFrameLen)
	}
	commitPoint = int64(binary.LittleEndian.Uint64(b))
	if commitPoint < 0 {
		return 0, 0, fmt.Errorf("commit frame with a negative commit point %d", commitPoint)
	}
	return commitPoint, binary.LittleEndian.Uint64(b[8:]), nil
}

// AppendReplySubEnd appends a 255 (subscription ended: topic deleted).
func AppendReplySubEnd(dst []byte) []byte { return appendCode(dst, StatusSubEnd) }

// AppendReplyError appends a 400 carrying msg, truncated to MaxErrorText bytes so
// the length field cannot wrap (§10.6).
func AppendReplyError(dst []byte, msg string) []byte {
	if len(msg) > MaxErrorText {
		msg = msg[:MaxErrorText]
	}
	var h RespHeader
	binary.LittleEndian.PutUint16(h[0:2], StatusError)
	binary.LittleEndian.PutUint16(h[2:4], uint16(len(msg)))
	dst = append(dst, h[:]...)
	return append(dst, msg...)
}

// AppendReplyJSON appends a 200 whose body is body (uint32 length at bytes 2..5).
// An empty body is the "no entries" reply of list and valid list.
func AppendReplyJSON(dst, body []byte) ([]byte, error) {
	if uint64(len(body)) > math.MaxUint32 {
		return dst, fmt.Errorf("json reply of %d bytes: %w", len(body), ErrFieldTooLong)
	}
	var h RespHeader
	binary.LittleEndian.PutUint16(h[0:2], StatusOK)
	binary.LittleEndian.PutUint32(h[2:6], uint32(len(body)))
	dst = append(dst, h[:]...)
	return append(dst, body...), nil
}

// AppendSubFrameHeader appends the header of a subscription data frame
// holding count messages in length bytes. count must not be 0 (§2.4).
func AppendSubFrameHeader(dst []byte, count uint8, length uint32) []byte {
	var h RespHeader
	binary.LittleEndian.PutUint16(h[0:2], StatusOK)
	h[2] = count
	binary.LittleEndian.PutUint32(h[4:8], length)
	return append(dst, h[:]...)
}

// SubMessageFixedSize is the per-message prefix of a subscription frame: ts,
// eventId, next file id, next position (§2.4).
const SubMessageFixedSize = 32

// AppendSubMessage appends one message of a subscription frame; record is the
// stored message record, verbatim.
func AppendSubMessage(dst []byte, ts, eventID, nextFileID, nextPos int64, record []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ts))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(eventID))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(nextFileID))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(nextPos))
	return append(dst, record...)
}

// AppendReplicaFrame appends one replication frame: a plain 200 header, the
// uint32 block length, then the binlog block as stored (§4.3).
func AppendReplicaFrame(dst, block []byte) ([]byte, error) {
	if uint64(len(block)) > math.MaxUint32 {
		return dst, fmt.Errorf("binlog block of %d bytes: %w", len(block), ErrFieldTooLong)
	}
	dst = AppendReplyOK(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(block)))
	return append(dst, block...), nil
}

// Client-side reading errors. Any of them means the connection is out of sync
// and must be discarded; a *BizError alone leaves it usable.
var (
	ErrUnexpectedStatus = errors.New("unexpected response status")
	ErrReplyTooLarge    = errors.New("reply length exceeds the reader's cap")
)

// ReplyKind says which 200 layout the command that was sent gets back.
type ReplyKind uint8

const (
	// ReplyPlain: pub, create, delete, delay, alive (200 or 201, no body).
	ReplyPlain ReplyKind = iota
	// ReplyJSON: info, list, valid list (200 with a uint32 length at 2..5).
	ReplyJSON
)

// ReadReply reads the reply to a non-streaming request. It returns the JSON
// body for ReplyJSON (nil when the length is 0), a *BizError for a 400 (text
// "unknown err" when empty), and a wrapped ErrReplyTooLarge when the server
// announces a JSON body above maxBody (the body is not read). ReplyPlain
// accepts 200 and 201 like the Go client.
func ReadReply(r io.Reader, kind ReplyKind, maxBody int) ([]byte, error) {
	var h RespHeader
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("read reply header: %w", err)
	}
	switch code := h.Code(); {
	case code == StatusError:
		return nil, readErrText(r, &h)
	case kind == ReplyPlain && (code == StatusOK || code == StatusAlive):
		return nil, nil
	case kind == ReplyJSON && code == StatusOK:
		n := h.JSONLen()
		if n == 0 {
			return nil, nil
		}
		return readBody(r, n, maxBody, "json reply")
	default:
		return nil, fmt.Errorf("%w %d", ErrUnexpectedStatus, code)
	}
}

// Frame is one unit of a subscription or replication stream as read by a
// client: Code is 200 (data), 201 (alive) or 255 (sub end). For a
// subscription data frame Count is the message count and Body the message
// area (parse with ParseSubMessages); for a replication frame Body is the
// binlog block.
type Frame struct {
	Code  uint16
	Count int
	Body  []byte
}

// ReadSubFrame reads one subscription unit. A 400 is returned as *BizError;
// a data frame longer than maxLen as a wrapped ErrReplyTooLarge. The Body
// is the caller's to keep (SubFrameReader reuses one instead).
func ReadSubFrame(r io.Reader, maxLen int) (Frame, error) {
	return NewSubFrameReader(r, maxLen).Next()
}

// ReadReplicaFrame reads one replication unit (§4.3). A 400 is returned as
// *BizError; a block longer than maxLen as a wrapped ErrReplyTooLarge.
func ReadReplicaFrame(r io.Reader, maxLen int) (Frame, error) {
	return readReplicaFrame(r, maxLen, false)
}

// ReadReplicaFrameV2 reads one unit of a version 2 replica stream (§4.6):
// what ReadReplicaFrame reads, and a commit frame (Code StatusCommit, Body
// its CommitFrameLen bytes, for DecodeCommitFrame). Only a reader that
// announced version 2 in its hello may meet one; the others keep
// ReadReplicaFrame, for which code 202 is not a replication stream.
func ReadReplicaFrameV2(r io.Reader, maxLen int) (Frame, error) {
	return readReplicaFrame(r, maxLen, true)
}

func readReplicaFrame(r io.Reader, maxLen int, v2 bool) (Frame, error) {
	var h RespHeader
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, fmt.Errorf("read frame header: %w", err)
	}
	switch code := h.Code(); code {
	case StatusCommit:
		if !v2 {
			break
		}
		body := make([]byte, CommitFrameLen)
		if _, err := io.ReadFull(r, body); err != nil {
			return Frame{}, fmt.Errorf("read commit frame: %w", unexpected(err))
		}
		return Frame{Code: code, Body: body}, nil
	case StatusOK:
		var lb [4]byte
		if _, err := io.ReadFull(r, lb[:]); err != nil {
			return Frame{}, fmt.Errorf("read replica block length: %w", unexpected(err))
		}
		body, err := readBody(r, binary.LittleEndian.Uint32(lb[:]), maxLen, "replica block")
		if err != nil {
			return Frame{}, err
		}
		return Frame{Code: code, Body: body}, nil
	case StatusAlive:
		return Frame{Code: code}, nil
	case StatusError:
		return Frame{}, readErrText(r, &h)
	}
	return Frame{}, fmt.Errorf("%w %d in replica stream", ErrUnexpectedStatus, h.Code())
}

func readErrText(r io.Reader, h *RespHeader) error {
	n := h.ErrLen()
	if n == 0 {
		return NewBizError(unknownErrText)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return fmt.Errorf("read error text: %w", unexpected(err))
	}
	return NewBizError(string(msg))
}

func readBody(r io.Reader, n uint32, max int, what string) ([]byte, error) {
	if uint64(n) > uint64(max) || max < 0 {
		return nil, fmt.Errorf("%s of %d bytes, cap %d: %w", what, n, max, ErrReplyTooLarge)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("read %s: %w", what, unexpected(err))
	}
	return b, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
