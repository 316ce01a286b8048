package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/smssmq/smss/protocol"
)

// Position is where a consumer is in a node's history: the last eventId it
// took and the epoch the serving node placed it in (docs/protocol.md §4.7).
// A Subscriber keeps one for LastAcked when its server reports an epoch
// history (Subscriber.Position); given back as SubscriberConfig.FromPosition
// it lets a subscription on another node, after a failover that changed the
// history, resume where the two histories part instead of skipping the
// new master's messages.
type Position = protocol.Position

// HistoryChange says that a subscription resumed before its last
// acknowledged eventId because the node it resumed on does not hold the
// history it was consuming past ResumeAfter: the messages after
// ResumeAfter are delivered again (those the two histories share: once
// more; the new history's: for the first time).
type HistoryChange struct {
	Addr        string   // the node it resumed on
	LastAcked   Position // where it was
	ResumeAfter int64    // where it resumed
}

// positions tracks the history of the node a subscription runs on and the
// Position of its last acknowledged eventId.
type positions struct {
	mu    sync.Mutex
	hist  []protocol.EpochStart // the current node's; valid only if known
	known bool                  // the current node reported a history
	pos   Position
	valid bool // pos.Epoch/Start describe pos.EventID
}

// acked records eventID as the last acknowledged, placed in the current
// node's history when it reported one.
func (p *positions) acked(eventID int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.known {
		p.pos, p.valid = Position{EventID: eventID}, false
		return
	}
	es := protocol.EpochStartOf(p.hist, eventID)
	p.pos, p.valid = Position{EventID: eventID, Epoch: es.Epoch, Start: es.Start}, true
}

// place places eventID in the current node's history.
func (p *positions) place(eventID int64) (Position, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.known {
		return Position{EventID: eventID}, false
	}
	es := protocol.EpochStartOf(p.hist, eventID)
	return Position{EventID: eventID, Epoch: es.Epoch, Start: es.Start}, true
}

// current returns the last acknowledged Position and whether its epoch is
// known.
func (p *positions) current() (Position, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pos, p.valid
}

// enter starts a session on a node whose history is h (known false: the
// node reports none, e.g. an original smss). It returns where to resume
// after and, if that is before the last acknowledged eventId, the change.
func (p *positions) enter(addr string, h []protocol.EpochStart, known bool) (int64, *HistoryChange) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hist, p.known = h, known
	if !known || !p.valid {
		return p.pos.EventID, nil
	}
	point, same := protocol.ResumePoint(h, p.pos)
	if same {
		return p.pos.EventID, nil
	}
	ch := &HistoryChange{Addr: addr, LastAcked: p.pos, ResumeAfter: point}
	es := protocol.EpochStartOf(h, point)
	p.pos = Position{EventID: point, Epoch: es.Epoch, Start: es.Start}
	return point, ch
}

// nodeHistory asks addr's status for its epoch history. known is false
// when the node has no status command or reports no history field it can
// be trusted with (an error is returned only for a failure worth a retry
// of the session).
func nodeHistory(ctx context.Context, dc func(context.Context, string, string) (net.Conn, error), timeout time.Duration, addr string, maxReply int) (h []protocol.EpochStart, known bool, err error) {
	nc, err := dial(ctx, dc, timeout, addr)
	if err != nil {
		return nil, false, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(timeout))
	req, err := protocol.AppendStatus(nil, traceID(ctx))
	if err != nil {
		return nil, false, permanentError{fmt.Errorf("encode status: %w", err)}
	}
	if _, err := nc.Write(req); err != nil {
		return nil, false, fmt.Errorf("send status: %w", err)
	}
	body, err := protocol.ReadReply(nc, protocol.ReplyJSON, maxReply)
	var be *protocol.BizError
	if errors.As(err, &be) && be.Msg == protocol.ErrNotSupported.Msg {
		return nil, false, nil // an original smss: nothing to check against
	}
	if err != nil {
		return nil, false, fmt.Errorf("status: %w", err)
	}
	st, err := ParseNodeStatus(body)
	if err != nil {
		return nil, false, err
	}
	if err := protocol.CheckEpochStarts(st.Epochs); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	// A node of this build that was never promoted reports none: every
	// eventId it holds is epoch 0's, which is a history too.
	return st.Epochs, true, nil
}
