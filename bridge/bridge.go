package bridge

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/protocol"
)

// ErrFatal is wrapped by the error Run returns when the bridge must stop
// rather than retry: a block it cannot decode, a master whose history
// differs from what the target holds, a target it cannot resume from.
var ErrFatal = errors.New("smss-bridge stopped")

func fatalf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFatal, fmt.Sprintf(format, args...))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Options configure a Bridge beyond Config.
type Options struct {
	Logger *slog.Logger
	// Dial opens a connection to an smss server, including TLS and login
	// (client.SecureDialer); nil dials plain TCP.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Bridge follows an smss binlog as a replica reader and mirrors the
// selected topics into a Target.
type Bridge struct {
	cfg    Config
	filter *Filter
	target Target
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	log    *slog.Logger
	m      *metrics

	next int // index in cfg.Master to try first
	// epoch is the highest promotion epoch a version 3 master reported
	// (status, commit frames): a master below it is an old one that a
	// failover replaced, and its commit point says nothing of the history
	// that is kept.
	epoch atomic.Uint64

	metricsAddr atomic.Value // string
}

// New prepares a bridge; nothing connects before Run.
func New(cfg Config, target Target, opts Options) (*Bridge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f, err := NewFilter(cfg.Topics, cfg.Exclude)
	if err != nil {
		return nil, err
	}
	b := &Bridge{cfg: cfg, filter: f, target: target, dial: opts.Dial, log: opts.Logger, m: newMetrics()}
	if b.log == nil {
		b.log = slog.Default()
	}
	if b.dial == nil {
		b.dial = (&net.Dialer{}).DialContext
	}
	if lu, ok := target.(loggerUser); ok {
		lu.useLogger(b.log)
	}
	return b, nil
}

// loggerUser is a target that logs through the bridge's logger.
type loggerUser interface{ useLogger(*slog.Logger) }

// Stats returns a snapshot of the progress.
func (b *Bridge) Stats() Stats { return b.m.stats() }

// MetricsAddr is the address /metrics listens on once Run started ("" if off).
func (b *Bridge) MetricsAddr() string {
	s, _ := b.metricsAddr.Load().(string)
	return s
}

// Run mirrors until ctx ends (it returns nil) or a fatal error (wrapping
// ErrFatal). Unreachable masters and targets are retried forever with
// capped exponential backoff.
func (b *Bridge) Run(ctx context.Context) error {
	if b.cfg.Metrics.Addr != "" {
		addr, err := serveMetrics(ctx, b.cfg.Metrics.Addr, b.m.reg, b.log)
		if err != nil {
			return fmt.Errorf("metrics.addr %s: %w", b.cfg.Metrics.Addr, err)
		}
		b.metricsAddr.Store(addr)
		b.log.Info("metrics listening", "addr", addr)
	}
	if iv := b.cfg.Metrics.LogIntervalSec; iv > 0 {
		go b.logProgress(ctx, time.Duration(iv)*time.Second)
	}
	if iv := b.cfg.Source.StatusIntervalMs; iv > 0 {
		go b.pollMaster(ctx, ms(iv))
	}
	b.log.Info("smss-bridge starting", "master", b.cfg.Master, "target", b.target.Describe(),
		"topics", b.cfg.Topics, "exclude", b.cfg.Exclude)
	minB, maxB := ms(b.cfg.Source.MinBackoffMs), ms(b.cfg.Source.MaxBackoffMs)
	delay := time.Duration(0)
	for {
		progressed, kind, err := b.session(ctx)
		if ctx.Err() != nil {
			b.log.Info("smss-bridge stopped", "safe", b.m.vSafe.Load())
			return nil
		}
		if errors.Is(err, ErrFatal) {
			b.log.Error("SMSS-BRIDGE STOPPED: fix the cause and restart", "err", err, "safe", b.m.vSafe.Load())
			return err
		}
		b.m.err(kind)
		if kind == ErrKindMaster && !progressed && len(b.cfg.Master) > 1 {
			// This address may be a slave now, or gone: try the next.
			b.next = (b.next + 1) % len(b.cfg.Master)
		}
		if progressed {
			delay = minB
		} else {
			delay = min(max(2*delay, minB), maxB)
		}
		var be *protocol.BizError
		if errors.As(err, &be) {
			// The master refuses the resume position: after a failover to a
			// slave that is behind the target, this lasts until an operator
			// acts (or the new master reaches the position).
			b.log.Error("the master refuses to resume where the target is; retrying", "err", err, "retryIn", delay, "safe", b.m.vSafe.Load())
		} else {
			b.log.Warn("session ended; retrying", "side", kind, "err", err, "retryIn", delay, "safe", b.m.vSafe.Load())
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			b.log.Info("smss-bridge stopped", "safe", b.m.vSafe.Load())
			return nil
		case <-t.C:
		}
	}
}

func (b *Bridge) logProgress(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastAt := b.m.nMirrored.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s := b.m.stats()
			rate := float64(s.Mirrored-last) / now.Sub(lastAt).Seconds()
			last, lastAt = s.Mirrored, now
			b.log.Info("bridge progress", "mirrored", s.Mirrored, "msgsPerSec", int64(rate), "safe", s.Safe,
				"received", s.Received, "masterLast", s.MasterLast, "lagEvents", s.LagEvents, "lagSeconds", s.LagSeconds,
				"commitPoint", s.CommitPoint, "heldBlocks", s.HeldBlocks, "heldBytes", s.HeldBytes,
				"skipped", s.Skipped, "masterErrors", s.MasterErrs, "targetErrors", s.TargetErrs)
		}
	}
}

// pollMaster asks the master for its last eventId (status, command 34) so
// that the lag counts what the bridge has not even received yet. A server
// without the command (an original smss) is asked no more.
func (b *Bridge) pollMaster(ctx context.Context, every time.Duration) {
	cl, err := client.Dial(ctx, "", client.Options{Addrs: b.cfg.Master, DialContext: b.dial,
		Logger: b.log.With("component", "status"), MaxConns: 1, MaxRetries: -1, HealthCheckInterval: -1})
	if err != nil {
		b.log.Warn("cannot ask the master's status; lag counts received blocks only", "err", err)
		return
	}
	defer cl.Close()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, every)
		st, err := cl.Status(rctx)
		cancel()
		switch {
		case errors.Is(err, client.ErrNoStatus):
			b.log.Info("the master does not answer status; lag counts received blocks only")
			return
		case err == nil:
			b.m.setHead(st.LastEventID)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// resume is where a session starts and what it must skip.
type resume struct {
	after    int64              // replica request: a block's last eventId
	lanes    map[string]int64   // lane -> last eventId it holds
	maxLane  int64              // max of lanes
	present  map[int64]struct{} // eventIds > after the target already holds
	expected map[int64]uint32   // block first eventId -> CRC the target recorded
}

// planResume turns the lanes' last messages into a resume position. Every
// message a lane holds above after carried a safe position <= after, so
// it was in flight together with all mirrored messages between after and
// itself: at most maxInFlight+2 of them. Reading that many from the end of
// each lane finds every message above after.
func planResume(marks map[string]Mark, from int64) resume {
	r := resume{lanes: map[string]int64{}, present: map[int64]struct{}{}, expected: map[int64]uint32{}}
	if len(marks) == 0 {
		r.after = from
		return r
	}
	for lane, m := range marks {
		r.lanes[lane] = m.EventID
		r.maxLane = max(r.maxLane, m.EventID)
		r.after = max(r.after, m.Safe)
		r.expected[m.BlockFirst] = m.BlockCRC
	}
	// Blocks that end at or before after are never seen again; their
	// fingerprints cannot be checked.
	for f := range r.expected {
		if f <= r.after {
			delete(r.expected, f)
		}
	}
	return r
}

// entry is one message (or a block without mirrored messages) in flight,
// in binlog order.
type entry struct {
	ack       Ack
	body      int
	blockEnd  int64 // set on the last entry of a block: the block's last eventId
	writeTime int64
}

// session runs one connection to the master and one to the target. kind
// says which side failed.
func (b *Bridge) session(ctx context.Context) (progressed bool, kind string, err error) {
	b.m.nSessions.Add(1)
	b.m.sessions.Inc()
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	if err := b.target.Open(sctx); err != nil {
		return false, ErrKindTarget, fmt.Errorf("open %s: %w", b.target.Describe(), err)
	}
	defer b.target.Close()
	marks, err := b.target.Marks(sctx)
	if err != nil {
		if errors.Is(err, ErrTargetLost) || errors.Is(err, ErrForeign) || errors.Is(err, ErrBadHeader) {
			if !(errors.Is(err, ErrTargetLost) && b.cfg.From > 0) {
				return false, ErrKindTarget, fatalf("read the resume position from %s: %v", b.target.Describe(), err)
			}
			b.log.Warn("the target holds no mirrored message to resume from; starting after 'from'", "from", b.cfg.From, "err", err)
			marks = nil
		} else {
			return false, ErrKindTarget, fmt.Errorf("read the resume position from %s: %w", b.target.Describe(), err)
		}
	}
	r := planResume(marks, b.cfg.From)
	for lane, last := range r.lanes {
		if last <= r.after {
			continue
		}
		ids, err := b.target.Tail(sctx, lane, r.after, tailLimit(b.maxInFlight()))
		if err != nil {
			if errors.Is(err, ErrForeign) || errors.Is(err, ErrBadHeader) {
				return false, ErrKindTarget, fatalf("read the tail of %s: %v", lane, err)
			}
			return false, ErrKindTarget, fmt.Errorf("read the tail of %s: %w", lane, err)
		}
		for _, id := range ids {
			r.present[id] = struct{}{}
		}
	}
	b.m.setSafe(r.after)
	b.log.Info("resuming", "after", r.after, "lanes", len(r.lanes), "lastMirrored", r.maxLane, "alreadyHeld", len(r.present))

	conn, br, addr, held, err := b.openReplica(sctx, r.after)
	if err != nil {
		return false, ErrKindMaster, err
	}
	defer conn.Close()
	context.AfterFunc(sctx, func() { conn.Close() })
	defer b.m.setHeld(0, 0)

	// Frames are read on their own goroutine so the network overlaps the
	// publishing.
	frames := make(chan frame, 256)
	readErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(frames)
		readErr <- b.readFrames(sctx, conn, br, held, frames)
	}()

	q := make(chan entry, b.maxInFlight())
	ackErr := make(chan error, 1)
	var acked atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		ackErr <- b.acks(sctx, cancel, q, &acked)
	}()

	var procErr error
	procKind := ErrKindMaster
	safeInit := r.after
	prev := r.after
	// Everything up to the last message the target holds was at or below
	// a commit point when it was mirrored, so the blocks a resume replays
	// up to there are not held: a session that ended with blocks held
	// (source.maxHeldBytes) must not spend its next window on them.
	h := holder{on: held, point: r.maxLane, max: b.cfg.Source.MaxHeldBytes}
	b.m.setCommit(0) // until this session's master sends one
	for f := range frames {
		if procKind, procErr = b.frame(sctx, f, &h, &r, &prev, q); procErr != nil {
			break
		}
	}
	close(q)
	if procErr != nil {
		cancel(procErr)
	}
	if len(h.blocks) > 0 {
		// Nothing of them reached the target or the safe position: the
		// next session (or process) streams them again.
		b.log.Info("the session ends with blocks held above the master's commit point; they are read again",
			"heldBlocks", len(h.blocks), "heldBytes", h.bytes, "commitPoint", b.m.vCommit.Load(), "from", h.blocks[0].blk.EventID)
	}
	// The acks of what was sent are awaited (bounded by the ack timeout)
	// so that the next session starts from as far as possible.
	aerr := <-ackErr
	cancel(errSessionOver)
	wg.Wait()
	rerr := <-readErr
	progressed = acked.Load() > 0 || b.m.vSafe.Load() > safeInit
	switch {
	case procErr != nil:
		return progressed, procKind, procErr
	case aerr != nil:
		return progressed, ErrKindTarget, aerr
	case rerr != nil:
		var be *protocol.BizError
		if errors.As(rerr, &be) {
			return progressed, ErrKindMaster, fmt.Errorf("master %s refused replication after eventId %d: %w", addr, r.after, rerr)
		}
		return progressed, ErrKindMaster, fmt.Errorf("master %s: %w", addr, rerr)
	}
	return progressed, ErrKindMaster, fmt.Errorf("master %s ended the stream", addr)
}

var errSessionOver = errors.New("session over")

// tailLimit is how many messages are read back from the end of a lane: the
// in-flight bound (see planResume) with room for a smaller setting than a
// previous run had.
func tailLimit(maxInFlight int) int { return 2*maxInFlight + 16 }

func (b *Bridge) maxInFlight() int {
	if b.cfg.NATS.URL != "" {
		return b.cfg.NATS.MaxInFlight
	}
	return b.cfg.Kafka.MaxInFlight
}

func (b *Bridge) ackTimeout() time.Duration {
	if b.cfg.NATS.URL != "" {
		return ms(b.cfg.NATS.AckTimeoutMs)
	}
	return ms(b.cfg.Kafka.AckTimeoutMs)
}

// acks waits for the target's acks in binlog order and advances the safe
// position. It drains q even after ctx ended so the sender never blocks.
func (b *Bridge) acks(ctx context.Context, stop context.CancelCauseFunc, q <-chan entry, acked *atomic.Int64) error {
	var first error
	n, body := 0, 0
	flush := func() {
		if n > 0 {
			b.m.acked(n, body)
			acked.Add(int64(n))
			n, body = 0, 0
		}
	}
	for {
		var e entry
		var ok bool
		select {
		case e, ok = <-q:
		default:
			flush()
			b.m.oldestUnacked.Store(0)
			e, ok = <-q
		}
		if !ok {
			flush()
			b.m.oldestUnacked.Store(0)
			return first
		}
		if first != nil {
			continue
		}
		b.m.oldestUnacked.Store(e.writeTime)
		if e.ack != nil {
			// Under load most acks have arrived by the time their turn
			// comes: those are taken without a timer (a context with a
			// deadline per message was a measurable part of the bridge's
			// own CPU).
			done, err := ackReady(e.ack)
			if !done {
				// The ack wait outlives a cancelled session a little: what
				// is already sent should be counted before the next resume.
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.ackTimeout())
				err = e.ack.Wait(wctx)
				cancel()
			}
			if err != nil {
				first = fmt.Errorf("publish to %s: %w", b.target.Describe(), err)
				stop(first)
				continue
			}
			n++
			body += e.body
		}
		if e.blockEnd != 0 {
			b.m.setSafe(e.blockEnd)
		}
		if n >= 256 {
			flush()
		}
	}
}

// openReplica connects to the first master address that answers and sends
// the replica request. held reports a version 3 master (status "replica"
// 3, read-committed delivery): the session then says a reader's hello
// after the first frame, gets commit frames and holds every block above
// the commit point. Against any other master nothing is ever sent after
// the request. Either way the bridge is a reader, never a confirming
// slave.
func (b *Bridge) openReplica(ctx context.Context, after int64) (conn net.Conn, br *bufio.Reader, addr string, held bool, err error) {
	var errs []error
	for i := range b.cfg.Master {
		addr := b.cfg.Master[(b.next+i)%len(b.cfg.Master)]
		held, err := b.probe(ctx, addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, ms(b.cfg.Source.ConnectTimeoutMs))
		conn, err := b.dial(dctx, "tcp", addr)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		req, err := protocol.AppendReplica(nil, after)
		if err != nil {
			conn.Close()
			return nil, nil, "", false, err
		}
		conn.SetWriteDeadline(time.Now().Add(ms(b.cfg.Source.ConnectTimeoutMs)))
		if _, err := conn.Write(req); err != nil {
			conn.Close()
			errs = append(errs, fmt.Errorf("%s: send replica request: %w", addr, err))
			continue
		}
		conn.SetWriteDeadline(time.Time{})
		b.next = (b.next + i) % len(b.cfg.Master)
		b.log.Info("following", "master", addr, "after", after, "heldAtCommitPoint", held)
		return conn, bufio.NewReaderSize(&deadlineReader{c: conn, d: ms(b.cfg.Source.SilenceMs)}, 256<<10), addr, held, nil
	}
	b.next = (b.next + 1) % len(b.cfg.Master)
	return nil, nil, "", false, fmt.Errorf("no master reachable: %w", errors.Join(errs...))
}

// probe asks addr's status (command 34) on a short connection of its own
// before a session, as a slave does (docs/protocol.md §4.6): held is true
// for a version 3 master. An original smss, which has no status command,
// is version 0 and no error. A version 3 master whose epoch is below one
// the bridge saw is refused: a failover replaced it.
func (b *Bridge) probe(ctx context.Context, addr string) (held bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, 2*ms(b.cfg.Source.ConnectTimeoutMs))
	defer cancel()
	cl, err := client.Dial(pctx, "", client.Options{Addrs: []string{addr}, DialContext: b.dial,
		Logger: b.log.With("component", "probe"), MaxConns: 1, MaxRetries: -1, HealthCheckInterval: -1})
	if err != nil {
		return false, fmt.Errorf("ask its status: %w", err)
	}
	defer cl.Close()
	st, err := cl.Status(pctx)
	switch {
	case errors.Is(err, client.ErrNoStatus):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("ask its status: %w", err)
	}
	switch {
	case st.Replica >= protocol.ReplicaStreamV3:
	case st.Replica >= protocol.ReplicaStreamV2:
		b.log.Warn("the master sends commit frames to slaves only (an earlier smss): what it refused as not confirmed may be mirrored",
			"master", addr, "replica", st.Replica)
		return false, nil
	default:
		return false, nil
	}
	if err := b.checkEpoch(st.Epoch); err != nil {
		return false, err
	}
	return true, nil
}

// checkEpoch learns epoch from a version 3 master, or refuses it when it
// is below the highest the bridge saw.
func (b *Bridge) checkEpoch(epoch uint64) error {
	for {
		known := b.epoch.Load()
		if epoch < known {
			return fmt.Errorf("the master's epoch %d is below epoch %d that another master reported: it is an old master, not following it", epoch, known)
		}
		if epoch == known || b.epoch.CompareAndSwap(known, epoch) {
			return nil
		}
	}
}

// deadlineReader re-arms the read deadline before each read: a timeout
// means the master was silent that long.
type deadlineReader struct {
	c net.Conn
	d time.Duration
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	r.c.SetReadDeadline(time.Now().Add(r.d))
	return r.c.Read(p)
}

// frame is one unit of the replica stream for the session: a binlog block,
// or (isCommit) the commit point of a commit frame.
type frame struct {
	raw      []byte
	isCommit bool
	commit   int64
}

// readFrames reads the stream into out. With held (a version 3 master)
// it reads commit frames too, and once the first frame arrived, i.e. the
// master accepted the request (one that refused it with a 400 reads the
// next request from the connection), it sends the reader's hello and the
// epoch it knows: 40 bytes, all the bridge ever sends after the request.
func (b *Bridge) readFrames(ctx context.Context, conn net.Conn, br *bufio.Reader, held bool, out chan<- frame) error {
	read := protocol.ReadReplicaFrame
	if held {
		read = protocol.ReadReplicaFrameV2
	}
	hello := held
	for {
		f, err := read(br, b.cfg.Source.MaxBlock)
		if err != nil {
			if errors.Is(err, protocol.ErrUnexpectedStatus) || errors.Is(err, protocol.ErrReplyTooLarge) {
				return fatalf("the master's replication stream is not valid: %v", err)
			}
			return err
		}
		if hello {
			hello = false
			rec := protocol.AppendConfirm(nil, protocol.Confirm{Kind: protocol.ConfirmHello, Reader: true})
			rec = protocol.AppendConfirm(rec, protocol.Confirm{Kind: protocol.ConfirmEpoch, EventID: int64(min(b.epoch.Load(), 1<<62))})
			conn.SetWriteDeadline(time.Now().Add(ms(b.cfg.Source.ConnectTimeoutMs)))
			if _, err := conn.Write(rec); err != nil {
				return fmt.Errorf("send the reader's hello: %w", err)
			}
		}
		var fr frame
		switch f.Code {
		case protocol.StatusAlive:
			continue
		case protocol.StatusCommit:
			cp, epoch, err := protocol.DecodeCommitFrame(f.Body)
			if err != nil {
				return fatalf("the master's replication stream is not valid: %v", err)
			}
			if err := b.checkEpoch(epoch); err != nil {
				return err
			}
			fr = frame{isCommit: true, commit: cp}
		default:
			fr = frame{raw: f.Body}
		}
		select {
		case out <- fr:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// holder keeps the blocks of a session above the master's commit point
// (read-committed delivery): a block is mirrored only once a commit frame
// says a failover keeps it, and in binlog order, so one held block holds
// every block after it. Held blocks are in memory only; the target's
// safe position never passes them, so a session that ends (or a bridge
// that is killed) reads them again from the master.
type holder struct {
	on     bool  // a version 3 master: hold
	point  int64 // blocks up to here are mirrored: the last commit point received, at first the target's last message
	blocks []decoded
	bytes  int
	max    int // source.maxHeldBytes
	// overflow: a block was dropped because the held bytes would pass
	// max; the session ends once what it holds is mirrored.
	overflow bool
}

// errHeldOverflow ends a session whose held blocks reached
// source.maxHeldBytes once they are mirrored; the next one reads the
// blocks it dropped again.
var errHeldOverflow = errors.New("the blocks held above the master's commit point reached source.maxHeldBytes; resuming to read the rest again")

// frame handles one unit of the stream.
func (b *Bridge) frame(ctx context.Context, f frame, h *holder, r *resume, prev *int64, q chan<- entry) (string, error) {
	if f.isCommit {
		h.point = max(h.point, f.commit)
		b.m.setCommit(f.commit)
		for len(h.blocks) > 0 && h.blocks[0].last <= h.point {
			d := h.blocks[0]
			h.blocks[0] = decoded{}
			h.blocks = h.blocks[1:]
			h.bytes -= len(d.raw)
			if kind, err := b.mirror(ctx, d, r, q); err != nil {
				return kind, err
			}
		}
		b.m.setHeld(len(h.blocks), h.bytes)
		if h.overflow && len(h.blocks) == 0 {
			return ErrKindMaster, errHeldOverflow
		}
		return "", nil
	}
	d, err := b.decode(f.raw, prev)
	if err != nil {
		return ErrKindMaster, err
	}
	switch {
	case !h.on || len(h.blocks) == 0 && d.last <= h.point:
		return b.mirror(ctx, d, r, q)
	case h.overflow || h.bytes+len(d.raw) > h.max:
		if !h.overflow {
			b.log.Warn("the blocks held above the master's commit point reached source.maxHeldBytes; keeping no more until the point passes them",
				"heldBlocks", len(h.blocks), "heldBytes", h.bytes, "commitPoint", b.m.vCommit.Load(), "droppedFrom", d.blk.EventID)
		}
		h.overflow = true
	default:
		h.blocks = append(h.blocks, d)
		h.bytes += len(d.raw)
		b.m.setHeld(len(h.blocks), h.bytes)
	}
	return "", nil
}

// decoded is a binlog block of the stream, decoded and checked to follow
// the previous one.
type decoded struct {
	raw  []byte
	blk  binlog.Block
	last int64
}

func (b *Bridge) decode(raw []byte, prev *int64) (decoded, error) {
	blk, last, n, err := binlog.DecodeSpan(raw)
	if err == nil && n != len(raw) {
		err = fmt.Errorf("%d bytes after the block", len(raw)-n)
	}
	if err != nil {
		return decoded{}, fatalf("undecodable binlog block after eventId %d: %v", *prev, err)
	}
	if *prev != 0 && blk.EventID != *prev+1 {
		return decoded{}, fatalf("the master sent the block of eventId %d after eventId %d: a gap or a repeat in its binlog", blk.EventID, *prev)
	}
	*prev = last
	b.m.setReceived(last)
	b.m.blocks.WithLabelValues(metricCmd(blk.Cmd)).Inc()
	return decoded{raw: raw, blk: blk, last: last}, nil
}

// mirror handles one binlog block: it checks it against what the target
// holds and queues its mirrored messages.
func (b *Bridge) mirror(ctx context.Context, d decoded, r *resume, q chan<- entry) (string, error) {
	blk, last, raw := d.blk, d.last, d.raw
	crc := crc32.Checksum(raw, castagnoli)
	if len(r.expected) > 0 {
		for f, want := range r.expected {
			if f < blk.EventID || f > last {
				continue
			}
			if f != blk.EventID || want != crc {
				return ErrKindMaster, fatalf("the master's history differs from the target's: the target holds a block that starts at eventId %d (crc %08x), the master has eventIds %d..%d in a block with crc %08x; "+
					"after a failover the promoted slave lacked messages the bridge had already mirrored", f, want, blk.EventID, last, crc)
			}
			delete(r.expected, f)
		}
	}
	topic := string(blk.Topic)
	var records []byte
	var delayID int64
	switch blk.Cmd {
	case binlog.CmdPub:
		records = blk.Payload
	case binlog.CmdDelayApply:
		records = blk.Payload[binlog.DelayPrefixLen:]
		delayID = int64(binary.LittleEndian.Uint64(blk.Payload[8:binlog.DelayPrefixLen]))
	case binlog.CmdCreate:
		b.log.Info("topic created on the master", "topic", topic, "eventId", blk.EventID, "mirrored", b.filter.Match(topic))
		if b.cfg.MirrorCreate && b.filter.Match(topic) {
			if err := b.target.TopicCreated(ctx, topic); err != nil {
				return ErrKindTarget, fmt.Errorf("create %q on %s: %w", topic, b.target.Describe(), err)
			}
		}
	case binlog.CmdDelete:
		b.log.Info("topic deleted on the master", "topic", topic, "eventId", blk.EventID, "mirrored", b.filter.Match(topic))
	case binlog.CmdDelay:
		// Mirrored when applied (block 101), never when scheduled.
	}
	endQueued := false
	if records != nil && b.filter.Match(topic) {
		id := blk.EventID
		safe := b.m.vSafe.Load()
		for len(records) > 0 {
			rec, size, err := protocol.ParseRecord(records)
			if err != nil {
				return ErrKindMaster, fatalf("undecodable record %d of the block of eventId %d: %v", id, blk.EventID, err)
			}
			records = records[size:]
			m := &Message{Topic: topic, EventID: id, Timestamp: blk.Timestamp, DelayEventID: delayID,
				Block:   Mark{EventID: id, BlockFirst: blk.EventID, BlockCRC: crc, Safe: min(safe, blk.EventID-1)},
				Headers: rec.Headers, Body: rec.Body}
			id++
			if m.EventID <= r.maxLane {
				if _, ok := r.present[m.EventID]; ok {
					b.m.skip()
					continue
				}
			}
			ack, err := b.target.Publish(ctx, m)
			if err != nil {
				return ErrKindTarget, fmt.Errorf("publish eventId %d to %s: %w", m.EventID, b.target.Describe(), err)
			}
			e := entry{ack: ack, body: len(m.Body), writeTime: blk.WriteTime}
			if len(records) == 0 {
				e.blockEnd, endQueued = last, true
			}
			if err := enqueue(ctx, q, e); err != nil {
				return ErrKindTarget, err
			}
		}
	}
	if !endQueued {
		// Nothing of this block is in flight (or the last message was
		// skipped): a marker advances the safe position in order.
		if err := enqueue(ctx, q, entry{blockEnd: last, writeTime: blk.WriteTime}); err != nil {
			return ErrKindTarget, err
		}
	}
	return "", nil
}

func enqueue(ctx context.Context, q chan<- entry, e entry) error {
	select {
	case q <- e:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// metricCmd is a block's command as a Prometheus label value (delay_apply,
// not delay-apply).
func metricCmd(c uint8) string {
	if c == binlog.CmdDelayApply {
		return "delay_apply"
	}
	return binlog.CmdName(c)
}
