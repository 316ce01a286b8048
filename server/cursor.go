package server

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// Cursors serves the stored consumer positions (issue 22): a sub from
// eventId -1, and cursor list (37), set (38) and reset (39).
type Cursors interface {
	// SubscribeResume subscribes after the stored position of (topic,
	// who); whenNone says where a who without one starts (0 oldest, -1
	// end, N after eventId N).
	SubscribeResume(topic, who []byte, whenNone int64) (Subscription, error)
	// CursorList returns the positions of topic ("" all).
	CursorList(topic string) []metrics.CursorInfo
	SetCursor(ctx context.Context, topic, who []byte, eventID int64) error
	ResetCursor(ctx context.Context, topic, who []byte) error
}

// errNoCursors answers the cursor commands on a server built without
// Cursors (the request was read exactly: the connection stays usable).
var errNoCursors = protocol.NewBizError("stored positions are not available on this server")

// cursorCommand serves 37, 38 and 39.
func (c *conn) cursorCommand() error {
	cs := c.s.opts.Cursors
	if cs == nil {
		return errNoCursors
	}
	req := &c.req
	switch req.Header.Cmd {
	case protocol.CmdCursorList:
		if len(req.Topic) > 0 {
			if err := protocol.ValidateTopicName(req.Topic); err != nil {
				return err
			}
		}
		list := cs.CursorList(string(req.Topic))
		if len(list) == 0 {
			return c.appendJSON(nil) // as list (100): no entries, no body
		}
		body, err := json.Marshal(list)
		if err != nil {
			return fmt.Errorf("encode cursor list: %w", err)
		}
		return c.appendJSON(body)
	case protocol.CmdCursorSet:
		if err := cs.SetCursor(c.s.ctx, req.Topic, req.Who, req.EventID); err != nil {
			return err
		}
	case protocol.CmdCursorReset:
		if err := cs.ResetCursor(c.s.ctx, req.Topic, req.Who); err != nil {
			return err
		}
	}
	c.out = protocol.AppendReplyOK(c.out)
	return nil
}

// hideSystemTopics leaves the system topics (positions, queue groups) out of a list (100) reply; valid
// list (99) keeps it, since slaves need it.
func hideSystemTopics(topics []protocol.TopicInfo, err error) ([]protocol.TopicInfo, error) {
	if err != nil {
		return nil, err
	}
	out := topics[:0]
	for _, t := range topics {
		if t.Name != protocol.CursorTopic && t.Name != protocol.QueueTopic {
			out = append(out, t)
		}
	}
	return out, nil
}
