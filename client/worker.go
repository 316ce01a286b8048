package client

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/protocol"
)

// QueueHandler processes one message of a work queue. Its return value is
// the message's outcome:
//
//   - nil acks it: it is never delivered again (once the server confirmed
//     the ack; an ack lost with its connection may be delivered again).
//   - an error naks it: it is delivered again after the group's backoff,
//     or after the delay of NakDelay(err, d).
//   - Term(err) dead-letters it at once (or drops it when the group has no
//     dead-letter topic), whatever its delivery count.
//
// ctx ends when the Worker is stopped or the message's stream is lost (it
// is then delivered again, possibly to another consumer); a handler should
// give up then. Long work calls m.InProgress to restart its ack deadline.
type QueueHandler func(ctx context.Context, m *QueueMessage) error

// QueueMessage is a message delivered to one consumer of a queue group.
type QueueMessage struct {
	Message
	Topic, Group string
	// EventID is the message's id in its topic.
	EventID int64
	// Attempt is the delivery's number: 1 the first time, 2 after one
	// nak or passed ack wait, and so on.
	Attempt int
	// Time is when the server appended the message to the topic.
	Time time.Time

	s       *workSession
	settled atomic.Bool
}

// ErrStreamClosed is returned by QueueMessage.InProgress when the message's
// consumer stream is over (lost, or the Worker stopping): the server will
// deliver it again, so there is no deadline left to extend.
var ErrStreamClosed = errors.New("smss worker: the message's consumer stream is closed")

// ErrSettled is returned by QueueMessage.InProgress after the handler
// returned: the message's outcome is already sent.
var ErrSettled = errors.New("smss worker: the message's outcome is already sent")

// InProgress tells the server that the message is still being worked on,
// restarting its ack deadline (the group's ack wait) so that it is not
// delivered to another consumer meanwhile.
func (m *QueueMessage) InProgress() error {
	if m.settled.Load() {
		return ErrSettled
	}
	if !m.s.send(protocol.QueueOutcome{Op: protocol.QueueOpProgress, EventID: m.EventID}) {
		return ErrStreamClosed
	}
	return nil
}

// outcomeError is a handler error that names its outcome (NakDelay, Term).
type outcomeError struct {
	op    QueueOp
	delay time.Duration
	err   error
}

func (e *outcomeError) Error() string {
	what := "term"
	if e.op == QueueOpNak {
		what = "nak after " + e.delay.String()
	}
	if e.err == nil {
		return what
	}
	return what + ": " + e.err.Error()
}

func (e *outcomeError) Unwrap() error { return e.err }

// NakDelay returned by a QueueHandler naks the message with a redelivery
// delay of d instead of the group's backoff (at most about 49 days, the
// protocol's limit; under a millisecond counts as one). err, which may be
// nil, is the reason, kept for errors.Is and logs.
func NakDelay(err error, d time.Duration) error {
	return &outcomeError{op: QueueOpNak, delay: max(d, time.Millisecond), err: err}
}

// Term returned by a QueueHandler (also wrapped) dead-letters the message
// at once: it is never delivered to the group again. err, which may be
// nil, is the reason.
func Term(err error) error { return &outcomeError{op: QueueOpTerm, err: err} }

// outcomeOf maps a handler's result to the outcome unit sent for it.
func outcomeOf(eventID int64, err error) protocol.QueueOutcome {
	if err == nil {
		return protocol.QueueOutcome{Op: protocol.QueueOpAck, EventID: eventID}
	}
	var oe *outcomeError
	if errors.As(err, &oe) {
		if oe.op == QueueOpTerm {
			return protocol.QueueOutcome{Op: protocol.QueueOpTerm, EventID: eventID}
		}
		ms := min(oe.delay.Milliseconds(), math.MaxUint32)
		return protocol.QueueOutcome{Op: protocol.QueueOpNak, EventID: eventID, DelayMs: uint32(max(ms, 1))}
	}
	// DelayMs 0: the group's backoff for the delivery count.
	return protocol.QueueOutcome{Op: protocol.QueueOpNak, EventID: eventID}
}

// ErrQueueDeleted: the server ended a consumer stream (255) that the
// Worker had not asked to stop: the group or its topic was deleted.
var ErrQueueDeleted = errors.New("smss worker: consumer stream ended: queue group or topic deleted")

// WorkerConfig configures a Worker. Topic, Group and Handler are required;
// other zero fields take the defaults named below.
type WorkerConfig struct {
	Topic, Group string
	// Consumer names this consumer in the group's info (letters, digits,
	// '.', '_', '-'). Default: the host name, the process id and a random
	// suffix.
	Consumer string
	Handler  QueueHandler
	// Concurrency is how many messages are handled at once, each by its
	// own call of Handler. Default 1.
	Concurrency int
	// MaxInFlight is how many unacknowledged messages the server hands
	// this consumer at once (the group's MaxInFlight caps it). Default
	// Concurrency: every message delivered is being handled, so none waits
	// here while its ack deadline runs. More hides the round trip between
	// an ack and the next delivery, at the price of messages waiting for a
	// free handler; at least Concurrency.
	MaxInFlight int
	// Addrs are further servers of the same master/slave group or cluster,
	// besides the address given to NewWorker. Only the master serves
	// queue groups: before each round of connections the worker asks every
	// address its status (in parallel, within ProbeTimeout) and tries the
	// master of the newest epoch first, then servers without the status
	// command (an original smss); slaves, nodes of an older epoch and
	// unreachable ones are not tried. A server answering "just master
	// can ..." or "fenced: ..." is skipped for the next one. After the
	// master's stream is lost the worker asks again at once (a failover
	// may have moved the master). Client.NewWorker fills it from the
	// Client's addresses when nil.
	Addrs []string
	// ProbeTimeout bounds the status probe of each address (with several
	// addresses). Default 1 s; Client.NewWorker takes the Client's.
	ProbeTimeout time.Duration
	// MinBackoff and MaxBackoff bound the reconnect delay, as for a
	// Subscriber. Defaults 1 s and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// IdleTimeout is how long a stream may be silent (the server sends an
	// alive at least every 30 s by default) before it is re-established.
	// Default 35 s.
	IdleTimeout time.Duration
	// DialTimeout bounds a connect and each write. Default 5 s.
	DialTimeout time.Duration
	// StopTimeout bounds a stop once ctx ends: the wait for running
	// handlers (their outcomes are still sent), then for the server to
	// confirm the outcomes sent and end the stream. Default 10 s.
	StopTimeout time.Duration
	// MaxFrameBytes caps one frame of messages. Default
	// protocol.MaxSubFrameBytes.
	MaxFrameBytes int
	// OnConfirm is called, on the goroutine reading the stream, for each
	// outcome the server confirmed it recorded durably. A message whose ack
	// was confirmed with QueueResultDone is never delivered again; an ack
	// never confirmed (the stream was lost first) may be. It must not
	// block.
	OnConfirm func(QueueConfirm)
	// DialContext opens connections; nil uses a net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	Logger      *slog.Logger
}

// Worker is one competing consumer of a queue group: it holds a consumer
// stream to the master, runs Handler for each message delivered to it
// (Concurrency at a time) and reports each outcome. Delivery is
// at-least-once: a message whose ack the server did not confirm may be
// delivered again, here or to another consumer of the group.
type Worker struct {
	addrs   []string
	cur     atomic.Int32
	cfg     WorkerConfig
	running atomic.Bool
}

// NewWorker returns a Worker for the server at addr (and cfg.Addrs; addr
// may be "" when cfg.Addrs is set).
func NewWorker(addr string, cfg WorkerConfig) (*Worker, error) {
	addrs := addrList(addr, cfg.Addrs)
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = cfg.Concurrency
	}
	if cfg.Consumer == "" {
		cfg.Consumer = defaultConsumer()
	}
	switch {
	case len(addrs) == 0:
		return nil, errors.New("smss worker: no address")
	case cfg.Topic == "":
		return nil, errors.New("smss worker: Topic is required")
	case cfg.Handler == nil:
		return nil, errors.New("smss worker: Handler is required")
	case cfg.MaxInFlight < cfg.Concurrency || cfg.MaxInFlight > protocol.MaxQueueMaxInFlight:
		return nil, fmt.Errorf("smss worker: MaxInFlight %d out of range %d (Concurrency)..%d", cfg.MaxInFlight, cfg.Concurrency, protocol.MaxQueueMaxInFlight)
	}
	if err := protocol.ValidateQueueName("group", cfg.Group); err != nil {
		return nil, fmt.Errorf("smss worker: %w", err)
	}
	if err := protocol.ValidateQueueName("consumer", cfg.Consumer); err != nil {
		return nil, fmt.Errorf("smss worker: %w", err)
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = defaultStreamIdle
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 10 * time.Second
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
	return &Worker{addrs: addrs, cfg: cfg}, nil
}

// NewWorker returns a Worker of c's servers using c's dialer (so its TLS
// and login), logger and timeouts unless cfg sets its own. It does not
// use the pool: a consumer stream holds its own connection.
func (c *Client) NewWorker(cfg WorkerConfig) (*Worker, error) {
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
	return NewWorker(c.addr, cfg)
}

// Work consumes the queue group of topic with handler until ctx ends (see
// Worker.Run): cfg's Topic, Group and Handler are set from the arguments.
func (c *Client) Work(ctx context.Context, topic, group string, cfg WorkerConfig, handler QueueHandler) error {
	cfg.Topic, cfg.Group, cfg.Handler = topic, group, handler
	w, err := c.NewWorker(cfg)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// defaultConsumer names a consumer after its host and process, with a
// random suffix so that two Workers of one process differ.
func defaultConsumer() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, host)
	if host == "" {
		host = "worker"
	}
	var b [3]byte
	rand.Read(b[:])
	name := host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	if len(name) > protocol.MaxQueueNameLen {
		name = name[len(name)-protocol.MaxQueueNameLen:]
	}
	return name
}

// Addr returns the address of the current (or, between connections, the
// next) consumer stream.
func (w *Worker) Addr() string { return w.addrs[w.cur.Load()] }

// Consumer returns the consumer's name.
func (w *Worker) Consumer() string { return w.cfg.Consumer }

func (w *Worker) errorf(format string, args ...any) error {
	return fmt.Errorf("smss work %q group %q: "+format, append([]any{w.cfg.Topic, w.cfg.Group}, args...)...)
}

// Run consumes until ctx ends and returns ctx's error then, after a clean
// stop: handlers still running are waited for (within StopTimeout their
// outcomes are still sent), messages delivered but not handed to a
// handler are nak'd for redelivery, the stream is stopped and the server's
// confirmations are read until it ends it (within StopTimeout). Run
// returns only once every Handler call returned. It returns an error
// wrapping ErrQueueDeleted when the server ended the stream because the
// group or its topic is gone, ErrNoQueues from a server without work
// queues, and the server's refusal of the consume request (unknown group,
// permission denied, ...). Network failures, malformed frames, a failed
// stream and a slave's or fenced master's refusal are retried with
// backoff. Run must not be called concurrently on one Worker.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("smss worker: Run already in progress")
	}
	defer w.running.Store(false)
	attempt, failedInRound := 0, 0
	var queue []int
	wait := func(err error) error {
		d := backoff(w.cfg.MinBackoff, w.cfg.MaxBackoff, attempt)
		attempt++
		w.cfg.Logger.Warn("smss worker: reconnecting", "topic", w.cfg.Topic, "group", w.cfg.Group,
			"consumer", w.cfg.Consumer, "addr", w.Addr(), "in", d, "err", err)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return w.errorf("%w", ctx.Err())
		case <-t.C:
			return nil
		}
	}
	for {
		if len(w.addrs) > 1 && failedInRound == 0 {
			order, why := w.rank(ctx)
			if ctx.Err() != nil {
				return w.errorf("%w", ctx.Err())
			}
			if len(order) == 0 {
				err := w.errorf("%w among %d addresses (%s)", ErrNoMaster, len(w.addrs), why)
				if werr := wait(err); werr != nil {
					return werr
				}
				continue
			}
			w.cur.Store(int32(order[0]))
			queue = order[1:]
		}
		addr := w.Addr()
		progressed, err := w.session(ctx, addr)
		if ctx.Err() != nil {
			if err != nil {
				w.cfg.Logger.Warn("smss worker: stop not confirmed", "topic", w.cfg.Topic, "group", w.cfg.Group, "addr", addr, "err", err)
			}
			return w.errorf("%w", ctx.Err())
		}
		if errors.Is(err, ErrNotSupported) {
			err = fmt.Errorf("%w (%v)", ErrNoQueues, err)
		}
		err = w.errorf("at %s: %w", addr, err)
		moveOn := workerMoveOn(err)
		if !moveOn && !workerRetryable(err, progressed) {
			return err
		}
		if progressed {
			attempt, failedInRound = 0, 0
		}
		if len(w.addrs) > 1 {
			if progressed {
				// The stream ran: roles may have changed since the round
				// was ranked (a failover); rank again now.
				w.cfg.Logger.Warn("smss worker: looking for the master again", "topic", w.cfg.Topic, "group", w.cfg.Group, "err", err)
				continue
			}
			failedInRound++
			if len(queue) > 0 {
				w.cur.Store(int32(queue[0]))
				queue = queue[1:]
				w.cfg.Logger.Warn("smss worker: trying the next address", "topic", w.cfg.Topic, "group", w.cfg.Group,
					"addr", w.Addr(), "err", err)
				continue
			}
			failedInRound = 0
		}
		if werr := wait(err); werr != nil {
			return werr
		}
	}
}

// workerMoveOn reports a refusal by a server that is not (or may no longer
// be) the master: another address, or the same one later, may serve.
func workerMoveOn(err error) bool {
	var se *ServerError
	return errors.As(err, &se) && (se.kind == kindNotMaster || se.kind == kindFenced)
}

// workerRetryable reports whether reconnecting may cure a stream failure:
// network and protocol errors, and a 400 that ended a stream which had
// run (the stream failed, not the request), and a server's refusal because
// it is stopping; not the refusal of the consume request itself, nor the
// end of the group.
func workerRetryable(err error, progressed bool) bool {
	var pe permanentError
	switch {
	case errors.Is(err, ErrQueueDeleted), errors.Is(err, ErrNotSupported),
		errors.As(err, &pe), errors.Is(err, protocol.ErrReplyTooLarge):
		return false
	case errors.Is(err, ErrServerStopping):
		return true
	case IsServerError(err):
		return progressed && !errors.Is(err, ErrPermissionDenied) && !errors.Is(err, ErrAuthFailed)
	}
	return true
}

// rank returns the addresses that may be the master, best first: masters
// of the newest epoch, then servers without status (see
// WorkerConfig.Addrs), and what each answered.
func (w *Worker) rank(ctx context.Context) ([]int, string) {
	res, tiers, why := rankAddrs(ctx, w.cfg.DialContext, w.addrs, w.cfg.ProbeTimeout)
	return byTier(tiers, func(i int) bool { return res[i].role == roleMaster || res[i].role == roleUnknown }), why
}

// workSession is one consumer stream.
type workSession struct {
	w  *Worker
	nc net.Conn
	// ctx is the handlers' context: it ends with Run's or with the stream.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	cond     *sync.Cond      // handlers wait on it for messages
	queue    []*QueueMessage // delivered, not yet handed to a handler
	stopping bool            // handlers take no more messages
	out      []byte          // outcome units not yet written
	closed   bool            // no more outcomes: stop queued or stream over
	stopSent bool            // the stop unit is queued (the 255 then ends it cleanly)

	flush        chan struct{} // wakes the writer
	ended        chan struct{} // closed when the stream is over
	handlersDone chan struct{} // closed when every handler goroutine returned

	dlMu         sync.Mutex
	stopDeadline time.Time // zero until the stop began
}

func (w *Worker) session(ctx context.Context, addr string) (progressed bool, err error) {
	nc, err := dial(ctx, w.cfg.DialContext, w.cfg.DialTimeout, addr)
	if err != nil {
		return false, err
	}
	req, err := protocol.AppendQueueRequest(nil, protocol.CmdQueueConsume, w.cfg.Topic,
		protocol.QueueConsume{Group: w.cfg.Group, Consumer: w.cfg.Consumer, MaxInFlight: w.cfg.MaxInFlight})
	if err != nil {
		nc.Close()
		return false, permanentError{fmt.Errorf("encode request: %w", err)}
	}
	nc.SetWriteDeadline(time.Now().Add(w.cfg.DialTimeout))
	if _, err := nc.Write(req); err != nil {
		nc.Close()
		return false, fmt.Errorf("send consume: %w", err)
	}
	s := &workSession{w: w, nc: nc, flush: make(chan struct{}, 1), ended: make(chan struct{}),
		handlersDone: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	s.ctx, s.cancel = context.WithCancel(ctx)
	var handlers, writer sync.WaitGroup
	for range w.cfg.Concurrency {
		handlers.Go(s.handleLoop)
	}
	go func() {
		handlers.Wait()
		close(s.handlersDone)
	}()
	writer.Go(s.writeLoop)
	stopOnCancel := context.AfterFunc(ctx, s.stop)

	progressed, err = s.read()

	stopOnCancel()
	s.mu.Lock()
	s.closed, s.stopping = true, true
	s.queue = nil
	s.cond.Broadcast()
	s.mu.Unlock()
	s.cancel()
	close(s.ended)
	nc.Close()
	writer.Wait()
	// Handlers of a lost stream are told (ctx) and waited for, so that no
	// more than Concurrency run at once across reconnects.
	<-s.handlersDone
	return progressed, err
}

// read reads the stream until it ends: nil after the 255 that answers a
// stop, else why it ended.
func (s *workSession) read() (progressed bool, err error) {
	w := s.w
	r := bufio.NewReader(s.nc)
	for {
		s.dlMu.Lock()
		dl := time.Now().Add(w.cfg.IdleTimeout)
		if !s.stopDeadline.IsZero() && s.stopDeadline.Before(dl) {
			dl = s.stopDeadline
		}
		s.nc.SetReadDeadline(dl)
		s.dlMu.Unlock()
		f, err := protocol.ReadQueueFrame(r, w.cfg.MaxFrameBytes)
		if err != nil {
			if errors.Is(err, protocol.ErrUnexpectedStatus) || errors.Is(err, protocol.ErrQueueFrame) {
				err = fmt.Errorf("%w: %w", ErrProtocol, err)
			}
			return progressed, toServerError(err, w.cfg.Topic)
		}
		progressed = true
		switch f.Code {
		case protocol.StatusAlive:
		case protocol.StatusSubEnd:
			s.mu.Lock()
			clean := s.stopSent
			s.mu.Unlock()
			if clean {
				return true, nil
			}
			return true, ErrQueueDeleted
		case protocol.StatusQueueConfirm:
			cs, err := protocol.ParseQueueConfirms(f.Body)
			if err != nil {
				return true, fmt.Errorf("%w: %w", ErrProtocol, err)
			}
			if w.cfg.OnConfirm != nil {
				for _, c := range cs {
					w.cfg.OnConfirm(c)
				}
			}
		case protocol.StatusQueueMessages:
			ms, err := protocol.ParseQueueMessages(f.Body, f.Count)
			if err != nil {
				return true, fmt.Errorf("%w: %w", ErrProtocol, err)
			}
			batch := make([]*QueueMessage, 0, len(ms))
			for i := range ms {
				m, err := s.message(&ms[i])
				if err != nil {
					return true, fmt.Errorf("%w: eventId %d: %w", ErrProtocol, ms[i].EventID, err)
				}
				batch = append(batch, m)
			}
			s.mu.Lock()
			if !s.stopping {
				s.queue = append(s.queue, batch...)
				s.cond.Broadcast()
			}
			// While stopping, messages that still arrive are not handled:
			// the stop hands them back (queued ones are nak'd before it).
			s.mu.Unlock()
		}
	}
}

func (s *workSession) message(m *protocol.QueueMessage) (*QueueMessage, error) {
	rec, _, err := protocol.ParseRecord(m.Record)
	if err != nil {
		return nil, err
	}
	qm := &QueueMessage{Topic: s.w.cfg.Topic, Group: s.w.cfg.Group, EventID: m.EventID, Attempt: int(m.Attempt),
		Time: time.UnixMilli(m.Ts), Message: Message{Body: rec.Body}, s: s}
	if len(rec.Headers) > 0 {
		qm.Headers = make([]Header, len(rec.Headers))
		for i, h := range rec.Headers {
			qm.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return qm, nil
}

// next returns the next message to handle, nil once the session stops
// handing them out.
func (s *workSession) next() *QueueMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) == 0 && !s.stopping {
		s.cond.Wait()
	}
	// ctx ends before stop runs (it is started by the same cancellation):
	// a handler that returned because of it must not take another message.
	if s.stopping || s.ctx.Err() != nil {
		return nil
	}
	m := s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	return m
}

func (s *workSession) handleLoop() {
	for {
		m := s.next()
		if m == nil {
			return
		}
		err := s.w.cfg.Handler(s.ctx, m)
		m.settled.Store(true)
		// nil acks even when ctx ended meanwhile: the handler says the
		// work is done, and an ack is what keeps it from being redone.
		s.send(outcomeOf(m.EventID, err))
	}
}

// send queues an outcome unit for the writer; false when the stream takes
// no more (stopped or over).
func (s *workSession) send(o protocol.QueueOutcome) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.out = protocol.AppendQueueOutcome(s.out, o)
	s.mu.Unlock()
	select {
	case s.flush <- struct{}{}:
	default:
	}
	return true
}

// writeLoop writes the queued outcomes, as many as have accumulated in one
// write, until the stream is over.
func (s *workSession) writeLoop() {
	for {
		select {
		case <-s.flush:
		case <-s.ended:
			return
		}
		s.mu.Lock()
		buf := s.out
		s.out = nil
		s.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		s.nc.SetWriteDeadline(time.Now().Add(s.w.cfg.DialTimeout))
		if _, err := s.nc.Write(buf); err != nil {
			// The reader fails on the closed connection and ends the
			// session; what was not written is delivered again.
			s.w.cfg.Logger.Warn("smss worker: send outcomes", "topic", s.w.cfg.Topic, "group", s.w.cfg.Group, "err", err)
			s.nc.Close()
			return
		}
	}
}

// stop runs when Run's context ends: no more messages go to handlers, the
// running ones are waited for (within StopTimeout) so their outcomes go
// out, messages not handed out are nak'd to be redelivered at once, and
// the stop unit follows. The reader then reads the remaining confirmations
// until the server's 255, within the same StopTimeout.
func (s *workSession) stop() {
	deadline := time.Now().Add(s.w.cfg.StopTimeout)
	s.dlMu.Lock()
	s.stopDeadline = deadline
	s.nc.SetReadDeadline(deadline)
	s.dlMu.Unlock()
	s.mu.Lock()
	s.stopping = true
	s.cond.Broadcast()
	s.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-s.handlersDone:
	case <-s.ended:
		return
	case <-t.C:
		s.w.cfg.Logger.Warn("smss worker: handlers still running at stop; their outcomes are not sent",
			"topic", s.w.cfg.Topic, "group", s.w.cfg.Group)
	}
	s.mu.Lock()
	if !s.closed {
		for _, m := range s.queue {
			// An explicit short delay, not the group's backoff: the
			// message was never worked on.
			s.out = protocol.AppendQueueOutcome(s.out, protocol.QueueOutcome{Op: protocol.QueueOpNak, EventID: m.EventID, DelayMs: 1})
		}
		s.queue = nil
		s.out = protocol.AppendQueueOutcome(s.out, protocol.QueueOutcome{Op: protocol.QueueOpStop})
		s.closed, s.stopSent = true, true
	}
	s.mu.Unlock()
	select {
	case s.flush <- struct{}{}:
	default:
	}
}
