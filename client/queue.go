package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/smssmq/smss/protocol"
)

// Work queues (issue 33, docs/protocol.md §12.6): a queue group shares the
// messages of one topic among competing consumers. Each message goes to
// one consumer, comes back when that consumer does not ack it within the
// group's ack wait (or naks it), and goes to the group's dead-letter topic
// after too many deliveries. The group's state lives on the master; only
// the master serves these calls and consumer streams. CreateQueue,
// DeleteQueue and Queues manage groups; a Worker (worker.go) consumes one.

// QueueConfig is a group's settings (protocol.QueueConfig): zero fields
// take the server's defaults (ack wait 30 s, max in flight 1000 per
// consumer and per group, no delivery limit unless DeadLetter is set, then
// 5; start at the newest message).
type QueueConfig = protocol.QueueConfig

// QueueInfo describes a group and its counters (protocol.QueueInfo).
type QueueInfo = protocol.QueueInfo

// QueueConsumerInfo describes one consumer connected to a group.
type QueueConsumerInfo = protocol.QueueConsumerInfo

// QueueOp is an outcome a consumer reports for a delivered message.
type QueueOp = protocol.QueueOp

// Outcomes of a delivered message, as OnConfirm reports them.
const (
	QueueOpAck      = protocol.QueueOpAck
	QueueOpNak      = protocol.QueueOpNak
	QueueOpProgress = protocol.QueueOpProgress
	QueueOpTerm     = protocol.QueueOpTerm
)

// QueueConfirm is the server's confirmation that it recorded an outcome:
// Result is QueueResultDone, or QueueResultGone when the message was no
// longer pending (acked or dead-lettered before, possibly by another
// consumer after this one's ack wait passed).
type QueueConfirm = protocol.QueueConfirm

// Results of a confirmation.
const (
	QueueResultDone = protocol.QueueResultDone
	QueueResultGone = protocol.QueueResultGone
)

// ErrNoQueues is returned (wrapped) by the queue calls and a Worker when
// the server does not know work queues (an original smss or an older
// version). It wraps ErrNotSupported.
var ErrNoQueues = fmt.Errorf("smss client: server has no work queues: %w", ErrNotSupported)

// CreateQueue creates the queue group cfg.Group on topic and returns its
// state. Creating a group again with the same settings succeeds (so a
// service may create its group at every start); different settings are
// refused with the server's reason. It goes to the master.
func (c *Client) CreateQueue(ctx context.Context, topic string, cfg QueueConfig) (*QueueInfo, error) {
	req, err := protocol.AppendQueueRequest(nil, protocol.CmdQueueCreate, topic, cfg)
	if err != nil {
		return nil, c.encodeErr("create queue", topic, err)
	}
	// Repeating an identical create is accepted, so a lost reply may be
	// retried like a read.
	body, err := c.queueCall(ctx, "create queue", topic, req, protocol.ReplyJSON, policy{kind: manageCall, idempotent: true})
	if err != nil {
		return nil, err
	}
	var info QueueInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, c.wrap("create queue", topic, fmt.Errorf("%w: decode queue info: %w", ErrProtocol, err))
	}
	return &info, nil
}

// DeleteQueue deletes the group and forgets its state (pending messages
// stay in the topic); its consumers' streams end with ErrQueueDeleted.
func (c *Client) DeleteQueue(ctx context.Context, topic, group string) error {
	req, err := protocol.AppendQueueRequest(nil, protocol.CmdQueueDelete, topic, protocol.QueueRef{Group: group})
	if err != nil {
		return c.encodeErr("delete queue", topic, err)
	}
	_, err = c.queueCall(ctx, "delete queue", topic, req, protocol.ReplyPlain, policy{kind: manageCall})
	return err
}

// Queues describes the groups of topic ("" every topic) named group (""
// every group), from the master: none is an empty slice.
func (c *Client) Queues(ctx context.Context, topic, group string) ([]QueueInfo, error) {
	req, err := protocol.AppendQueueRequest(nil, protocol.CmdQueueInfo, topic, protocol.QueueRef{Group: group})
	if err != nil {
		return nil, c.encodeErr("queue info", topic, err)
	}
	// The counters live on the master, so the call goes there, and asking
	// again is harmless.
	body, err := c.queueCall(ctx, "queue info", topic, req, protocol.ReplyJSON, policy{kind: manageCall, idempotent: true})
	if err != nil {
		return nil, err
	}
	out := []QueueInfo{}
	if len(body) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, c.wrap("queue info", topic, fmt.Errorf("%w: decode queue list: %w", ErrProtocol, err))
	}
	return out, nil
}

// queueCall sends a queue command to the master and reads its JSON (or
// plain) reply; an original server's "don't support action" becomes
// ErrNoQueues.
func (c *Client) queueCall(ctx context.Context, op, topic string, req []byte, kind protocol.ReplyKind, pol policy) ([]byte, error) {
	body, err := c.do(ctx, op, topic, req, kind, pol)
	if errors.Is(err, ErrNotSupported) {
		return nil, c.wrap(op, topic, ErrNoQueues)
	}
	return body, err
}
