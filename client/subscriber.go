package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/protocol"
)

// AckAction is a Handler's verdict on the batch it was given.
type AckAction uint8

const (
	// Ack acknowledges the batch and asks for the next one.
	Ack AckAction = iota
	// AckAndStop acknowledges the batch and ends the subscription; Run
	// returns nil.
	AckAndStop
	// StopWithoutAck ends the subscription without acknowledging: the
	// connection is closed at once (the server does not wait for its ack
	// timeout) and the batch is delivered again by the next subscription
	// that resumes from LastAcked. Run returns nil.
	StopWithoutAck
)

// Handler processes one batch (1..BatchSize messages in eventId order). ctx
// is cancelled when the subscription is being stopped; a batch whose
// handler returns after that is not acknowledged, whatever it returns.
type Handler func(ctx context.Context, batch []Delivery) AckAction

// SubscriberConfig configures a Subscriber. Topic, Who and Handler are
// required; other zero fields take the defaults named below.
type SubscriberConfig struct {
	Topic string
	// Addrs are further servers of the same master/slave group or
	// cluster, besides the address given to NewSubscriber (duplicates
	// dropped). Before each round of connections the subscriber asks
	// every address its status (in parallel, within ProbeTimeout) and
	// tries them in this order: the master of the newest epoch any of
	// them reports; slaves that follow that epoch, in-sync ones (a
	// cluster's in-sync set) first; a fenced master of that epoch; servers
	// without the status command (an original smss). A server that did not
	// answer, and one of an older epoch (a master that was replaced, a
	// slave still following it), is not used. eventIds are the same on
	// every node, so each resumes after LastAcked. After a failure the
	// subscriber moves on to the next server of the round; once the
	// round is exhausted it waits (the backoff) and asks again, and after
	// a connection that had delivered it asks again at once. A server that
	// has not yet replicated up to LastAcked ("eventId N is beyond the last
	// eventId") is skipped like an unreachable one instead of ending Run.
	// Client.NewSubscriber fills it from the Client's addresses when nil.
	Addrs []string
	// ProbeTimeout bounds the status probe of each address (with several
	// addresses). Default 1 s; Client.NewSubscriber takes the Client's.
	ProbeTimeout time.Duration
	// Who names the subscriber; a server allows one active subscription
	// per (topic, who).
	Who string
	// From is the last eventId already consumed: delivery starts after it.
	// 0 starts at the oldest retained message. Ignored with Resume.
	From int64
	// Resume starts after the position the server stored for (Topic, Who)
	// (the server records every ack; docs/durability-and-failover.md,
	// "Stored consumer positions"),
	// so the caller keeps no progress of its own. A Who the server has no
	// position for starts per ResumeNew. Within one Run, reconnects resume
	// after LastAcked once a batch was acknowledged, so a failover to a
	// server whose stored position is older (it is written every
	// cursor.flushMs) delivers nothing twice. An original smss server
	// refuses Resume with a *ServerError.
	Resume bool
	// ResumeNew is where a Who without a stored position starts with
	// Resume: ResumeFromStart (0, the default: the oldest retained message),
	// ResumeFromEnd (-1: after the last message when it first subscribes)
	// or N > 0 (after eventId N). The start is stored at once, so a
	// consumer that stops before its first message resumes there.
	ResumeNew int64
	// BatchSize is the most messages per batch, 1..255. Default 1.
	BatchSize uint8
	// AckTimeout is how long the server waits for the ack of a batch
	// before dropping the connection (the batch is then redelivered after
	// the reconnect). 0 leaves the server's default (3 s).
	AckTimeout time.Duration
	Handler    Handler
	// AfterAck is called after every acknowledged batch with the batch's
	// last eventId, so the caller can persist progress and later pass it
	// as From (or Subscriber.Position as FromPosition).
	AfterAck func(lastEventID int64)
	// FromPosition, when set, is From with the epoch the serving node
	// placed it in (a Position a Subscriber reported): the first session
	// checks it against its node's epoch history and, if that node's
	// history parts from the one the position was taken in, resumes where
	// they part (OnHistoryChange). It overrides From. Ignored with Resume.
	FromPosition *Position
	// OnHistoryChange is called when a session resumes before LastAcked
	// because its node does not hold the history the subscriber consumed
	// (a failover dropped messages it had taken, and the new master
	// numbered its own writes over them). The change is logged either way.
	OnHistoryChange func(HistoryChange)
	// MinBackoff and MaxBackoff bound the reconnect delay, which starts at
	// MinBackoff, doubles after each failed attempt up to MaxBackoff, and
	// is jittered to between half and all of that. Defaults 1 s and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// IdleTimeout is how long a stream may be silent (the server sends an
	// alive at least every 30 s by default) before it is considered dead
	// and re-established. Default 35 s.
	IdleTimeout time.Duration
	// DialTimeout bounds a connect and the write of the request or an ack.
	// Default 5 s.
	DialTimeout time.Duration
	// MaxFrameBytes caps one batch's size on the wire. Default
	// protocol.MaxSubFrameBytes (256 MiB + 32), the largest frame any
	// server with a valid configuration sends: frames are bounded by the
	// server's limit.maxFrameBytes (16 MiB by default, at most 256 MiB),
	// except that one message goes alone however large limit.maxPayload
	// (at most 256 MiB) lets it be. A smaller value refuses such frames
	// and never gets past them.
	MaxFrameBytes int
	// DialContext opens connections; nil uses a net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	Logger      *slog.Logger
}

// Subscriber consumes a topic from one server, reconnecting with backoff
// and resuming after the last acknowledged eventId. Delivery is
// at-least-once: a batch whose ack was not sent (handler stopped, connection
// lost or ack timeout) is delivered again.
type Subscriber struct {
	addrs     []string
	cur       atomic.Int32 // index into addrs of the current or next connection
	cfg       SubscriberConfig
	lastAcked atomic.Int64
	ackedAny  atomic.Bool // a batch was acknowledged in this Subscriber (Resume)
	running   atomic.Bool
	// pos is LastAcked placed in the history of the node that handed it
	// out, checked against the next node's (position.go).
	pos positions
}

// Where a Who without a stored position starts (SubscriberConfig.ResumeNew).
const (
	ResumeFromStart int64 = 0
	ResumeFromEnd   int64 = -1
)

// NewSubscriber returns a Subscriber for the server at addr (and
// cfg.Addrs; addr may be "" when cfg.Addrs is set).
func NewSubscriber(addr string, cfg SubscriberConfig) (*Subscriber, error) {
	addrs := addrList(addr, cfg.Addrs)
	switch {
	case len(addrs) == 0:
		return nil, errors.New("smss subscriber: no address")
	case cfg.Topic == "":
		return nil, errors.New("smss subscriber: Topic is required")
	case cfg.Handler == nil:
		return nil, errors.New("smss subscriber: Handler is required")
	case cfg.From < 0:
		return nil, fmt.Errorf("smss subscriber: From %d is negative", cfg.From)
	case cfg.FromPosition != nil && cfg.FromPosition.EventID < 0:
		return nil, fmt.Errorf("smss subscriber: FromPosition eventId %d is negative", cfg.FromPosition.EventID)
	case cfg.Resume && cfg.ResumeNew < ResumeFromEnd:
		return nil, fmt.Errorf("smss subscriber: ResumeNew %d is not 0, -1 or an eventId", cfg.ResumeNew)
	}
	if cfg.Resume {
		cfg.From = 0
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 1
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = cfg.MinBackoff
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = defaultStreamIdle
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = protocol.MaxSubFrameBytes
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = defaultProbeTimeout
	}
	if cfg.DialContext == nil {
		cfg.DialContext = (&net.Dialer{}).DialContext
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Subscriber{addrs: addrs, cfg: cfg}
	s.lastAcked.Store(cfg.From)
	s.pos.pos = Position{EventID: cfg.From}
	if fp := cfg.FromPosition; fp != nil && !cfg.Resume {
		s.lastAcked.Store(fp.EventID)
		s.pos.pos, s.pos.valid = *fp, true
	}
	return s, nil
}

// NewSubscriber returns a Subscriber to c's server using c's dialer and
// logger (unless cfg sets its own). It does not use the pool: a
// subscription holds its own connection.
func (c *Client) NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.DialContext == nil {
		cfg.DialContext = c.opts.DialContext
	}
	if cfg.Logger == nil {
		cfg.Logger = c.opts.Logger
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = c.opts.DialTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = c.opts.StreamIdleTimeout
	}
	if cfg.Addrs == nil {
		cfg.Addrs = c.addrs[1:]
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = c.opts.ProbeTimeout
	}
	return NewSubscriber(c.addr, cfg)
}

// isLagging reports a server that has not yet replicated up to the
// subscriber's position; another node may have it.
func isLagging(err error) bool {
	var se *ServerError
	return errors.As(err, &se) && se.kind == kindEventIDUnavailable &&
		strings.Contains(se.Msg, "is beyond the last eventId")
}

// Addr returns the address of the current (or, between connections, the
// next) subscription.
func (s *Subscriber) Addr() string { return s.addrs[s.cur.Load()] }

// LastAcked returns the last acknowledged eventId (From before any ack).
func (s *Subscriber) LastAcked() int64 { return s.lastAcked.Load() }

// PositionOf places eventID in the history of the node of the current
// session, as Position would once it is acknowledged; ok is false when
// that node reports no history. A handler that saves its progress before
// the ack (a consumer group) saves this.
func (s *Subscriber) PositionOf(eventID int64) (Position, bool) {
	s.refreshView(context.Background(), eventID)
	return s.pos.place(eventID)
}

// refreshView reads the node's history again when placing eventID needs
// it (a slave that may have changed master since it was read); a failed
// read leaves what follows unplaced, never wrongly placed.
func (s *Subscriber) refreshView(ctx context.Context, eventID int64) {
	if !s.pos.needsView(eventID) {
		return
	}
	v, known, err := nodeHistory(ctx, s.cfg.DialContext, s.cfg.DialTimeout, s.Addr(), maxStatusReply)
	if err != nil {
		known = false
	}
	s.pos.refresh(v, known)
}

// Position returns LastAcked with the epoch its node placed it in; ok is
// false when that is not known (no ack yet on a node that reports its
// epoch history, or an original smss server).
func (s *Subscriber) Position() (Position, bool) { return s.pos.current() }

// Run subscribes and blocks until the subscription ends. It returns nil when
// the Handler stopped it, an error wrapping ErrTopicDeleted when the server
// ended it because the topic is gone, ctx's error when ctx ends, and a
// *ServerError the server gave for which reconnecting cannot help (unknown
// topic, unavailable start eventId, ...). Network failures, malformed frames,
// "subscriber already registered" and a stopping server's refusal
// (ErrServerStopping) are retried with backoff. Run must
// not be called concurrently on one Subscriber.
func (s *Subscriber) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("smss subscriber: Run already in progress")
	}
	defer s.running.Store(false)
	attempt := 0
	failedInRound := 0 // addresses of this round that failed
	var queue []int    // the rest of this round, best first
	wait := func(err error) error {
		d := backoff(s.cfg.MinBackoff, s.cfg.MaxBackoff, attempt)
		attempt++
		s.cfg.Logger.Warn("smss subscriber: reconnecting", "topic", s.cfg.Topic, "who", s.cfg.Who,
			"from", s.lastAcked.Load(), "addr", s.Addr(), "in", d, "err", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("smss subscribe %q who %q: %w", s.cfg.Topic, s.cfg.Who, ctx.Err())
		case <-t.C:
			return nil
		}
	}
	for {
		if len(s.addrs) > 1 && failedInRound == 0 {
			order, why := s.rank(ctx)
			if ctx.Err() != nil {
				return fmt.Errorf("smss subscribe %q who %q: %w", s.cfg.Topic, s.cfg.Who, ctx.Err())
			}
			if len(order) == 0 {
				err := fmt.Errorf("smss subscribe %q who %q: %w among %d addresses (%s)", s.cfg.Topic, s.cfg.Who,
					ErrNoEligibleServer, len(s.addrs), why)
				if werr := wait(err); werr != nil {
					return werr
				}
				continue
			}
			s.cur.Store(int32(order[0]))
			queue = order[1:]
		}
		addr := s.Addr()
		progressed, err := s.session(ctx, addr)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("smss subscribe %q who %q: %w", s.cfg.Topic, s.cfg.Who, ctx.Err())
		}
		err = fmt.Errorf("smss subscribe %q who %q at %s: %w", s.cfg.Topic, s.cfg.Who, addr, err)
		if !isRetryable(err) && !(len(s.addrs) > 1 && isLagging(err)) {
			return err
		}
		if progressed {
			attempt, failedInRound = 0, 0
		}
		if len(s.addrs) > 1 {
			if progressed {
				// It had delivered: roles may have changed since the
				// round was ranked (a failover); rank again now.
				s.cfg.Logger.Warn("smss subscriber: looking for a server again", "topic", s.cfg.Topic, "who", s.cfg.Who,
					"from", s.lastAcked.Load(), "err", err)
				continue
			}
			failedInRound++
			if len(queue) > 0 {
				s.cur.Store(int32(queue[0]))
				queue = queue[1:]
				s.cfg.Logger.Warn("smss subscriber: trying the next address", "topic", s.cfg.Topic, "who", s.cfg.Who,
					"from", s.lastAcked.Load(), "addr", s.Addr(), "err", err)
				continue
			}
			failedInRound = 0
		}
		if werr := wait(err); werr != nil {
			return werr
		}
	}
}

// ErrNoEligibleServer: a subscriber with several addresses found none to
// subscribe to: each was unreachable, did not answer its status in time,
// or is of an older epoch than another reports. The subscriber waits
// (the backoff) and asks again; the error, naming what each address
// answered, is logged.
var ErrNoEligibleServer = errors.New("smss subscriber: no server of the current epoch reachable")

// rank asks every address its status and returns those to subscribe to,
// best first (see SubscriberConfig.Addrs), and what each answered.
func (s *Subscriber) rank(ctx context.Context) ([]int, string) {
	_, tiers, why := rankAddrs(ctx, s.cfg.DialContext, s.addrs, s.cfg.ProbeTimeout)
	return byTier(tiers, func(int) bool { return true }), why
}

// tierExcluded is the tier of an address not to use: unreachable, or of
// an older epoch than another reports.
const tierExcluded = -1

// rankAddrs asks every address its status, in parallel within timeout, and
// returns what each answered, its tier (0 the master of the newest epoch;
// 1 a slave of it, in its in-sync set when one is known; 2 a master not
// (yet) proven of that epoch, or a slave outside the in-sync set; 3 a
// server without status; tierExcluded) and a description for logs.
func rankAddrs(ctx context.Context, dc DialFunc, addrs []string, timeout time.Duration) ([]probeResult, []int, string) {
	res := make([]probeResult, len(addrs))
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() { res[i] = probeStatus(pctx, dc, a) })
	}
	wg.Wait()
	all := make([]bool, len(res))
	for i := range all {
		all[i] = true
	}
	newest := newestEpoch(res, all)
	// The in-sync set of the newest epoch, from the master's view if it
	// has one, else any node's.
	var inSync map[string]bool
	for _, wantMaster := range []bool{true, false} {
		for _, r := range res {
			if inSync != nil || r.view == nil || r.view.Epoch != newest || len(r.view.InSync) == 0 || (r.role == roleMaster) != wantMaster {
				continue
			}
			inSync = map[string]bool{}
			for _, m := range r.view.InSync {
				inSync[m.Node] = true
			}
		}
	}
	tier := func(r probeResult) int {
		switch r.role {
		case roleUnreachable:
			return tierExcluded
		case roleUnknown:
			return 3
		}
		if r.newest() < newest {
			return tierExcluded // of an older epoch
		}
		if r.role == roleMaster {
			if r.newest() > r.epoch || r.view != nil && r.view.Fenced != "" {
				return 2 // not (yet) the master of the epoch it knows
			}
			return 0
		}
		if inSync != nil && (r.view == nil || !inSync[r.view.Node]) {
			return 2
		}
		return 1
	}
	tiers := make([]int, len(res))
	var b strings.Builder
	for i, r := range res {
		tiers[i] = tier(r)
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %v", addrs[i], r)
		if tiers[i] == tierExcluded && r.role >= roleSlave {
			b.WriteString(" [older epoch]")
		}
	}
	return res, tiers, b.String()
}

// byTier returns the indexes of the addresses not excluded for which keep
// holds, best tier first, in address order within a tier.
func byTier(tiers []int, keep func(i int) bool) []int {
	var order []int
	for want := 0; want <= 3; want++ {
		for i, t := range tiers {
			if t == want && keep(i) {
				order = append(order, i)
			}
		}
	}
	return order
}

// probeStatus asks the server at addr its status on a connection of its
// own, within ctx.
func probeStatus(ctx context.Context, dc func(context.Context, string, string) (net.Conn, error), addr string) probeResult {
	dl, _ := ctx.Deadline()
	nc, err := dial(ctx, dc, time.Until(dl), addr)
	if err != nil {
		return probeResult{role: roleUnreachable, err: err}
	}
	cn := &conn{nc: nc, r: bufio.NewReader(nc)}
	defer cn.close()
	req, err := protocol.AppendStatus(nil, traceID(ctx))
	if err != nil {
		return probeResult{role: roleUnknown, err: err}
	}
	body, err := cn.roundTrip(ctx, req, protocol.ReplyJSON, maxStatusReply, time.Until(dl), "")
	switch {
	case IsServerError(err):
		// An original server ("don't support action"), or a refusal:
		// up, role unknown.
		return probeResult{role: roleUnknown, err: err}
	case err != nil:
		return probeResult{role: roleUnreachable, err: err}
	}
	st, err := ParseNodeStatus(body)
	if err != nil {
		return probeResult{role: roleUnknown, err: err}
	}
	r := probeResult{role: roleSlave, epoch: st.Epoch, view: st.Cluster}
	if st.IsMaster() {
		r.role = roleMaster
	}
	return r
}

// maxStatusReply caps a status reply read by a subscriber's probe.
const maxStatusReply = 1 << 20

// backoff is min·2^attempt capped at max, jittered into [d/2, d].
func backoff(min, max time.Duration, attempt int) time.Duration {
	d := min
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	return half + rand.N(half+1)
}

// session runs one connection. progressed reports whether the server
// accepted the subscription (any frame arrived), which resets the backoff.
func (s *Subscriber) session(ctx context.Context, addr string) (progressed bool, err error) {
	nc, err := dial(ctx, s.cfg.DialContext, s.cfg.DialTimeout, addr)
	if err != nil {
		return false, err
	}
	var closeOnce sync.Once
	closeConn := func() { closeOnce.Do(func() { nc.Close() }) }
	defer closeConn()
	stop := context.AfterFunc(ctx, closeConn)
	defer stop()

	// The node's epoch history: to check the position against it, and to
	// place what this session acknowledges (position.go).
	v, known, err := nodeHistory(ctx, s.cfg.DialContext, s.cfg.DialTimeout, addr, maxStatusReply)
	if err != nil {
		if _, checkable := s.pos.current(); checkable {
			// Resuming unchecked could skip what a failover renumbered.
			return false, fmt.Errorf("ask the node's epoch history to check position %d: %w", s.lastAcked.Load(), err)
		}
		v, known = nodeView{}, false // nothing to check; what follows is not placed
	}
	if after, ch := s.pos.enter(addr, v, known); ch != nil {
		s.cfg.Logger.Warn("smss subscriber: the node's history parts from the one consumed; resuming where they part",
			"topic", s.cfg.Topic, "who", s.cfg.Who, "addr", addr, "lastAcked", ch.LastAcked.EventID,
			"epoch", ch.LastAcked.Epoch, "resumeAfter", after)
		s.lastAcked.Store(after)
		if s.cfg.OnHistoryChange != nil {
			s.cfg.OnHistoryChange(*ch)
		}
	}
	var req []byte
	if s.cfg.Resume && !s.ackedAny.Load() {
		req, err = protocol.AppendSubResume(nil, []byte(s.cfg.Topic), traceID(ctx), s.cfg.ResumeNew,
			s.cfg.BatchSize, s.cfg.AckTimeout, []byte(s.cfg.Who))
	} else {
		req, err = protocol.AppendSub(nil, []byte(s.cfg.Topic), traceID(ctx), s.lastAcked.Load(),
			s.cfg.BatchSize, s.cfg.AckTimeout, []byte(s.cfg.Who))
	}
	if err != nil {
		return false, permanentError{fmt.Errorf("encode request: %w", err)}
	}
	nc.SetWriteDeadline(time.Now().Add(s.cfg.DialTimeout))
	if _, err := nc.Write(req); err != nil {
		return false, fmt.Errorf("send subscribe: %w", err)
	}
	r := bufio.NewReader(nc)
	for {
		nc.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		f, err := protocol.ReadSubFrame(r, s.cfg.MaxFrameBytes)
		if err != nil {
			if errors.Is(err, protocol.ErrUnexpectedStatus) {
				err = fmt.Errorf("%w: %w", ErrProtocol, err)
			}
			return progressed, toServerError(err, s.cfg.Topic)
		}
		progressed = true
		switch f.Code {
		case protocol.StatusAlive:
			continue
		case protocol.StatusSubEnd:
			return progressed, ErrTopicDeleted
		}
		done, err := s.batch(ctx, nc, f)
		if err != nil || done {
			return progressed, err
		}
	}
}

// batch hands one data frame to the handler and acknowledges it as told.
// done means the subscription ended normally.
func (s *Subscriber) batch(ctx context.Context, nc net.Conn, f protocol.Frame) (done bool, err error) {
	msgs, err := protocol.ParseSubMessages(f.Body, f.Count)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	last := s.lastAcked.Load()
	batch := make([]Delivery, 0, len(msgs))
	for i := range msgs {
		if msgs[i].EventID <= last {
			// The server resumes strictly after the id we send; anything
			// else is a server fault, never shown twice to the handler.
			s.cfg.Logger.Warn("smss subscriber: dropped already acknowledged message",
				"topic", s.cfg.Topic, "eventId", msgs[i].EventID, "lastAcked", last)
			continue
		}
		batch = append(batch, deliveryFrom(&msgs[i]))
		last = msgs[i].EventID
	}
	action := Ack
	if len(batch) > 0 {
		action = s.cfg.Handler(ctx, batch)
	}
	if ctx.Err() != nil {
		// Stopping (for a group subscriber: the lease may be gone); the
		// handler may have given up part-way, so nothing more is acked.
		return false, ctx.Err()
	}
	var code uint16
	switch action {
	case Ack:
		code = 0
	case AckAndStop:
		code = 1
	default:
		return true, nil
	}
	nc.SetWriteDeadline(time.Now().Add(s.cfg.DialTimeout))
	if _, err := nc.Write([]byte{byte(code), byte(code >> 8)}); err != nil {
		if action == AckAndStop {
			// The handler asked to stop; only the final ack was lost, which
			// LastAcked (not advanced) shows.
			s.cfg.Logger.Warn("smss subscriber: final ack not sent", "topic", s.cfg.Topic, "err", err)
			return true, nil
		}
		return false, fmt.Errorf("send ack: %w", err)
	}
	s.lastAcked.Store(last)
	s.refreshView(ctx, last)
	s.pos.acked(last)
	if last > 0 {
		s.ackedAny.Store(true)
	}
	if s.cfg.AfterAck != nil {
		s.cfg.AfterAck(last)
	}
	return action == AckAndStop, nil
}
