package protocol

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Work queues (issue 33): an extension of docs/protocol.md §1.3 (§12.6,
// queue groups). A queue group shares the messages of one topic among
// competing consumers: each message goes to one consumer, comes back when
// that consumer does not ack it within the group's ack wait, and goes to
// the group's dead-letter topic after too many deliveries.
//
// Commands 41..44 all have the same request layout: the 20-byte header
// with bytes 3..18 zero, the topic field, the traceId, then a body of
// uint32 LE length L and L bytes of JSON (QueueConfig for create, QueueRef
// for delete and info, QueueConsume for consume). An original server
// answers them with 400 "don't support action" and closes the connection.
const (
	// CmdQueueCreate creates (or, with the same settings, confirms) a
	// group. Reply: 200 + JSON QueueInfo.
	CmdQueueCreate Command = 41
	// CmdQueueDelete deletes a group and forgets its state. Reply: plain 200.
	CmdQueueDelete Command = 42
	// CmdQueueInfo describes groups: the topic field names one topic or is
	// empty for all; the body's group names one group or is empty for all.
	// Reply: 200 + JSON array of QueueInfo (as list, 100).
	CmdQueueInfo Command = 43
	// CmdQueueConsume turns the connection into a consumer stream of one
	// group: queue frames (StatusQueueMessages), outcome confirmations
	// (StatusQueueConfirm), alives (201), and at the end 255 (the group or
	// its topic was deleted, or the consumer sent QueueOpStop) or 400 +
	// text (the stream failed; the connection is then closed).
	CmdQueueConsume Command = 44
)

// Status codes of a consumer stream (docs/protocol.md §12.6). Only a
// client that sent CmdQueueConsume ever receives them.
const (
	// StatusQueueMessages: bytes 2..3 uint16 LE message count N (≥ 1),
	// bytes 4..7 uint32 LE length L of the message area, 8..9 zero; then
	// L bytes: N units of QueueMessageFixedSize bytes (ts int64, eventId
	// int64, attempt uint32, 4 zero bytes) followed by the stored record
	// verbatim (§1.4: contentSize uint32, headerCount uint32, headers, body).
	StatusQueueMessages uint16 = 210
	// StatusQueueConfirm: bytes 2..5 uint32 LE count N, 6..9 zero; then N
	// units of QueueConfirmSize bytes (eventId int64, op uint8, result
	// uint8, 6 zero bytes): the outcomes the server recorded.
	StatusQueueConfirm uint16 = 211
)

// QueueMessageFixedSize is the fixed part of a queue frame's message unit.
const QueueMessageFixedSize = 24

// QueueConfirmSize is the size of one confirmation unit.
const QueueConfirmSize = 16

// QueueOutcomeSize is the size of one outcome unit a consumer sends: op
// uint8, 3 zero bytes, delay ms uint32 LE (nak only), eventId int64 LE.
const QueueOutcomeSize = 16

// QueueOp is what a consumer says of a delivered message.
type QueueOp uint8

// Outcomes of a delivered message.
const (
	QueueOpAck      QueueOp = 1 // processed: never delivered again
	QueueOpNak      QueueOp = 2 // redeliver, after the delay (0: the group's backoff)
	QueueOpProgress QueueOp = 3 // still working: the ack deadline restarts
	QueueOpTerm     QueueOp = 4 // never process: dead-letter it now
	QueueOpStop     QueueOp = 5 // end the stream (eventId and delay zero)
)

func (o QueueOp) String() string {
	switch o {
	case QueueOpAck:
		return "ack"
	case QueueOpNak:
		return "nak"
	case QueueOpProgress:
		return "progress"
	case QueueOpTerm:
		return "term"
	case QueueOpStop:
		return "stop"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Results in a confirmation unit.
const (
	// QueueResultDone: the outcome was recorded.
	QueueResultDone uint8 = 0
	// QueueResultGone: the message was no longer pending (acked or
	// dead-lettered before, possibly by another consumer after its ack
	// wait passed); nothing changed.
	QueueResultGone uint8 = 1
)

// MaxQueueBody bounds the JSON body of a queue command.
const MaxQueueBody = 64 << 10

// Limits of a group's settings.
const (
	DefaultQueueAckWait       = 30 * time.Second
	MinQueueAckWait           = 100 * time.Millisecond
	MaxQueueAckWait           = 24 * time.Hour
	DefaultQueueMaxInFlight   = 1000
	MaxQueueMaxInFlight       = 100000
	DefaultQueueDeadLetterMax = 5 // max deliveries when a dead-letter topic is set and none is given
	MaxQueueBackoffSteps      = 32
	MaxQueueNameLen           = 200
)

// Headers of a dead-lettered message (besides the original's own).
const (
	DeadHeaderTopic    = "smss-dead-topic"
	DeadHeaderGroup    = "smss-dead-group"
	DeadHeaderEventID  = "smss-dead-event-id"
	DeadHeaderAttempts = "smss-dead-attempts"
	DeadHeaderReason   = "smss-dead-reason"
)

// QueueConfig is the body of a create (41): a group's settings. Zero
// values take the defaults (see Normalize).
type QueueConfig struct {
	Group string `json:"group"`
	// AckWaitMs: how long a consumer holds a message before it is
	// redelivered (default 30000).
	AckWaitMs int64 `json:"ackWaitMs,omitempty"`
	// MaxDeliver: deliveries before a message is dead-lettered (0: no
	// limit; DefaultQueueDeadLetterMax when DeadLetter is set).
	MaxDeliver int `json:"maxDeliver,omitempty"`
	// BackoffMs: the delay before the n-th redelivery (the last repeats);
	// empty redelivers at once.
	BackoffMs []int64 `json:"backoffMs,omitempty"`
	// MaxInFlight: unacknowledged messages per consumer (default 1000).
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// MaxInFlightGroup: unacknowledged messages of the whole group
	// (default 1000).
	MaxInFlightGroup int `json:"maxInFlightGroup,omitempty"`
	// DeadLetter: the topic dead letters go to (created when missing); ""
	// drops a message after MaxDeliver deliveries.
	DeadLetter string `json:"deadLetter,omitempty"`
	// From: where the group starts, "oldest", "newest" or an eventId
	// (the first message after it); default "newest".
	From string `json:"from,omitempty"`
}

// Errors of the queue commands' arguments.
var (
	ErrQueueBody = NewBizError("invalid queue request body")
)

// Normalize validates c and fills its defaults.
func (c *QueueConfig) Normalize() error {
	if err := ValidateQueueName("group", c.Group); err != nil {
		return err
	}
	if c.AckWaitMs == 0 {
		c.AckWaitMs = DefaultQueueAckWait.Milliseconds()
	}
	if c.AckWaitMs < MinQueueAckWait.Milliseconds() || c.AckWaitMs > MaxQueueAckWait.Milliseconds() {
		return NewBizError(fmt.Sprintf("ackWaitMs %d out of range %d..%d", c.AckWaitMs, MinQueueAckWait.Milliseconds(), MaxQueueAckWait.Milliseconds()))
	}
	if c.MaxDeliver < 0 || c.MaxDeliver > math.MaxInt32 {
		return NewBizError(fmt.Sprintf("maxDeliver %d out of range 0..%d", c.MaxDeliver, math.MaxInt32))
	}
	if c.MaxDeliver == 0 && c.DeadLetter != "" {
		c.MaxDeliver = DefaultQueueDeadLetterMax
	}
	if len(c.BackoffMs) > MaxQueueBackoffSteps {
		return NewBizError(fmt.Sprintf("backoffMs has %d steps, at most %d", len(c.BackoffMs), MaxQueueBackoffSteps))
	}
	for _, d := range c.BackoffMs {
		if d < 0 || d > MaxDelayMs {
			return NewBizError(fmt.Sprintf("backoffMs step %d out of range 0..%d", d, int64(MaxDelayMs)))
		}
	}
	for _, p := range []*int{&c.MaxInFlight, &c.MaxInFlightGroup} {
		if *p == 0 {
			*p = DefaultQueueMaxInFlight
		}
		if *p < 1 || *p > MaxQueueMaxInFlight {
			return NewBizError(fmt.Sprintf("maxInFlight %d out of range 1..%d", *p, MaxQueueMaxInFlight))
		}
	}
	if c.DeadLetter != "" {
		if err := ValidateTopicName([]byte(c.DeadLetter)); err != nil {
			return NewBizError("deadLetter: " + err.Error())
		}
	}
	if c.From == "" {
		c.From = "newest"
	}
	if _, err := c.StartAfter(0); err != nil {
		return err
	}
	return nil
}

// StartAfter resolves From: the eventId the group's first message follows,
// given the server's last eventId.
func (c *QueueConfig) StartAfter(last int64) (int64, error) {
	switch c.From {
	case "oldest":
		return 0, nil
	case "newest":
		return last, nil
	}
	id, err := strconv.ParseInt(c.From, 10, 64)
	if err != nil || id < 0 {
		return 0, NewBizError(fmt.Sprintf("from %q: want oldest, newest or an eventId >= 0", c.From))
	}
	return id, nil
}

// Backoff is the delay before redelivery after attempt deliveries.
func (c *QueueConfig) Backoff(attempt int) time.Duration {
	if len(c.BackoffMs) == 0 || attempt < 1 {
		return 0
	}
	i := min(attempt-1, len(c.BackoffMs)-1)
	return time.Duration(c.BackoffMs[i]) * time.Millisecond
}

// Same reports whether two normalized configs are equal.
func (c *QueueConfig) Same(o *QueueConfig) bool {
	if c.Group != o.Group || c.AckWaitMs != o.AckWaitMs || c.MaxDeliver != o.MaxDeliver ||
		c.MaxInFlight != o.MaxInFlight || c.MaxInFlightGroup != o.MaxInFlightGroup ||
		c.DeadLetter != o.DeadLetter || c.From != o.From || len(c.BackoffMs) != len(o.BackoffMs) {
		return false
	}
	for i := range c.BackoffMs {
		if c.BackoffMs[i] != o.BackoffMs[i] {
			return false
		}
	}
	return true
}

// ValidateQueueName checks a group or consumer name: 1..MaxQueueNameLen
// bytes of letters, digits and "._-".
func ValidateQueueName(what, name string) error {
	if name == "" || len(name) > MaxQueueNameLen {
		return NewBizError(fmt.Sprintf("%s name must be 1..%d bytes", what, MaxQueueNameLen))
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.IndexByte("._-", ch) >= 0) {
			return NewBizError(fmt.Sprintf("%s name %q: only letters, digits, '.', '_' and '-'", what, name))
		}
	}
	return nil
}

// QueueRef is the body of delete (42) and info (43).
type QueueRef struct {
	Group string `json:"group"`
}

// QueueConsume is the body of consume (44).
type QueueConsume struct {
	Group    string `json:"group"`
	Consumer string `json:"consumer"`
	// MaxInFlight: this consumer's limit, at most the group's (0: the
	// group's).
	MaxInFlight int `json:"maxInFlight,omitempty"`
}

// QueueConsumerInfo describes one connected consumer.
type QueueConsumerInfo struct {
	Name     string `json:"name"`
	Addr     string `json:"addr,omitempty"`
	InFlight int    `json:"inFlight"`
	Acked    int64  `json:"acked"`
	SinceMs  int64  `json:"sinceMs"`
}

// QueueInfo describes a group (create and info replies, /api/queues).
type QueueInfo struct {
	Topic  string      `json:"topic"`
	Config QueueConfig `json:"config"`
	// Backlog: stored messages not delivered yet.
	Backlog int64 `json:"backlog"`
	// InFlight: delivered, not acked, deadline not passed.
	InFlight int `json:"inFlight"`
	// Waiting: to be redelivered (nak'd or ack wait passed).
	Waiting int `json:"waiting"`
	// Pending: Backlog + InFlight + Waiting.
	Pending         int64 `json:"pending"`
	Delivered       int64 `json:"delivered"`
	Redelivered     int64 `json:"redelivered"`
	Acked           int64 `json:"acked"`
	DeadLettered    int64 `json:"deadLettered"`
	Dropped         int64 `json:"dropped"`
	OldestPendingMs int64 `json:"oldestPendingAgeMs"`
	// Next: the last eventId handed out for the first time.
	Next      int64               `json:"next"`
	Consumers []QueueConsumerInfo `json:"consumers"`
}

// AppendQueueRequest appends a queue command (41..44) with body v (JSON).
func AppendQueueRequest(dst []byte, cmd Command, topic string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("encode %s body: %w", cmd, err)
	}
	if len(body) > MaxQueueBody {
		return dst, fmt.Errorf("%s body of %d bytes (max %d): %w", cmd, len(body), MaxQueueBody, ErrFieldTooLong)
	}
	out, err := appendReqHeader(dst, cmd, [16]byte{}, []byte(topic), nil)
	if err != nil {
		return dst, err
	}
	out = binary.LittleEndian.AppendUint32(out, uint32(len(body)))
	return append(out, body...), nil
}

// readQueue reads the body of 41..44 into req.Payload.
func (rr *RequestReader) readQueue(req *Request, tt int) error {
	head := make([]byte, tt+4)
	if err := rr.readFull(head, req.Header.Cmd.String()); err != nil {
		return err
	}
	req.setTopicTrace(head)
	n := binary.LittleEndian.Uint32(head[tt:])
	if n > MaxQueueBody {
		return rr.discard(req, int64(n), NewBizError(fmt.Sprintf("queue request body of %d bytes exceeds %d", n, MaxQueueBody)))
	}
	req.Payload = make([]byte, n)
	return rr.readFull(req.Payload, req.Header.Cmd.String()+" body")
}

// discard skips n body bytes after the topic and trace were read.
func (rr *RequestReader) discard(req *Request, n int64, reason error) error {
	if rr.lim.MaxDiscard < 0 || n > rr.lim.MaxDiscard {
		return refuseClose(reason)
	}
	if _, err := io.CopyN(io.Discard, rr.r, n); err != nil {
		return fmt.Errorf("discard over-limit %s body: %w", req.Header.Cmd, unexpected(err))
	}
	return refuse(reason)
}

// DecodeQueueBody decodes a queue command's JSON body into v, refusing
// unknown fields so that a misspelt setting is an error, not a default.
func DecodeQueueBody(body []byte, v any) error {
	d := json.NewDecoder(strings.NewReader(string(body)))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return NewBizError(ErrQueueBody.Msg + ": " + err.Error())
	}
	if d.More() {
		return NewBizError(ErrQueueBody.Msg + ": trailing data after the JSON object")
	}
	return nil
}

// AppendQueueFrameHeader appends the header of a queue frame.
func AppendQueueFrameHeader(dst []byte, count uint16, length uint32) []byte {
	var h RespHeader
	binary.LittleEndian.PutUint16(h[0:2], StatusQueueMessages)
	binary.LittleEndian.PutUint16(h[2:4], count)
	binary.LittleEndian.PutUint32(h[4:8], length)
	return append(dst, h[:]...)
}

// AppendQueueMessage appends one message unit of a queue frame.
func AppendQueueMessage(dst []byte, ts, eventID int64, attempt uint32, record []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ts))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(eventID))
	dst = binary.LittleEndian.AppendUint32(dst, attempt)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	return append(dst, record...)
}

// QueueMessage is one decoded message unit; Record aliases the frame.
type QueueMessage struct {
	Ts      int64
	EventID int64
	Attempt uint32
	Record  []byte // §1.4, verbatim
}

// ErrQueueFrame is a malformed queue frame or confirmation.
var ErrQueueFrame = errors.New("malformed queue frame")

// ParseQueueMessages splits a queue frame's message area into count units.
func ParseQueueMessages(area []byte, count int) ([]QueueMessage, error) {
	out := make([]QueueMessage, 0, count)
	for i := 0; i < count; i++ {
		if len(area) < QueueMessageFixedSize+RecordPrefixSize {
			return nil, fmt.Errorf("%w: unit %d of %d truncated", ErrQueueFrame, i, count)
		}
		m := QueueMessage{
			Ts:      int64(binary.LittleEndian.Uint64(area[0:])),
			EventID: int64(binary.LittleEndian.Uint64(area[8:])),
			Attempt: binary.LittleEndian.Uint32(area[16:]),
		}
		rest := area[QueueMessageFixedSize:]
		size := uint64(binary.LittleEndian.Uint32(rest))
		if uint64(len(rest)) < 8+size {
			return nil, fmt.Errorf("%w: record of unit %d truncated", ErrQueueFrame, i)
		}
		m.Record = rest[:8+size]
		area = rest[8+size:]
		out = append(out, m)
	}
	if len(area) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after %d units", ErrQueueFrame, len(area), count)
	}
	return out, nil
}

// QueueConfirm is one confirmation unit.
type QueueConfirm struct {
	EventID int64
	Op      QueueOp
	Result  uint8
}

// AppendQueueConfirms appends a confirmation frame.
func AppendQueueConfirms(dst []byte, cs []QueueConfirm) []byte {
	var h RespHeader
	binary.LittleEndian.PutUint16(h[0:2], StatusQueueConfirm)
	binary.LittleEndian.PutUint32(h[2:6], uint32(len(cs)))
	dst = append(dst, h[:]...)
	for _, c := range cs {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(c.EventID))
		dst = append(dst, byte(c.Op), c.Result, 0, 0, 0, 0, 0, 0)
	}
	return dst
}

// ParseQueueConfirms decodes the units after a confirmation header.
func ParseQueueConfirms(b []byte) ([]QueueConfirm, error) {
	if len(b)%QueueConfirmSize != 0 {
		return nil, fmt.Errorf("%w: confirmation area of %d bytes", ErrQueueFrame, len(b))
	}
	out := make([]QueueConfirm, 0, len(b)/QueueConfirmSize)
	for ; len(b) > 0; b = b[QueueConfirmSize:] {
		out = append(out, QueueConfirm{EventID: int64(binary.LittleEndian.Uint64(b)), Op: QueueOp(b[8]), Result: b[9]})
	}
	return out, nil
}

// QueueOutcome is one outcome unit a consumer sends.
type QueueOutcome struct {
	Op      QueueOp
	DelayMs uint32
	EventID int64
}

// AppendQueueOutcome appends an outcome unit.
func AppendQueueOutcome(dst []byte, o QueueOutcome) []byte {
	dst = append(dst, byte(o.Op), 0, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, o.DelayMs)
	return binary.LittleEndian.AppendUint64(dst, uint64(o.EventID))
}

// DecodeQueueOutcome decodes one unit; an unknown op, nonzero reserved
// bytes, a delay on anything but a nak, or an eventId < 1 (except for
// stop) is ErrQueueFrame.
func DecodeQueueOutcome(b []byte) (QueueOutcome, error) {
	if len(b) != QueueOutcomeSize {
		return QueueOutcome{}, fmt.Errorf("%w: outcome of %d bytes", ErrQueueFrame, len(b))
	}
	o := QueueOutcome{Op: QueueOp(b[0]), DelayMs: binary.LittleEndian.Uint32(b[4:]), EventID: int64(binary.LittleEndian.Uint64(b[8:]))}
	if b[1]|b[2]|b[3] != 0 {
		return QueueOutcome{}, fmt.Errorf("%w: reserved bytes of an outcome are not zero", ErrQueueFrame)
	}
	switch o.Op {
	case QueueOpAck, QueueOpProgress, QueueOpTerm, QueueOpNak:
		if o.EventID < 1 {
			return QueueOutcome{}, fmt.Errorf("%w: %s of eventId %d", ErrQueueFrame, o.Op, o.EventID)
		}
		if o.Op != QueueOpNak && o.DelayMs != 0 {
			return QueueOutcome{}, fmt.Errorf("%w: %s with a delay", ErrQueueFrame, o.Op)
		}
	case QueueOpStop:
		if o.EventID != 0 || o.DelayMs != 0 {
			return QueueOutcome{}, fmt.Errorf("%w: stop with an eventId or delay", ErrQueueFrame)
		}
	default:
		return QueueOutcome{}, fmt.Errorf("%w: unknown op %d", ErrQueueFrame, b[0])
	}
	return o, nil
}

// QueueTopic is the system topic holding the groups' state. Clients may
// read it but not write, create or delete it; list (100) leaves it out.
const QueueTopic = "__queues"

// ReadQueueFrame reads one unit of a consumer stream: Code 210 (Count
// messages in Body, parse with ParseQueueMessages), 211 (Count
// confirmations in Body, parse with ParseQueueConfirms), 201 or 255. A 400
// is returned as *BizError; a unit longer than maxLen as a wrapped
// ErrReplyTooLarge.
func ReadQueueFrame(r io.Reader, maxLen int) (Frame, error) {
	var h RespHeader
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, fmt.Errorf("read queue frame header: %w", err)
	}
	switch code := h.Code(); code {
	case StatusQueueMessages:
		n := int(binary.LittleEndian.Uint16(h[2:4]))
		if n == 0 {
			return Frame{}, fmt.Errorf("%w: message frame with no messages", ErrQueueFrame)
		}
		body, err := readBody(r, h.FrameLen(), maxLen, "queue frame")
		if err != nil {
			return Frame{}, err
		}
		return Frame{Code: code, Count: n, Body: body}, nil
	case StatusQueueConfirm:
		n := binary.LittleEndian.Uint32(h[2:6])
		if uint64(n)*QueueConfirmSize > math.MaxUint32 {
			return Frame{}, fmt.Errorf("%w: %d confirmations", ErrQueueFrame, n)
		}
		body, err := readBody(r, n*QueueConfirmSize, maxLen, "queue confirmations")
		if err != nil {
			return Frame{}, err
		}
		return Frame{Code: code, Count: int(n), Body: body}, nil
	case StatusAlive, StatusSubEnd:
		return Frame{Code: code}, nil
	case StatusError:
		return Frame{}, readErrText(r, &h)
	default:
		return Frame{}, fmt.Errorf("%w %d in a queue stream", ErrUnexpectedStatus, code)
	}
}

// QueueSnapshotBody is the body of the first record of a __queues message
// that holds every group's state: a node removes the files of __queues
// before the one holding such a message (the records are docs/protocol.md
// §12.6's; only this marker is shared with the broker).
const QueueSnapshotBody = "\x01\x04"
