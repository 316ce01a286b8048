package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/smssmq/smss/protocol"
)

// Stored consumer positions (docs/durability-and-failover.md): the
// server keeps the last eventId each (topic, who) acknowledged. These calls
// list, set and reset them (admin role when the server has authentication);
// SubscriberConfig.Resume subscribes from them.

// ErrNoCursors is returned (wrapped) by the cursor calls when the server
// does not know them (an original smss or an older version).
var ErrNoCursors = fmt.Errorf("smss client: server has no stored positions: %w", ErrNotSupported)

// Cursor is one stored position as the server reports it.
type Cursor struct {
	Topic string `json:"topic"`
	Who   string `json:"who"`
	// EventID is the newest acknowledged eventId; Stored the one written
	// to the server's storage (-1 while none is), at most cursor.flushMs
	// behind.
	EventID int64 `json:"eventId"`
	Stored  int64 `json:"stored"`
	// Lag is the number of messages after EventID, -1 when unknown.
	Lag int64 `json:"lag"`
	// Updated is the ms time of the last ack or write.
	Updated int64 `json:"updated"`
	// Active reports a live subscription of (Topic, Who) on that server.
	Active bool `json:"active"`
}

// Cursors lists the stored positions of topic, or of every topic when
// topic is "".
func (c *Client) Cursors(ctx context.Context, topic string) ([]Cursor, error) {
	req, err := protocol.AppendCursorList(nil, []byte(topic), traceID(ctx))
	if err != nil {
		return nil, c.encodeErr("cursor list", topic, err)
	}
	body, err := c.callMaybeUnknown(ctx, "cursor list", topic, req, protocol.ReplyJSON, ErrNoCursors)
	if err != nil {
		return nil, err
	}
	out := []Cursor{}
	if len(body) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, c.wrap("cursor list", topic, fmt.Errorf("%w: %v", ErrProtocol, err))
	}
	return out, nil
}

// SetCursor stores eventID as the position of (topic, who). The server
// refuses it while who is subscribed to topic on it.
func (c *Client) SetCursor(ctx context.Context, topic, who string, eventID int64) error {
	req, err := protocol.AppendCursorSet(nil, []byte(topic), []byte(who), eventID, traceID(ctx))
	if err != nil {
		return c.encodeErr("cursor set", topic, err)
	}
	_, err = c.callMaybeUnknown(ctx, "cursor set", topic, req, protocol.ReplyPlain, ErrNoCursors)
	return err
}

// ResetCursor removes the stored position of (topic, who): its next resume
// starts as a new who's.
func (c *Client) ResetCursor(ctx context.Context, topic, who string) error {
	req, err := protocol.AppendCursorReset(nil, []byte(topic), []byte(who), traceID(ctx))
	if err != nil {
		return c.encodeErr("cursor reset", topic, err)
	}
	_, err = c.callMaybeUnknown(ctx, "cursor reset", topic, req, protocol.ReplyPlain, ErrNoCursors)
	return err
}
