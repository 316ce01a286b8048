package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/smssmq/smss/protocol"
)

// Header is one message header. Headers keep their order on the wire.
type Header struct {
	Key, Value string
}

// Message is what is published: ordered headers and a body.
type Message struct {
	Headers []Header
	Body    []byte
}

// NewMessage returns a message with body and no headers.
func NewMessage(body []byte) *Message { return &Message{Body: body} }

// SetHeader sets key to value, replacing the value of an existing key in
// place (so the order is kept), otherwise appending. It returns m.
func (m *Message) SetHeader(key, value string) *Message {
	for i := range m.Headers {
		if m.Headers[i].Key == key {
			m.Headers[i].Value = value
			return m
		}
	}
	m.Headers = append(m.Headers, Header{Key: key, Value: value})
	return m
}

// Header returns the value of the first header named key.
func (m *Message) Header(key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return "", false
}

// appendRecord appends the §1.4 record of m.
func (m *Message) appendRecord(dst []byte) ([]byte, error) {
	if m == nil || (len(m.Headers) == 0 && len(m.Body) == 0) {
		return dst, ErrEmptyMessage
	}
	rec := protocol.Record{Body: m.Body}
	if len(m.Headers) > 0 {
		rec.Headers = make([]protocol.KV, len(m.Headers))
		for i, h := range m.Headers {
			rec.Headers[i] = protocol.KV{Key: h.Key, Value: h.Value}
		}
	}
	return protocol.AppendRecord(dst, rec)
}

// Delivery is a message received by a subscriber.
type Delivery struct {
	Message
	// EventID is the message's id; subscribing "from" it resumes after it.
	EventID int64
	// Time is when the server appended the message to the topic file.
	Time time.Time
	// NextFileID and NextPos locate the next message in the server's topic
	// files; informational only.
	NextFileID, NextPos int64
}

func deliveryFrom(m *protocol.SubMessage) Delivery {
	d := Delivery{
		EventID:    m.EventID,
		Time:       time.UnixMilli(m.Ts),
		NextFileID: m.NextFileID,
		NextPos:    m.NextPos,
		Message:    Message{Body: m.Body},
	}
	if len(m.Headers) > 0 {
		d.Headers = make([]Header, len(m.Headers))
		for i, h := range m.Headers {
			d.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return d
}

type traceKey struct{}

// WithTraceID returns a context whose calls carry traceID (at most 255
// bytes; the server logs it). Calls on a context without one get a random id.
func WithTraceID(ctx context.Context, traceID string) context.Context {
	return context.WithValue(ctx, traceKey{}, traceID)
}

// TraceIDFromContext returns the traceId set with WithTraceID.
func TraceIDFromContext(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(traceKey{}).(string)
	return id, ok
}

func traceID(ctx context.Context) []byte {
	if id, ok := TraceIDFromContext(ctx); ok {
		return []byte(id)
	}
	var b [8]byte
	rand.Read(b[:])
	out := make([]byte, hex.EncodedLen(len(b)))
	hex.Encode(out, b[:])
	return out
}
