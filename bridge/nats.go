package bridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsLane is the only lane of a JetStream target: the stream keeps the
// order of one connection's publishes.
const natsLane = "stream"

// NATSTarget mirrors into a JetStream stream: subject
// "<subjectPrefix>.<topic>" (Subject), Nats-Msg-Id "<identity>:<eventId>".
type NATSTarget struct {
	cfg      NATSConfig
	identity string
	nc       *nats.Conn
	js       jetstream.JetStream
	stream   jetstream.Stream

	// Every publish names what must precede it in the stream: the first of
	// a session the stream's last sequence, the others the previous
	// message's Nats-Msg-Id. JetStream refuses a publish whose predecessor
	// is missing, so a failed publish can never be followed by stored ones:
	// the stream never has a gap, and eventId order per topic holds.
	lastSeq uint64
	prevID  string

	// lost is closed when the connection is lost: the acks still awaited
	// then fail at once instead of after the ack timeout.
	lost chan struct{}
}

// NewNATSTarget returns a target for cfg; it connects in Open.
func NewNATSTarget(cfg NATSConfig, identity string) *NATSTarget {
	return &NATSTarget{cfg: cfg, identity: identity}
}

// Describe implements Target.
func (t *NATSTarget) Describe() string {
	return fmt.Sprintf("JetStream stream %s at %s", t.cfg.Stream, t.cfg.URL)
}

// Subject returns the subject of an smss topic: the prefix, a dot, and the
// topic with every byte outside [A-Za-z0-9_-] written %XX, except dots
// between two non-empty tokens (so "order.created" stays a two-token
// subject and can be filtered as "smss.order.>").
func Subject(prefix, topic string) string {
	var b strings.Builder
	b.Grow(len(prefix) + 1 + len(topic))
	b.WriteString(prefix)
	b.WriteByte('.')
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteByte(c)
		case c == '.' && i > 0 && i < len(topic)-1 && topic[i-1] != '.' && topic[i+1] != '.':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Open implements Target.
func (t *NATSTarget) Open(ctx context.Context) error {
	lost := make(chan struct{})
	var once sync.Once
	gone := func(*nats.Conn) { once.Do(func() { close(lost) }) }
	opts := []nats.Option{nats.Name("smss-bridge"), nats.NoReconnect(), nats.Timeout(5 * time.Second),
		nats.ClosedHandler(gone), nats.DisconnectErrHandler(func(c *nats.Conn, _ error) { gone(c) })}
	if t.cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(t.cfg.CredsFile))
	}
	nc, err := nats.Connect(t.cfg.URL, opts...)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(t.cfg.MaxInFlight),
		jetstream.WithPublishAsyncTimeout(ms(t.cfg.AckTimeoutMs)))
	if err != nil {
		nc.Close()
		return err
	}
	st, err := js.Stream(ctx, t.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) && t.cfg.CreateStream {
		sc := jetstream.StreamConfig{
			Name:        t.cfg.Stream,
			Subjects:    []string{t.cfg.SubjectPrefix + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Replicas:    t.cfg.Replicas,
			MaxAge:      time.Duration(t.cfg.MaxAgeSec) * time.Second,
			MaxBytes:    t.cfg.MaxBytes,
			Duplicates:  time.Duration(t.cfg.DuplicateWindowS) * time.Second,
			Storage:     jetstream.MemoryStorage,
			Description: "mirror of smss topics written by smss-bridge",
		}
		if t.cfg.FileStorage {
			sc.Storage = jetstream.FileStorage
		}
		st, err = js.CreateStream(ctx, sc)
	}
	if err != nil {
		nc.Close()
		return fmt.Errorf("stream %s: %w", t.cfg.Stream, err)
	}
	if r := st.CachedInfo().Config.Retention; r != jetstream.LimitsPolicy {
		nc.Close()
		return fmt.Errorf("%w: stream %s has retention %v; the bridge resumes from the stream's last message and needs retention limits",
			ErrFatal, t.cfg.Stream, r)
	}
	t.nc, t.js, t.stream, t.lost = nc, js, st, lost
	t.lastSeq, t.prevID = st.CachedInfo().State.LastSeq, ""
	return nil
}

// Close implements Target.
func (t *NATSTarget) Close() {
	if t.nc != nil {
		t.nc.Close()
		t.nc = nil
	}
}

func natsGet(h nats.Header) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := h[k]
		if !ok || len(v) == 0 {
			return "", false
		}
		return v[0], true
	}
}

// Marks implements Target: the stream's last bridge message.
func (t *NATSTarget) Marks(ctx context.Context) (map[string]Mark, error) {
	info, err := t.stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	t.lastSeq, t.prevID = info.State.LastSeq, ""
	if info.State.LastSeq == 0 {
		return nil, nil
	}
	// The last sequence may be a deleted message: walk back a little.
	for seq, n := info.State.LastSeq, 0; seq >= max(info.State.FirstSeq, 1) && n < 64; seq, n = seq-1, n+1 {
		msg, err := t.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get message %d: %w", seq, err)
		}
		mark, ok, err := ParseMark(natsGet(msg.Header))
		if err != nil {
			return nil, fmt.Errorf("message %d of stream %s: %w", seq, t.cfg.Stream, err)
		}
		if !ok {
			return nil, fmt.Errorf("%w: message %d on %s of stream %s has no %s header", ErrForeign, seq, msg.Subject, t.cfg.Stream, HeaderEventID)
		}
		return map[string]Mark{natsLane: mark}, nil
	}
	return nil, fmt.Errorf("%w: stream %s had messages up to sequence %d", ErrTargetLost, t.cfg.Stream, info.State.LastSeq)
}

// Tail implements Target.
func (t *NATSTarget) Tail(ctx context.Context, lane string, after int64, limit int) ([]int64, error) {
	info, err := t.stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for seq, n := info.State.LastSeq, 0; seq >= max(info.State.FirstSeq, 1) && n < limit; seq, n = seq-1, n+1 {
		msg, err := t.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get message %d: %w", seq, err)
		}
		mark, ok, err := ParseMark(natsGet(msg.Header))
		if err != nil {
			return nil, fmt.Errorf("message %d of stream %s: %w", seq, t.cfg.Stream, err)
		}
		if !ok {
			return nil, fmt.Errorf("%w: message %d on %s of stream %s has no %s header", ErrForeign, seq, msg.Subject, t.cfg.Stream, HeaderEventID)
		}
		if mark.EventID <= after {
			// Messages are stored in the order they were sent, which is
			// eventId order: everything before this one is older still.
			break
		}
		ids = append(ids, mark.EventID)
	}
	return ids, nil
}

// NATSMsg builds the NATS message of m (exported for tests and tools).
func NATSMsg(prefix string, m *Message) *nats.Msg {
	meta := m.MetaHeaders()
	n := len(meta) + len(m.Headers)
	msg := &nats.Msg{Subject: Subject(prefix, m.Topic), Data: m.Body, Header: make(nats.Header, n)}
	// One backing array for the values of every header: a []string per
	// header (Header.Add) was most of the allocations per message.
	vals := make([]string, 0, n)
	add := func(k, v string) {
		if old, ok := msg.Header[k]; ok {
			msg.Header[k] = append(old, v) // a repeated key: its own array
			return
		}
		vals = append(vals, v)
		i := len(vals)
		msg.Header[k] = vals[i-1 : i : i]
	}
	for _, h := range meta {
		add(h.Key, h.Value)
	}
	if len(m.Headers) > 0 {
		if mapHeaders(m.Headers, true) {
			for _, h := range m.Headers {
				add(h.Key, h.Value)
			}
		} else {
			add(HeaderRaw, RawHeaders(m.Headers))
		}
	}
	return msg
}

// MsgID is the Nats-Msg-Id of the message with eventID.
func MsgID(identity string, eventID int64) string {
	return identity + ":" + strconv.FormatInt(eventID, 10)
}

// Publish implements Target.
func (t *NATSTarget) Publish(ctx context.Context, m *Message) (Ack, error) {
	id := MsgID(t.identity, m.EventID)
	expect := jetstream.WithExpectLastMsgID(t.prevID)
	if t.prevID == "" {
		expect = jetstream.WithExpectLastSequence(t.lastSeq)
	}
	f, err := t.js.PublishMsgAsync(NATSMsg(t.cfg.SubjectPrefix, m),
		jetstream.WithMsgID(id),
		jetstream.WithExpectStream(t.cfg.Stream),
		expect,
		// A retried publish could land after a later one.
		jetstream.WithRetryAttempts(0))
	if err != nil {
		return nil, err
	}
	t.prevID = id
	return natsAck{f, t.lost}, nil
}

type natsAck struct {
	f    jetstream.PubAckFuture
	lost <-chan struct{}
}

// Ready implements readyAck. A loss of the connection is left to Wait.
func (a natsAck) Ready() (bool, error) {
	select {
	case <-a.f.Ok():
		return true, nil
	case err := <-a.f.Err():
		return true, err
	default:
		return false, nil
	}
}

func (a natsAck) Wait(ctx context.Context) error {
	select {
	case <-a.f.Ok():
		return nil
	case err := <-a.f.Err():
		return err
	case <-a.lost:
		// An ack that arrived just before the loss still counts.
		select {
		case <-a.f.Ok():
			return nil
		default:
		}
		return errors.New("connection to NATS lost before the ack")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TopicCreated implements Target: the stream's subjects already cover
// every topic.
func (t *NATSTarget) TopicCreated(ctx context.Context, topic string) error { return nil }
