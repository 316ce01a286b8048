package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/smssmq/smss/protocol"
)

// Client is a pool of connections to one smss server, or to several of a
// master/slave group (Options.Addrs). It is safe for concurrent use.
type Client struct {
	addr  string // the first address
	addrs []string
	opts  Options
	pool  *pool // pools[0]
	pools []*pool

	discovering chan struct{} // held by the one call finding the master

	mu       sync.Mutex
	master   int    // index of the last known master; -1 none
	cursor   int    // where the search for a master starts
	noStatus []bool // the server answered status "don't support action"
}

// Dial connects to the server at addr ("host:port") and returns a Client
// whose pool already holds that first connection. With Options.Addrs the
// client's addresses are addr followed by Addrs (addr may then be ""): Dial
// connects to all of them at once and succeeds as soon as one connection
// (TLS and login included) is open, so a hung server does not delay it;
// the other connections join their pools as they open.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	o := opts.withDefaults()
	secured, err := SecureDialer(o.DialContext, o.TLS, o.Credentials)
	if err != nil {
		return nil, fmt.Errorf("smss client: %w", err)
	}
	o.DialContext = secured
	addrs := addrList(addr, o.Addrs)
	if len(addrs) == 0 {
		return nil, errors.New("smss client: no address")
	}
	c := &Client{addr: addrs[0], addrs: addrs, opts: o, master: -1,
		discovering: make(chan struct{}, 1), noStatus: make([]bool, len(addrs))}
	c.pools = make([]*pool, len(addrs))
	for i, a := range addrs {
		c.pools[i] = newPool(a, &c.opts)
	}
	c.pool = c.pools[0]
	if err := c.dialFirst(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("smss client: %w", err)
	}
	return c, nil
}

// dialFirst opens a connection to every address at once and returns as
// soon as one is open (each goes idle into its pool, so a hung or slow
// server does not hold up Dial), or with every failure when none opens.
func (c *Client) dialFirst(ctx context.Context) error {
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(c.addrs))
	for i, a := range c.addrs {
		go func() {
			cn, err := dialConn(ctx, &c.opts, a)
			if err == nil {
				c.pools[i].putIdle(cn)
			}
			results <- result{i, err}
		}()
	}
	errs := make([]error, len(c.addrs))
	for range c.addrs {
		r := <-results
		if r.err == nil {
			return nil
		}
		errs[r.i] = r.err
	}
	return errors.Join(errs...)
}

// Addr is the server address the Client was dialled with (the first of
// Addrs).
func (c *Client) Addr() string { return c.addr }

// Close closes the idle connections and stops the health check. Calls in
// flight finish; their connections are closed when returned.
func (c *Client) Close() error {
	for _, p := range c.pools {
		p.close()
	}
	return nil
}

// call runs a request that is not a publish (see do).
func (c *Client) call(ctx context.Context, op, topic string, req []byte, kind protocol.ReplyKind, ck callKind) ([]byte, error) {
	return c.do(ctx, op, topic, req, kind, policy{kind: ck})
}

func (c *Client) wrap(op, topic string, err error) error {
	if len(c.addrs) > 1 {
		if topic != "" {
			return fmt.Errorf("smss %s %q: %w", op, topic, err)
		}
		return fmt.Errorf("smss %s: %w", op, err)
	}
	return c.wrapAt(op, topic, c.addr, err)
}

func (c *Client) wrapAt(op, topic, addr string, err error) error {
	if topic != "" {
		return fmt.Errorf("smss %s %q at %s: %w", op, topic, addr, err)
	}
	return fmt.Errorf("smss %s at %s: %w", op, addr, err)
}

// encodeErr wraps a request that could not be encoded (nothing was sent).
func (c *Client) encodeErr(op, topic string, err error) error {
	return c.wrap(op, topic, fmt.Errorf("encode request: %w", err))
}

// Publish publishes one message to topic.
//
// Unless Options.DisableMessageIDs is set, the message carries a fresh
// random id (header smss-msg-id, 32 hex characters) unless it already has
// one, and a failure whose outcome is unknown (lost connection, timeout,
// "write not confirmed") is retried with the same id within
// Options.MaxRetries; a dedupe-capable server stores it once. See the
// package documentation for what a retry guarantees.
func (c *Client) Publish(ctx context.Context, topic string, msg *Message) error {
	return c.PublishBatch(ctx, topic, []*Message{msg})
}

// PublishBatch publishes msgs in one request: they are stored together and
// get consecutive eventIds, all or none. The message id (see Publish) is on
// the first message and covers the whole request.
func (c *Client) PublishBatch(ctx context.Context, topic string, msgs []*Message) error {
	records, id, err := publishRecords(msgs, !c.opts.DisableMessageIDs)
	if err != nil {
		return c.encodeErr("publish", topic, err)
	}
	req, err := protocol.AppendPub(nil, []byte(topic), traceID(ctx), records)
	if err != nil {
		return c.encodeErr("publish", topic, err)
	}
	_, err = c.do(ctx, "publish", topic, req, protocol.ReplyPlain, policy{kind: publishCall, hasID: id != ""})
	return err
}

// PublishDelay publishes msgs (in one batch) delay from now; the server
// refuses delays under 1 s. Precision is a millisecond. Message ids and
// retries are as for Publish: a dedupe-capable server applies a retried
// delay once, due when the first attempt made it due.
func (c *Client) PublishDelay(ctx context.Context, topic string, delay time.Duration, msgs ...*Message) error {
	records, id, err := publishRecords(msgs, !c.opts.DisableMessageIDs)
	if err != nil {
		return c.encodeErr("delay publish", topic, err)
	}
	req, err := protocol.AppendDelay(nil, []byte(topic), traceID(ctx), delay.Milliseconds(), records)
	if err != nil {
		return c.encodeErr("delay publish", topic, err)
	}
	_, err = c.do(ctx, "delay publish", topic, req, protocol.ReplyPlain, policy{kind: publishCall, hasID: id != ""})
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
	_, err = c.call(ctx, "create topic", topic, req, protocol.ReplyPlain, manageCall)
	return err
}

// DeleteTopic deletes topic and its messages; its subscribers get
// ErrTopicDeleted.
func (c *Client) DeleteTopic(ctx context.Context, topic string) error {
	req, err := protocol.AppendDelete(nil, []byte(topic), traceID(ctx))
	if err != nil {
		return c.encodeErr("delete topic", topic, err)
	}
	_, err = c.call(ctx, "delete topic", topic, req, protocol.ReplyPlain, manageCall)
	return err
}

// TopicInfo returns the meta data of one topic.
func (c *Client) TopicInfo(ctx context.Context, topic string) (*TopicInfo, error) {
	req, err := protocol.AppendTopicInfo(nil, []byte(topic), traceID(ctx))
	if err != nil {
		return nil, c.encodeErr("topic info", topic, err)
	}
	body, err := c.call(ctx, "topic info", topic, req, protocol.ReplyJSON, readCall)
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
	body, err := c.call(ctx, "list topics", "", req, protocol.ReplyJSON, readCall)
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
	_, err = c.call(ctx, "alive", "", req, protocol.ReplyPlain, readCall)
	return err
}

// isRetryable reports whether a stream failure may go away by reconnecting:
// network and protocol errors, a still-registered previous subscriber and
// a server that is stopping, but not the server's other refusals.
func isRetryable(err error) bool {
	var pe permanentError
	switch {
	case errors.Is(err, ErrSubscriberExists), errors.Is(err, ErrServerStopping):
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
