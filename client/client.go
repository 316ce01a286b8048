package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/smssmq/smss/protocol"
)

// Client is a pool of connections to one smss server. It is safe for
// concurrent use.
type Client struct {
	addr string
	opts Options
	pool *pool
}

// Dial connects to the server at addr ("host:port") and returns a Client
// whose pool already holds that first connection.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	o := opts.withDefaults()
	secured, err := SecureDialer(o.DialContext, o.TLS, o.Credentials)
	if err != nil {
		return nil, fmt.Errorf("smss client: %w", err)
	}
	o.DialContext = secured
	c := &Client{addr: addr, opts: o}
	first, err := dialConn(ctx, &c.opts, addr)
	if err != nil {
		return nil, fmt.Errorf("smss client: %w", err)
	}
	c.pool = newPool(addr, &c.opts)
	c.pool.putIdle(first)
	return c, nil
}

// Addr is the server address the Client was dialled with.
func (c *Client) Addr() string { return c.addr }

// Close closes the idle connections and stops the health check. Calls in
// flight finish; their connections are closed when returned.
func (c *Client) Close() error {
	c.pool.close()
	return nil
}

// call runs one request/reply exchange on a pooled connection.
func (c *Client) call(ctx context.Context, op, topic string, req []byte, kind protocol.ReplyKind) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	cn, err := c.pool.get(ctx)
	if err != nil {
		return nil, c.wrap(op, topic, err)
	}
	body, err := cn.roundTrip(ctx, req, kind, c.opts.MaxReplyBytes, c.opts.RequestTimeout, topic)
	c.pool.put(cn, err != nil && !IsServerError(err))
	if err != nil {
		return nil, c.wrap(op, topic, err)
	}
	return body, nil
}

func (c *Client) wrap(op, topic string, err error) error {
	if topic != "" {
		return fmt.Errorf("smss %s %q at %s: %w", op, topic, c.addr, err)
	}
	return fmt.Errorf("smss %s at %s: %w", op, c.addr, err)
}

// encodeErr wraps a request that could not be encoded (nothing was sent).
func (c *Client) encodeErr(op, topic string, err error) error {
	return c.wrap(op, topic, fmt.Errorf("encode request: %w", err))
}

// Publish publishes one message to topic.
func (c *Client) Publish(ctx context.Context, topic string, msg *Message) error {
	return c.PublishBatch(ctx, topic, []*Message{msg})
}

// PublishBatch publishes msgs in one request: they are stored together and
// get consecutive eventIds, all or none.
func (c *Client) PublishBatch(ctx context.Context, topic string, msgs []*Message) error {
	records, err := appendRecords(msgs)
	if err != nil {
		return c.encodeErr("publish", topic, err)
	}
	req, err := protocol.AppendPub(nil, []byte(topic), traceID(ctx), records)
	if err != nil {
		return c.encodeErr("publish", topic, err)
	}
	_, err = c.call(ctx, "publish", topic, req, protocol.ReplyPlain)
	return err
}

// PublishDelay publishes msgs (in one batch) delay from now; the server
// refuses delays under 1 s. Precision is a millisecond.
func (c *Client) PublishDelay(ctx context.Context, topic string, delay time.Duration, msgs ...*Message) error {
	records, err := appendRecords(msgs)
	if err != nil {
		return c.encodeErr("delay publish", topic, err)
	}
	req, err := protocol.AppendDelay(nil, []byte(topic), traceID(ctx), delay.Milliseconds(), records)
	if err != nil {
		return c.encodeErr("delay publish", topic, err)
	}
	_, err = c.call(ctx, "delay publish", topic, req, protocol.ReplyPlain)
	return err
}

// CreateTopic creates a permanent topic.
func (c *Client) CreateTopic(ctx context.Context, topic string) error {
	return c.createTopic(ctx, topic, 0)
}

// CreateTopicTTL creates a topic that the server deletes ttl from now (by
// this machine's clock; the server refuses lifetimes under 10 s).
func (c *Client) CreateTopicTTL(ctx context.Context, topic string, ttl time.Duration) error {
	if ttl <= 0 {
		return c.wrap("create topic", topic, fmt.Errorf("ttl %v: %w", ttl, ErrExpireTooSoon))
	}
	return c.createTopic(ctx, topic, time.Now().Add(ttl).UnixMilli())
}

// CreateTopicUntil creates a topic that the server deletes at expireAt.
func (c *Client) CreateTopicUntil(ctx context.Context, topic string, expireAt time.Time) error {
	ms := expireAt.UnixMilli()
	if ms <= 0 {
		return c.wrap("create topic", topic, fmt.Errorf("expireAt %v: %w", expireAt, ErrExpireTooSoon))
	}
	return c.createTopic(ctx, topic, ms)
}

func (c *Client) createTopic(ctx context.Context, topic string, expireAt int64) error {
	req, err := protocol.AppendCreate(nil, []byte(topic), traceID(ctx), expireAt)
	if err != nil {
		return c.encodeErr("create topic", topic, err)
	}
	_, err = c.call(ctx, "create topic", topic, req, protocol.ReplyPlain)
	return err
}

// DeleteTopic deletes topic and its messages; its subscribers get
// ErrTopicDeleted.
func (c *Client) DeleteTopic(ctx context.Context, topic string) error {
	req, err := protocol.AppendDelete(nil, []byte(topic), traceID(ctx))
	if err != nil {
		return c.encodeErr("delete topic", topic, err)
	}
	_, err = c.call(ctx, "delete topic", topic, req, protocol.ReplyPlain)
	return err
}

// TopicInfo returns the meta data of one topic.
func (c *Client) TopicInfo(ctx context.Context, topic string) (*TopicInfo, error) {
	req, err := protocol.AppendTopicInfo(nil, []byte(topic), traceID(ctx))
	if err != nil {
		return nil, c.encodeErr("topic info", topic, err)
	}
	body, err := c.call(ctx, "topic info", topic, req, protocol.ReplyJSON)
	if err != nil {
		return nil, err
	}
	if len(body) == 0 {
		return nil, c.wrap("topic info", topic, fmt.Errorf("%w: empty reply", ErrProtocol))
	}
	var ti TopicInfo
	if err := ti.UnmarshalJSON(body); err != nil {
		return nil, c.wrap("topic info", topic, fmt.Errorf("%w: %w", ErrProtocol, err))
	}
	return &ti, nil
}

// Topics lists every topic the server knows, in name order, including
// expired ones the server has not reaped yet.
func (c *Client) Topics(ctx context.Context) ([]TopicInfo, error) {
	req, err := protocol.AppendList(nil, traceID(ctx))
	if err != nil {
		return nil, c.encodeErr("list topics", "", err)
	}
	body, err := c.call(ctx, "list topics", "", req, protocol.ReplyJSON)
	if err != nil {
		return nil, err
	}
	topics, err := parseTopicList(body)
	if err != nil {
		return nil, c.wrap("list topics", "", fmt.Errorf("%w: %w", ErrProtocol, err))
	}
	return topics, nil
}

// Alive pings the server over a pooled connection.
func (c *Client) Alive(ctx context.Context) error {
	req, err := protocol.AppendAlive(nil, traceID(ctx))
	if err != nil {
		return c.encodeErr("alive", "", err)
	}
	_, err = c.call(ctx, "alive", "", req, protocol.ReplyPlain)
	return err
}

// isRetryable reports whether a stream failure may go away by reconnecting:
// network and protocol errors and a still-registered previous subscriber,
// but not the server's other refusals.
func isRetryable(err error) bool {
	var pe permanentError
	switch {
	case errors.Is(err, ErrSubscriberExists):
		return true
	case errors.As(err, &pe), errors.Is(err, protocol.ErrReplyTooLarge):
		// The same request would fail the same way.
		return false
	}
	return !IsServerError(err) && !errors.Is(err, ErrTopicDeleted)
}

// permanentError marks a stream failure that reconnecting cannot cure.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }
