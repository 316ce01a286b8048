package kit

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

// Unit is one server→client unit of a subscription stream.
type Unit struct {
	Code uint16
	Msgs []protocol.SubMessage
	Text string // 400 text
}

// String describes the unit for failure messages.
func (u Unit) String() string {
	switch u.Code {
	case protocol.StatusOK:
		return fmt.Sprintf("data frame of %d messages", len(u.Msgs))
	case protocol.StatusError:
		return "400 " + strconv.Quote(u.Text)
	}
	return strconv.Itoa(int(u.Code))
}

// Sub sends a subscribe request (the Go client's encoding: ack timeout
// always present).
func (c *Client) Sub(topic, who string, after int64, batch uint8, ackTimeout time.Duration) error {
	c.C.SetDeadline(time.Now().Add(20 * time.Second))
	_, err := c.C.Write(Must(protocol.AppendSub(nil, []byte(topic), []byte("sub-trace"), after, batch, ackTimeout, []byte(who))))
	return err
}

// Ack sends an acknowledgement with code (0: continue).
func (c *Client) Ack(code uint16) error {
	_, err := c.C.Write(binary.LittleEndian.AppendUint16(nil, code))
	return err
}

// Next reads one unit within timeout, checking the header bytes a data
// frame must leave zero (§2.1) and parsing its messages strictly.
func (c *Client) Next(timeout time.Duration) (Unit, error) {
	c.C.SetReadDeadline(time.Now().Add(timeout))
	var h protocol.RespHeader
	if _, err := io.ReadFull(c.R, h[:]); err != nil {
		return Unit{}, err
	}
	u := Unit{Code: h.Code()}
	switch u.Code {
	case protocol.StatusAlive, protocol.StatusSubEnd:
		if h != (protocol.RespHeader{byte(u.Code), byte(u.Code >> 8)}) {
			return u, fmt.Errorf("unit %d with non-zero header bytes % x", u.Code, h)
		}
	case protocol.StatusError:
		text := make([]byte, h.ErrLen())
		if _, err := io.ReadFull(c.R, text); err != nil {
			return u, err
		}
		u.Text = string(text)
	case protocol.StatusOK:
		if h[3] != 0 || h[8] != 0 || h[9] != 0 || h.FrameCount() == 0 {
			return u, fmt.Errorf("bad data frame header % x", h)
		}
		body := make([]byte, h.FrameLen())
		if _, err := io.ReadFull(c.R, body); err != nil {
			return u, err
		}
		msgs, err := protocol.ParseSubMessages(body, int(h.FrameCount()))
		if err != nil {
			return u, err
		}
		u.Msgs = msgs
	default:
		return u, fmt.Errorf("unexpected unit code %d", u.Code)
	}
	return u, nil
}

// NextData reads units until a data frame, skipping alives.
func (c *Client) NextData(timeout time.Duration) (Unit, error) {
	deadline := time.Now().Add(timeout)
	for {
		u, err := c.Next(time.Until(deadline))
		if err != nil || u.Code != protocol.StatusAlive {
			return u, err
		}
	}
}

// ExpectEOF checks that the server closed the connection (nothing more
// arrives, then EOF) within timeout.
func (c *Client) ExpectEOF(timeout time.Duration) error {
	c.C.SetReadDeadline(time.Now().Add(timeout))
	var b [1]byte
	n, err := c.R.Read(b[:])
	if n != 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("want EOF, got %d bytes (% x), err %v", n, b[:n], err)
	}
	return nil
}

// InSync sends a list request and checks that the reply is a JSON array:
// the connection is back in the command loop and in sync. (An alive
// request would not do: its 201 looks like a stream's alive.)
func (c *Client) InSync() error {
	body, err := c.RoundTrip(Must(protocol.AppendList(nil, []byte("sync"))), protocol.ReplyJSON)
	if err != nil {
		return err
	}
	var list []json.RawMessage
	if err := json.Unmarshal(body, &list); err != nil || len(list) == 0 {
		return fmt.Errorf("list reply %q: %v", body, err)
	}
	return nil
}

// Sent is a message as published: its eventId and record bytes.
type Sent struct {
	ID  int64
	Rec []byte
}

// Publisher publishes on one connection and predicts eventIds: on a fresh
// server every create takes one id and every pub one per record.
type Publisher struct {
	t      testing.TB
	C      *Client
	NextID int64
	Topics map[string][]Sent
}

// NewPublisher returns a Publisher on a new connection to a fresh server
// at addr, whose first eventId is 1.
func NewPublisher(t testing.TB, addr string) *Publisher {
	return &Publisher{t: t, C: Dial(t, addr), NextID: 1, Topics: map[string][]Sent{}}
}

// Create creates topic and returns the eventId its creation took.
func (p *Publisher) Create(topic string) int64 {
	p.t.Helper()
	if err := p.C.Create(topic, 0); err != nil {
		p.t.Fatalf("create %s: %v", topic, err)
	}
	p.NextID++
	return p.NextID - 1
}

// Pub publishes recs to topic and records the eventIds they take.
func (p *Publisher) Pub(topic string, recs ...[]byte) {
	p.t.Helper()
	if err := p.C.Pub(topic, recs...); err != nil {
		p.t.Fatalf("pub %s: %v", topic, err)
	}
	for _, r := range recs {
		p.Topics[topic] = append(p.Topics[topic], Sent{ID: p.NextID, Rec: r})
		p.NextID++
	}
}

// UnitWait is how long a test waits for the next unit of a subscription
// stream before it calls the server stuck.
const UnitWait = 5 * time.Second

// ReadAll subscribes to topic from the start and returns the bodies of the
// messages delivered until want have arrived or 20 s passed.
func ReadAll(t *testing.T, addr, topic string, want int) []string {
	t.Helper()
	c := Dial(t, addr)
	if err := c.Sub(topic, "reader", 0, 100, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var bodies []string
	deadline := time.Now().Add(20 * time.Second)
	for len(bodies) < want && time.Now().Before(deadline) {
		u, err := c.NextData(time.Until(deadline))
		if err != nil {
			t.Fatalf("after %d messages: %v", len(bodies), err)
		}
		if u.Code != protocol.StatusOK {
			t.Fatalf("after %d messages: %v", len(bodies), u)
		}
		for _, m := range u.Msgs {
			bodies = append(bodies, string(m.Body))
		}
		if err := c.Ack(0); err != nil { // 0: continue (§2.5)
			t.Fatal(err)
		}
	}
	return bodies
}
