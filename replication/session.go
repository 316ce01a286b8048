package replication

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/internal/rawsys"
	"github.com/smssmq/smss/protocol"
)

const (
	readBufferSize = 256 << 10
	// A batch is what the apply loop applies at once (stream); readAhead
	// of them bound a catching-up session's read-ahead.
	maxBatchBlocks = 1024
	maxBatchBytes  = 1 << 20
	readAhead      = 4
	// legacyNotFound is the original master's text for an eventId that
	// does not start a block (docs/protocol.md §4.3, §10 item 11).
	legacyNotFound = "EOF"
)

// deadlineConn re-arms the read deadline before every read, so a timeout
// means "nothing arrived for that long", whatever the frame sizes.
type deadlineConn struct {
	c       net.Conn
	timeout time.Duration
	sock    rawsys.Conn // c's reads, around the scheduler (package rawsys); zero: through c
}

func (d *deadlineConn) Read(p []byte) (int, error) {
	if err := d.c.SetReadDeadline(time.Now().Add(d.timeout)); err != nil {
		return 0, err
	}
	if d.sock.Raw() {
		return d.sock.Read(p)
	}
	return d.c.Read(p)
}

// session runs one connection to the master. progressed reports whether
// the master sent at least one frame (then the backoff starts over).
func (s *Slave) session(ctx context.Context) (progressed bool, err error) {
	s.setState(StateConnecting)
	s.v2 = false
	if s.opts.Probe != nil {
		pctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout+s.opts.RequestTimeout)
		version, epoch, err := s.opts.Probe(pctx)
		cancel()
		if err != nil {
			return false, fmt.Errorf("ask the master's status: %w", err)
		}
		if err := s.checkEpoch(epoch); err != nil {
			return false, err
		}
		s.v2 = version >= protocol.ReplicaStreamV2
	}
	dctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	conn, err := s.opts.DialContext(dctx, "tcp", s.opts.MasterAddr)
	cancel()
	if err != nil {
		return false, fmt.Errorf("connect to master: %w", err)
	}
	defer conn.Close()
	// Blocked reads and writes end with ctx.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	dc := &deadlineConn{c: conn, timeout: s.opts.RequestTimeout, sock: rawsys.NewConn(conn)}
	br := bufio.NewReaderSize(dc, readBufferSize)

	if s.needSync {
		if err := s.topicSync(ctx, conn, br); err != nil {
			return false, err
		}
		s.needSync = false
	}
	from := s.pos
	if s.legacyPos {
		from = s.posFirst
	}
	// Divergence check (diverge.go): ask from the block before the last
	// local one and compare the master's first frame with it; the stream
	// then simply goes on after it.
	var check *localBlock
	if s.verifies() && !s.unverifiable {
		lb, ok, err := lastLocalBlock(s.t)
		if err != nil {
			return false, stopped("read the last local binlog block: %v", err)
		}
		if ok && lb.last == s.pos {
			check, from = &lb, lb.anchor
		}
	}
	if check != nil {
		// A master whose last eventId lies in the block before the last
		// local one has nothing to send after the anchor: it would answer
		// only with its next write or alive (diverge.go, probe).
		if last, ok := s.masterLast(ctx); ok && check.anchor <= last && last < check.first {
			conn.Close()
			v := verdict{says: fmt.Sprintf("has nothing after eventId %d (its last eventId is %d)", check.anchor, last)}
			return false, s.search(ctx, *check, v)
		}
	}
	req, err := protocol.AppendReplica(nil, from)
	if err != nil {
		return false, err
	}
	if err := writeAll(conn, req, s.opts.RequestTimeout); err != nil {
		return false, fmt.Errorf("send replica request: %w", err)
	}
	if check != nil {
		dc.timeout = s.opts.SilenceTimeout
		v, err := s.firstFrame(br, check)
		if err != nil {
			return false, err
		}
		if !v.match {
			conn.Close()
			if s.cannotVerify(check, v) {
				s.unverifiable = true
				return false, fmt.Errorf("%w: the last local block cannot be checked", errRetryNow)
			}
			return false, s.search(ctx, *check, v)
		}
		from = s.pos
	}
	s.setState(StateStreaming, "after", from)
	now := time.Now()
	s.update(func(st *Status) { st.ConnectedSince, st.NextRetry, st.RetryIn = now, time.Time{}, 0 })
	dc.timeout = s.opts.SilenceTimeout
	return s.stream(ctx, conn, br, from)
}

func writeAll(conn net.Conn, b []byte, timeout time.Duration) error {
	if err := conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err := conn.Write(b)
	return err
}

// topicSync is the first-start topic sync of docs/protocol.md §4.2.
func (s *Slave) topicSync(ctx context.Context, conn net.Conn, br *bufio.Reader) error {
	s.setState(StateSyncing, "eventId", s.opts.StartEvent)
	req, err := protocol.AppendValidList(nil, nil, s.opts.StartEvent)
	if err != nil {
		return err
	}
	if err := writeAll(conn, req, s.opts.RequestTimeout); err != nil {
		return fmt.Errorf("send valid list: %w", err)
	}
	body, err := protocol.ReadReply(br, protocol.ReplyJSON, s.opts.MaxValidList)
	if err != nil {
		var be *protocol.BizError
		if errors.As(err, &be) || errors.Is(err, protocol.ErrReplyTooLarge) || errors.Is(err, protocol.ErrUnexpectedStatus) {
			return stopped("the master refused the topic sync (valid list %d): %v", s.opts.StartEvent, err)
		}
		return fmt.Errorf("topic sync: %w", err)
	}
	var topics []protocol.TopicInfo
	if len(body) > 0 {
		if err := json.Unmarshal(body, &topics); err != nil {
			return stopped("the master's valid list is not a JSON topic array: %v", err)
		}
	}
	inserted := 0
	for _, t := range topics {
		if err := protocol.ValidateExistingTopicName([]byte(t.Name)); err != nil {
			s.log.Error("topic sync: the master lists a topic name whose directory would leave the topic root; not created", "topic", t.Name, "err", err)
			continue
		}
		ok, err := s.t.SyncTopic(ctx, t)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return stopped("topic sync of %q: %v", t.Name, err)
		}
		if ok {
			inserted++
		}
	}
	s.log.Info("topic sync done", "eventId", s.opts.StartEvent, "listed", len(topics), "inserted", inserted)
	return nil
}

// batch is a run of received blocks for the apply loop, or the end of the
// stream (err set, after the blocks it holds).
type batch struct {
	buf  []byte
	ends []int
	err  error
	// last: the read-ahead's final batch, after which the apply loop
	// reads the connection again (readFrames).
	last bool
}

// stream applies the master's frames, confirming each apply.
//
// Live, the loop reads a batch (whatever the socket has, up to the caps),
// applies it and confirms it on this goroutine: what arrives meanwhile
// waits in the socket's receive buffer, which the kernel fills, not a
// goroutine. A reader goroutine handing each batch over cost a scheduler
// hand-off per batch: in semi-synchronous replication the slave's share of
// every write's round trip, and about a fifth of the slave's CPU per
// message (BENCHMARKS.md).
//
// Catching up (a read fills a batch to its caps: more is waiting), a
// read-ahead goroutine reads the following batches while this one applies,
// so that copying a backlog out of the socket overlaps the writes (catch-
// up about 1.15x as fast), and returns at the first batch that is not full:
// the connection is this goroutine's to read again. Either way the reads
// and the applies keep the stream's order, and the helper is joined before
// stream returns.
func (s *Slave) stream(ctx context.Context, conn net.Conn, br *bufio.Reader, from int64) (progressed bool, err error) {
	quit := make(chan struct{})
	var endOnce sync.Once
	end := func() {
		endOnce.Do(func() {
			close(quit)
			conn.Close() // ends a read in progress, here or in the read-ahead
		})
	}
	stop := context.AfterFunc(ctx, end)
	cs := newConfirmSender(conn, s.instance, s.opts.Fsynced, s.opts.RequestTimeout, s.log)
	if s.v2 {
		cs.v2, cs.epoch = true, s.knownEpoch()
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		cs.run(quit)
	}()
	var ra readAheader
	defer func() {
		stop()
		end()
		if ra.running {
			<-ra.done
		}
		<-sent
	}()

	own := &batch{}
	first := true
	for {
		var b *batch
		if !ra.running {
			b = own
			if full := s.readBatch(br, b, first); full {
				ra.start(s, br, quit)
			}
			first = false
		} else {
			select {
			case b = <-ra.items:
			case <-ctx.Done():
				return progressed, ctx.Err()
			}
			if b.last || b.err != nil {
				<-ra.done // it returned: the reads are this goroutine's again
				ra.running = false
			}
		}
		if ctx.Err() != nil {
			return progressed, ctx.Err()
		}
		if len(b.ends) > 0 || b.err == nil {
			progressed = true
		}
		err := s.apply(ctx, b)
		if len(b.ends) > 0 || b.err == nil {
			// What the writer committed, even before an apply error: the
			// applied blocks are a prefix, and s.have ends with it. The
			// first post (a block or an alive: the master accepted the
			// stream) sends the hello; a lone 400 sends nothing.
			cs.post(s.have)
			if !s.v2 && s.opts.OnCommit != nil {
				s.opts.OnCommit(s.have) // no commit frames: serve what it has
			}
		}
		if err != nil {
			return progressed, err
		}
		if b.err != nil {
			return progressed, s.classify(b.err, from)
		}
		if b != own {
			ra.free <- b
		}
	}
}

// classify turns the end of the frame stream into the session's error.
func (s *Slave) classify(err error, from int64) error {
	var be *protocol.BizError
	if errors.As(err, &be) {
		if be.Msg == legacyNotFound && !s.legacyPos && s.posFirst != s.pos && from == s.pos {
			// An original master matches only a block's first eventId.
			s.legacyPos = true
			s.log.Warn("the master does not resume after a block's last eventId (original smss); asking with the block's first eventId",
				"last", s.pos, "first", s.posFirst)
			return fmt.Errorf("%w: master answered %q for %d", errRetryNow, be.Msg, from)
		}
		return stopped("the master refused replication from eventId %d: %s", from, be.Msg)
	}
	return err
}

// apply applies the blocks of b in order.
func (s *Slave) apply(ctx context.Context, b *batch) error {
	if len(b.ends) == 0 {
		return nil
	}
	s.raws = s.raws[:0]
	start := 0
	for _, end := range b.ends {
		s.raws = append(s.raws, b.buf[start:end])
		start = end
	}
	var (
		applied int
		err     error
	)
	if ba, ok := s.t.(BatchApplier); ok {
		var last int64
		last, applied, err = ba.ApplyReplicatedBatch(ctx, s.raws)
		if applied > 0 {
			s.applied(last, s.raws[applied-1])
		}
	} else {
		for _, raw := range s.raws {
			var last int64
			if last, err = s.t.ApplyReplicated(ctx, raw); err != nil {
				break
			}
			s.applied(last, raw)
			applied++
		}
	}
	if applied > 0 {
		s.publishPos(int64(applied))
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	raw := s.raws[min(applied, len(s.raws)-1)]
	if errors.Is(err, binlog.ErrBlockOrder) {
		return stopped("block with eventId %d does not follow the slave's last eventId %d: %v", blockFirstID(raw), s.pos, err)
	}
	return stopped("apply the block with eventId %d (after %d): %v", blockFirstID(raw), s.pos, err)
}

func (s *Slave) applied(last int64, raw []byte) {
	s.pos, s.posFirst, s.have = last, blockFirstID(raw), last
	s.unverifiable = false // the applied block has a local predecessor now
	if s.opts.OnApply != nil {
		s.opts.OnApply(last)
	}
}

func (s *Slave) publishPos(n int64) {
	now := time.Now()
	pos := s.pos
	s.update(func(st *Status) {
		st.LastEventID = pos
		st.Blocks += n
		st.LastFrameAt = now
		if n > 0 {
			st.LastBlockAt = now
		}
	})
}

// readBatch reads frames into b until it holds maxBatchBlocks blocks or
// maxBatchBytes (full: more may be waiting), the socket has given all it
// had, or a read fails (b.err). Alive and commit frames, which readFrame
// handles itself, make no batch of their own but the session's first
// (first: its apply sends the hello): reading goes on until a block comes.
func (s *Slave) readBatch(br *bufio.Reader, b *batch, first bool) (full bool) {
	if cap(b.buf) > 4*maxBatchBytes {
		b.buf = nil // do not keep a huge block's buffer
	}
	b.buf, b.ends, b.err, b.last = b.buf[:0], b.ends[:0], nil, false
	for {
		if b.err = s.readFrame(br, b); b.err != nil {
			return false
		}
		if len(b.ends) >= maxBatchBlocks || len(b.buf) >= maxBatchBytes {
			return true
		}
		if br.Buffered() == 0 && (len(b.ends) > 0 || first) {
			return false
		}
	}
}

// readAheader is a session's read-ahead (stream): its goroutine runs while
// the session catches up, and its batches, with their buffers, serve every
// catch-up of the session (a master that lingers makes a slave catch up a
// little at each of its writes).
type readAheader struct {
	items, free chan *batch
	done        chan struct{} // closed when the running goroutine returned
	running     bool          // apply loop only
}

// start runs the read-ahead goroutine on br, from the frame after the
// apply loop's last read; every batch is in free.
func (ra *readAheader) start(s *Slave, br *bufio.Reader, quit <-chan struct{}) {
	if ra.free == nil {
		ra.items, ra.free = make(chan *batch, readAhead), make(chan *batch, readAhead)
		for range readAhead {
			ra.free <- &batch{}
		}
	}
	ra.done, ra.running = make(chan struct{}), true
	s.readAheads.Add(1)
	go func() {
		defer close(ra.done)
		s.readFrames(br, ra.free, ra.items, quit)
	}()
}

// readFrames reads batches from br ahead of the apply loop until one is not
// full (the session caught up: marked last), the stream ends (the batch
// carries the error), or quit is closed; it then returns, and the apply
// loop reads br again.
func (s *Slave) readFrames(br *bufio.Reader, free <-chan *batch, items chan<- *batch, quit <-chan struct{}) {
	for {
		var b *batch
		select {
		case b = <-free:
		case <-quit:
			return
		}
		full := s.readBatch(br, b, false)
		b.last = !full && b.err == nil
		select {
		case items <- b:
		case <-quit:
			return
		}
		if b.last || b.err != nil {
			return
		}
	}
}

// readFrame reads one frame; a block is appended to b.
func (s *Slave) readFrame(br *bufio.Reader, b *batch) error {
	var h protocol.RespHeader
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return s.readErr("frame header", err)
	}
	switch code := h.Code(); code {
	case protocol.StatusOK:
		var lb [4]byte
		if _, err := io.ReadFull(br, lb[:]); err != nil {
			return s.readErr("block length", unexpectedEOF(err))
		}
		n := binary.LittleEndian.Uint32(lb[:])
		if uint64(n) > uint64(s.opts.MaxBlock) {
			return stopped("the master sent a block of %d bytes, over the cap of %d", n, s.opts.MaxBlock)
		}
		off := len(b.buf)
		b.buf = grow(b.buf, int(n))
		if _, err := io.ReadFull(br, b.buf[off:]); err != nil {
			b.buf = b.buf[:off]
			return s.readErr("block", unexpectedEOF(err))
		}
		b.ends = append(b.ends, len(b.buf))
		return nil
	case protocol.StatusAlive:
		now := time.Now()
		s.update(func(st *Status) { st.LastFrameAt = now })
		return nil
	case protocol.StatusCommit:
		if !s.v2 {
			return stopped("the master sent a commit frame (header % x) on a stream of version 0", h[:])
		}
		var body [protocol.CommitFrameLen]byte
		if _, err := io.ReadFull(br, body[:]); err != nil {
			return s.readErr("commit frame", unexpectedEOF(err))
		}
		cp, epoch, err := protocol.DecodeCommitFrame(body[:])
		if err != nil {
			return stopped("%v", err)
		}
		if err := s.checkEpoch(epoch); err != nil {
			return err
		}
		now := time.Now()
		s.update(func(st *Status) { st.LastFrameAt, st.CommitPoint = now, cp })
		if s.opts.OnCommit != nil {
			s.opts.OnCommit(cp)
		}
		return nil
	case protocol.StatusError:
		n := int(h.ErrLen())
		msg := make([]byte, n)
		if _, err := io.ReadFull(br, msg); err != nil {
			return s.readErr("error text", unexpectedEOF(err))
		}
		if n == 0 {
			msg = []byte("unknown err")
		}
		return protocol.NewBizError(string(msg))
	default:
		return stopped("the master sent a frame with status %d (header % x): not a replication stream", code, h[:])
	}
}

func (s *Slave) readErr(what string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("the master sent nothing for %v (the silence timeout; an idle master sends an alive every %v): %w",
			s.opts.SilenceTimeout, s.opts.AliveInterval, err)
	}
	return fmt.Errorf("read %s from master: %w", what, err)
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// grow extends b by n bytes.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), max(2*cap(b), len(b)+n, 64<<10))
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}
