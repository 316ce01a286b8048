package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Default caps of docs/protocol.md §11 (config keys limit.maxPayload, limit.maxWho,
// limit.maxRecords).
const (
	DefaultMaxPayload = 8 << 20
	DefaultMaxWho     = 1 << 10
	DefaultMaxRecords = 10000
	// DefaultMaxDiscard is how many bytes of an over-limit pub or delay
	// body are read and thrown away (config limit.maxDiscard).
	DefaultMaxDiscard = 64 << 20
)

// Subscription frame bounds (config keys limit.maxFrameBytes and the upper
// bound of limit.maxPayload). A frame carries messages while their bytes
// (the frame's length field) stay within limit.maxFrameBytes; a single
// larger message still goes alone, so the largest frame a server sends is
// SubMessageFixedSize + limit.maxPayload. With both keys capped at
// MaxPayloadCap, MaxSubFrameBytes is what a client must accept.
const (
	DefaultMaxFrameBytes = 16 << 20
	MaxPayloadCap        = 256 << 20
	MaxSubFrameBytes     = MaxPayloadCap + SubMessageFixedSize
)

// MinDelayMs is the shortest accepted delay of a delay pub (§1.5.5).
const MinDelayMs = 1000

// MinLifetimeMs is the shortest lifetime a create may ask for (§1.5.3):
// an expireAt sooner than this from now is refused with ErrExpireTooSoon.
const MinLifetimeMs = 10000

// MaxDelayMs is the longest delay a delay pub may ask for (100 years): the
// broker refuses longer ones so that trigger times never overflow, and
// delay.maxDelay may not exceed it.
const MaxDelayMs = 100 * 365 * 24 * 3600 * 1000

// Limits caps the lengths a request may declare. They are checked before any
// allocation; a zero or negative field means its default.
type Limits struct {
	MaxPayload int // record bytes of one pub or delay request
	MaxWho     int // sub who length
	MaxRecords int // records in one pub or delay request
	// MaxDiscard: a pub or delay body over MaxPayload but of at most this
	// many bytes is read and discarded, and the request refused with a 400
	// that keeps the connection. A client writes its whole body before it
	// reads the reply (the original client does), so closing at once
	// makes it fail with "broken pipe" instead of the server's reason.
	// Larger bodies are refused and the connection closed. 0 means
	// DefaultMaxDiscard; negative: never discard (close at once).
	MaxDiscard int64
}

// DefaultLimits returns the §11 defaults: 8 MiB, 1 KiB, 10000 records.
func DefaultLimits() Limits {
	return Limits{MaxPayload: DefaultMaxPayload, MaxWho: DefaultMaxWho, MaxRecords: DefaultMaxRecords}
}

func (l Limits) withDefaults() Limits {
	if l.MaxPayload <= 0 {
		l.MaxPayload = DefaultMaxPayload
	}
	if l.MaxWho <= 0 {
		l.MaxWho = DefaultMaxWho
	}
	if l.MaxRecords <= 0 {
		l.MaxRecords = DefaultMaxRecords
	}
	if l.MaxDiscard == 0 {
		l.MaxDiscard = DefaultMaxDiscard
	}
	return l
}

// Request is one decoded request. Which body fields are set depends on
// Header.Cmd; the others are zero. Topic, TraceID, Who and Payload never
// alias the underlying io.Reader's buffers. For pub and delay bodies up to
// 32 KiB they alias the RequestReader's own reusable buffer, valid until its
// next Read: whoever keeps them past the request (or hands them to a
// goroutine that may outlive it) must copy them.
type Request struct {
	Header  Header
	Topic   []byte
	TraceID []byte

	EventID     int64  // sub, replica, valid list
	AckTimeout  int64  // sub: nanoseconds, 0 when the header flag says absent
	Who         []byte // sub
	ExpireAt    int64  // create: absolute ms, 0 = permanent
	DelayMs     int64  // delay: relative ms
	Payload     []byte // pub, delay: the message records; auth start/continue: the SCRAM message; queue commands: the JSON body
	RecordCount int    // pub, delay: number of records in Payload
}

// RequestError is a request the server must refuse with a 400 carrying
// Err's text. Close reports whether the stream position is lost (or the body
// was refused), in which case the connection must be closed after the reply;
// when Close is false the request's bytes were consumed exactly and the next
// request can be read.
type RequestError struct {
	Err   error
	Close bool
}

func (e *RequestError) Error() string { return e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

func refuse(err error) *RequestError { return &RequestError{Err: err} }

func refuseClose(err error) *RequestError { return &RequestError{Err: err, Close: true} }

// RequestReader reads requests one at a time from r. It reuses one buffer
// for the bodies of pubs and delays up to reuseMax bytes, so a steady
// stream of publishes does not allocate per request; the Topic, TraceID and
// Payload of such a request alias that buffer and are valid only until the
// next Read. It is not safe for concurrent use.
type RequestReader struct {
	r       io.Reader
	lim     Limits
	scratch [HeaderSize]byte
	buf     []byte
}

// reuseMax bounds the body buffer a RequestReader keeps between requests:
// larger bodies get their own allocation, so an idle connection pins at
// most this much.
const reuseMax = 32 << 10

// body returns n bytes for a request body: the reused buffer when n fits
// in reuseMax (grown geometrically), else a new slice.
func (rr *RequestReader) body(n int) []byte {
	if n > reuseMax {
		return make([]byte, n)
	}
	if cap(rr.buf) < n {
		rr.buf = make([]byte, min(max(n, 2*cap(rr.buf), 512), reuseMax))
	}
	return rr.buf[:n]
}

// NewRequestReader returns a reader of requests from r with the given caps.
// r should be buffered (bufio.Reader): requests are read in several small
// exact-size reads.
func NewRequestReader(r io.Reader, lim Limits) *RequestReader {
	return &RequestReader{r: r, lim: lim.withDefaults()}
}

// ReadRequest reads one request from r. See RequestReader.Read.
func ReadRequest(r io.Reader, lim Limits) (*Request, error) {
	req := new(Request)
	if err := NewRequestReader(r, lim).Read(req); err != nil {
		if err == io.EOF {
			return nil, err
		}
		return req, err
	}
	return req, nil
}

// Read reads exactly one request into req (which it resets first).
//
// Errors:
//   - io.EOF when the stream ended cleanly before the first header byte;
//   - *RequestError when the request must be refused with a 400 (see its
//     Close field); req then holds the header and whatever was read;
//   - any other error is an I/O or framing failure (wrapping
//     io.ErrUnexpectedEOF, timeouts, ...): the connection must be closed.
//
// Topic names are not validated here: which check applies is per command.
func (rr *RequestReader) Read(req *Request) error {
	*req = Request{}
	hdr := &rr.scratch
	if _, err := io.ReadFull(rr.r, hdr[:]); err != nil {
		if err == io.EOF {
			return io.EOF
		}
		return fmt.Errorf("read request header: %w", err)
	}
	req.Header = ParseHeader(hdr)
	h := &req.Header
	tt := int(h.TopicLen) + int(h.TraceLen)

	switch h.Cmd {
	case CmdPub:
		p := h.PayloadSize()
		if uint64(p) > uint64(rr.lim.MaxPayload) {
			return rr.overLimit(req, tt, int64(p), payloadTooLarge(p, rr.lim.MaxPayload))
		}
		buf := rr.body(tt + int(p))
		if err := rr.readFull(buf, "pub"); err != nil {
			return err
		}
		req.setTopicTrace(buf)
		req.Payload = buf[tt:]
		if p <= RecordPrefixSize {
			return refuse(ErrPubSizeTooSmall)
		}
		return rr.countRecords(req, ErrInvalidPubPayload)

	case CmdDelay:
		p := h.PayloadSize()
		if uint64(p) > uint64(rr.lim.MaxPayload) {
			return rr.overLimit(req, tt, 8+int64(p), payloadTooLarge(p, rr.lim.MaxPayload))
		}
		buf := rr.body(tt + 8 + int(p))
		if err := rr.readFull(buf, "delay"); err != nil {
			return err
		}
		req.setTopicTrace(buf)
		req.DelayMs = int64(binary.LittleEndian.Uint64(buf[tt:]))
		req.Payload = buf[tt+8:]
		if p <= RecordPrefixSize {
			return refuse(ErrInvalidDelay)
		}
		if req.DelayMs < MinDelayMs {
			return refuse(ErrDelayTooShort)
		}
		return rr.countRecords(req, ErrInvalidDelay)

	case CmdSub:
		return rr.readSub(req, tt)

	case CmdAuthStart, CmdAuthContinue:
		return rr.readAuth(req, tt)

	case CmdCreate, CmdReplica, CmdValidList:
		buf := make([]byte, tt+8)
		if err := rr.readFull(buf, h.Cmd.String()); err != nil {
			return err
		}
		req.setTopicTrace(buf)
		v := int64(binary.LittleEndian.Uint64(buf[tt:]))
		if h.Cmd == CmdCreate {
			req.ExpireAt = v
			return nil
		}
		req.EventID = v
		if h.Cmd == CmdReplica && v < 0 {
			return refuse(ErrInvalidReplicaID)
		}
		return nil

	case CmdCursorSet, CmdCursorReset:
		return rr.readCursor(req, tt, h.Cmd == CmdCursorSet)

	case CmdQueueCreate, CmdQueueDelete, CmdQueueInfo, CmdQueueConsume:
		return rr.readQueue(req, tt)

	case CmdDelete, CmdAlive, CmdTopicInfo, CmdList, CmdStatus, CmdPromote, CmdFollow, CmdCursorList, CmdSwitchover:
		if tt == 0 {
			return nil
		}
		buf := make([]byte, tt)
		if err := rr.readFull(buf, h.Cmd.String()); err != nil {
			return err
		}
		req.setTopicTrace(buf)
		return nil
	}
	// Unknown commands, and 101 which is internal only: the body length is
	// unknown, so the stream cannot be resynchronised.
	return refuseClose(ErrNotSupported)
}

// overLimit refuses a body of n bytes (after tt bytes of topic and trace)
// that exceeds a cap: up to MaxDiscard it is read and discarded and the
// connection stays usable; beyond, the connection is closed unread.
func (rr *RequestReader) overLimit(req *Request, tt int, n int64, reason error) error {
	if rr.lim.MaxDiscard < 0 || n > rr.lim.MaxDiscard {
		return refuseClose(reason)
	}
	buf := make([]byte, tt)
	if err := rr.readFull(buf, req.Header.Cmd.String()); err != nil {
		return err
	}
	req.setTopicTrace(buf)
	if _, err := io.CopyN(io.Discard, rr.r, n); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("discard over-limit %s body: %w", req.Header.Cmd, err)
	}
	return refuse(reason)
}

func (rr *RequestReader) readSub(req *Request, tt int) error {
	fixed := 8 + 4
	if req.Header.HasAckTimeout() {
		fixed += 8
	}
	// The who length is only known once the fixed part is read, so who gets
	// its own allocation after the cap check.
	head := make([]byte, tt+fixed)
	if err := rr.readFull(head, "sub"); err != nil {
		return err
	}
	b := head[tt:]
	req.EventID = int64(binary.LittleEndian.Uint64(b))
	b = b[8:]
	if req.Header.HasAckTimeout() {
		req.AckTimeout = int64(binary.LittleEndian.Uint64(b))
		b = b[8:]
	}
	whoLen := binary.LittleEndian.Uint32(b)
	req.setTopicTrace(head)
	if uint64(whoLen) > uint64(rr.lim.MaxWho) {
		return refuseClose(NewBizError(fmt.Sprintf("who of %d bytes exceeds limit.maxWho %d", whoLen, rr.lim.MaxWho)))
	}
	req.Who = make([]byte, whoLen)
	return rr.readFull(req.Who, "sub who")
}

func (rr *RequestReader) readFull(b []byte, what string) error {
	if _, err := io.ReadFull(rr.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read %s request body: %w", what, err)
	}
	return nil
}

func (rr *RequestReader) countRecords(req *Request, invalid *BizError) error {
	n, err := CountRecords(req.Payload, rr.lim.MaxRecords)
	switch {
	case errors.Is(err, ErrTooManyRecords):
		return refuse(NewBizError(fmt.Sprintf("more than %d records in one request exceeds limit.maxRecords %d",
			rr.lim.MaxRecords, rr.lim.MaxRecords)))
	case err != nil:
		return refuse(invalid)
	}
	req.RecordCount = n
	return nil
}

func (req *Request) setTopicTrace(buf []byte) {
	n, t := int(req.Header.TopicLen), int(req.Header.TraceLen)
	req.Topic = buf[:n:n]
	req.TraceID = buf[n : n+t : n+t]
}

func payloadTooLarge(p uint32, max int) error {
	return NewBizError(fmt.Sprintf("payload of %d bytes exceeds limit.maxPayload %d", p, max))
}
