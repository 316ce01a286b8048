package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/smssmq/smss/internal/rawsys"
	"github.com/smssmq/smss/protocol"
)

// Stream is a master's reader of committed binlog blocks for one slave
// (implemented by *broker.BinlogStream).
type Stream interface {
	// Next calls fn with up to max whole committed blocks (bytes valid only
	// during fn). With nothing to send it waits for the next commit up to
	// wait and returns 0 (wait <= 0 only polls), or returns ctx.Err() when
	// ctx ends.
	Next(ctx context.Context, max int, wait time.Duration, fn func(block []byte) error) (int, error)
	Close()
}

// Source opens replica streams (a master's broker).
type Source interface {
	// ReplicaStream positions a stream right after the binlog block whose
	// last eventId is after; 0 means the oldest retained block. Errors that
	// are a *protocol.BizError are sent to the slave verbatim.
	ReplicaStream(after int64) (Stream, error)
}

// SourceOf adapts a master's replica-stream opener (the method value
// (*broker.Broker).ReplicaStream, which returns its concrete stream type) to
// Source. Taking the method rather than the broker keeps this package, and so
// server, which serves the master's side of a replica stream, from linking
// the broker and its storage.
func SourceOf[S Stream](open func(after int64) (S, error)) Source { return opener[S](open) }

type opener[S Stream] func(after int64) (S, error)

func (o opener[S]) ReplicaStream(after int64) (Stream, error) {
	st, err := o(after)
	if err != nil {
		// Not st: a nil *T in a Stream would not be a nil Stream.
		return nil, err
	}
	return st, nil
}

// MasterOptions configure ServeMaster. Zero values take the defaults.
type MasterOptions struct {
	// AliveInterval is timeout.server.alive: idle time before a 201 frame
	// (default 30 s; keep it below the Go client's 35 s dead-server timer).
	AliveInterval time.Duration
	// WriteTimeout fails the stream when a frame write makes no progress
	// for this long (default 120 s, docs/protocol.md §4.3: 1 s deadlines retried for
	// 120 s). A slave that stopped reading costs only its own stream.
	WriteTimeout time.Duration
	// MaxBlocks is the most blocks read per stream call (default 512).
	MaxBlocks int
	// FlushBytes is the size at which buffered frames are written even in
	// the middle of a batch (default 256 KiB); it bounds the memory of one
	// stream apart from a single larger block.
	FlushBytes int
	// Linger bounds how often a busy stream writes. A stream is busy when
	// its last wake-up found more than one block, i.e. commits already
	// pile up between wake-ups; its next write then waits until Linger has
	// passed since the last one, so the blocks committed meanwhile travel
	// in one write. A stream that sends block by block (a lone publisher,
	// or any rate below one commit per wake-up) never waits, so only a
	// loaded master adds replication lag, at most Linger. Under load a
	// slave then gets one write per Linger instead of one per commit,
	// which on a shared box is most of its CPU (and of the master's stream
	// cost). Zero means the default (DefaultLinger); negative turns it off.
	// A confirming slave's stream never lingers on a semi-synchronous
	// master that is not degraded: every write's reply waits for it.
	Linger time.Duration
	// Logger receives the stream's start and end (nil: slog.Default()).
	Logger *slog.Logger
	// Sync receives the confirmations of a confirming slave (semi-sync
	// replication); nil discards whatever the slave sends.
	Sync *SyncTracker
	// Epoch is the master's promotion epoch, sent in commit frames to a
	// version 2 slave (nil: 0). OnEpoch receives the epoch a version 2
	// slave says it knows (an epoch record): one above Epoch tells this
	// master that a newer one exists.
	Epoch   func() uint64
	OnEpoch func(uint64)
}

// Defaults of MasterOptions.
const (
	DefaultAliveInterval      = 30 * time.Second
	DefaultMasterWriteTimeout = 120 * time.Second
	DefaultMaxBlocks          = 512
	DefaultFlushBytes         = 256 << 10
	DefaultLinger             = 5 * time.Millisecond
)

func (o *MasterOptions) setDefaults() {
	if o.AliveInterval <= 0 {
		o.AliveInterval = DefaultAliveInterval
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultMasterWriteTimeout
	}
	if o.MaxBlocks <= 0 {
		o.MaxBlocks = DefaultMaxBlocks
	}
	if o.FlushBytes <= 0 {
		o.FlushBytes = DefaultFlushBytes
	}
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// frameHeaderLen is the 10-byte 200 header plus the uint32 block length.
const frameHeaderLen = 14

// ErrSlaveGone ends a stream whose slave closed the connection.
var ErrSlaveGone = errors.New("slave closed the connection")

// errConnClosed ends a stream whose connection this process closed.
var errConnClosed = errors.New("connection closed by this server")

// ServeMaster serves a replica request (command 64, eventId after) already
// read from conn. r is the server's buffered reader of conn: bytes it holds
// beyond the request are the slave's and are discarded. ServeMaster returns
// when the stream ends: the slave went away (ErrSlaveGone), a write failed
// or stalled, the binlog could not be read (the slave then got one 400
// frame), or ctx ended.
//
// reuse is true only when the start could not be resolved, the 400 frame
// was written, and nothing else was read from conn: the caller may then
// read the next request. Otherwise the caller must close conn.
func ServeMaster(ctx context.Context, conn net.Conn, r *bufio.Reader, src Source, after int64, opts MasterOptions) (reuse bool, err error) {
	opts.setDefaults()
	log := opts.Logger.With("replicaFrom", after)
	m := &masterConn{conn: conn, sock: rawsys.NewConn(conn), opts: &opts, commitSent: -1}
	st, err := src.ReplicaStream(after)
	if err != nil {
		log.Warn("replica request refused", "err", err)
		m.out = protocol.AppendReplyError(m.out[:0], err.Error())
		if werr := m.flush(); werr != nil {
			return false, fmt.Errorf("replica refused (%v), and the 400 could not be sent: %w", err, werr)
		}
		return true, fmt.Errorf("replica refused: %w", err)
	}
	defer st.Close()
	start := time.Now()
	log.Info("replica stream started")

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.ctx = sctx
	if opts.Sync != nil {
		var sent func() int64
		if sr, ok := st.(sentReporter); ok {
			sent = sr.SentEventID
		}
		m.confirm = newConfirmState(opts.Sync, conn.RemoteAddr().String(), sent, opts.OnEpoch, log)
		if w, ok := st.(waker); ok {
			w.SetWake(m.commitMoved)
		}
	}
	stopReader, err := m.discardInput(r, cancel)
	if err != nil {
		return false, err
	}
	err = m.stream(sctx, st)
	readerErr := stopReader()
	if m.confirm != nil {
		m.confirm.close() // the reader is joined: nothing feeds it any more
	}
	if readerErr != nil && (errors.Is(err, context.Canceled) || isNetErr(err)) && ctx.Err() == nil {
		err = readerErr
	}
	attrs := []any{"blocks", m.blocks, "bytes", m.bytes, "took", time.Since(start), "err", err}
	switch {
	case errors.Is(err, ErrSlaveGone), errors.Is(err, errConnClosed), ctx.Err() != nil:
		log.Info("replica stream ended", attrs...)
	default:
		log.Warn("replica stream failed", attrs...)
	}
	return false, err
}

type masterConn struct {
	ctx     context.Context // ends when the slave went away
	conn    net.Conn
	sock    rawsys.Conn // conn's writes and reads, around the scheduler (package rawsys)
	opts    *MasterOptions
	out     []byte
	blocks  int64
	bytes   int64
	confirm *confirmState // nil: the slave's input is discarded
	// commitSent is the commit point last sent in a commit frame (-1:
	// none yet); stream goroutine only.
	commitSent int64
}

// waker is implemented by a Stream whose wait for the next commit can also
// end when another channel closes (*broker.BinlogStream): a version 2
// stream then sends a commit frame as soon as the commit point moves,
// not only with the next block.
type waker interface {
	SetWake(func() <-chan struct{})
}

// commitMoved is the channel that closes when the commit point rises past
// what this stream sent (or, before the slave's first record, when that
// record arrives); nil when the slave is not version 2 (the stream's wait
// then ends only with a commit).
func (m *masterConn) commitMoved() <-chan struct{} {
	if m.confirm == nil {
		return nil
	}
	if m.confirm.mode.Load() == confirmUndecided {
		return m.confirm.decided // the hello may say version 2
	}
	if !m.confirm.v2.Load() {
		return nil
	}
	cp, ch := m.confirm.t.commitView()
	if cp != m.commitSent {
		return closedChan
	}
	return ch
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// appendCommit appends a commit frame when the slave is version 2 and the
// commit point changed since the last one; it reports whether it did.
func (m *masterConn) appendCommit() bool {
	if m.confirm == nil || !m.confirm.v2.Load() {
		return false
	}
	cp, _ := m.confirm.t.commitView()
	if cp == m.commitSent {
		return false
	}
	var epoch uint64
	if m.opts.Epoch != nil {
		epoch = m.opts.Epoch()
	}
	m.out = protocol.AppendCommitFrame(m.out, cp, epoch)
	m.commitSent = cp
	return true
}

// sentReporter is implemented by a Stream that knows the last eventId it
// handed to the sender (*broker.BinlogStream): a slave cannot confirm more.
type sentReporter interface{ SentEventID() int64 }

// stream sends frames until an error; it never returns nil.
func (m *masterConn) stream(ctx context.Context, st Stream) error {
	send := func(block []byte) error {
		if len(block) > m.opts.FlushBytes {
			// A large block is written from the stream's buffer, not copied.
			if err := m.flush(); err != nil {
				return err
			}
			m.out = appendFrameHeader(m.out[:0], len(block))
			bufs := net.Buffers{m.out, block}
			if err := m.write(&bufs); err != nil {
				return err
			}
			m.out = m.out[:0]
		} else {
			out, err := protocol.AppendReplicaFrame(m.out, block)
			if err != nil {
				return err
			}
			m.out = out
			if len(m.out) >= m.opts.FlushBytes {
				if err := m.flush(); err != nil {
					return err
				}
			}
		}
		m.blocks++
		m.bytes += int64(len(block))
		return nil
	}
	var (
		lastWrite time.Time
		lastN     int // blocks the last wake-up found, before any lingering
		linger    *time.Timer
	)
	defer func() {
		if linger != nil {
			linger.Stop()
		}
	}()
	// The first wake-up does not wait: a stream that starts with nothing
	// to send sends an alive frame at once, not after AliveInterval. A
	// slave says its confirmation hello on its first frame (it then knows
	// the master accepted the stream), so a slave of an idle master is
	// counted, and in a cluster joins the in-sync set, within a round trip:
	// before, a cluster whose master died in its first 30 s without a
	// write had no member to elect.
	wait := time.Duration(0)
	for {
		n, err := st.Next(ctx, m.opts.MaxBlocks, wait, send)
		wait = m.opts.AliveInterval
		woke := time.Now() // when the commits being sent were seen
		// Busy is judged on what piled up by itself: counting what the
		// linger gathered would keep a stream lingering forever.
		found := n
		if n > 0 && err == nil && len(m.out) > 0 && m.opts.Linger > 0 && lastN > 1 && !m.confirm.urgent() {
			// Busy: let this write gather what commits until Linger has
			// passed since the last one (a full batch goes at once).
			if wait := m.opts.Linger - time.Since(lastWrite); wait > 0 && n < m.opts.MaxBlocks {
				if linger == nil {
					linger = time.NewTimer(wait)
				} else {
					linger.Reset(wait)
				}
				select {
				case <-linger.C:
				case <-ctx.Done():
					return ctx.Err()
				}
				n2, err2 := st.Next(ctx, m.opts.MaxBlocks-n, 0, send)
				n, err = n+n2, err2
			}
		}
		committed := err == nil && m.appendCommit()
		if len(m.out) > 0 {
			lastWrite, lastN = time.Now(), found
		}
		// Marked before the bytes leave: a slave that confirms them before
		// flush returns must find the mark to clear, or it would stay
		// and age as an unconfirmed write (a cluster's ISR shrink).
		if n > 0 && m.confirm != nil {
			m.confirm.noteSent(woke)
		}
		if ferr := m.flush(); ferr != nil {
			return ferr
		}
		if err != nil {
			if ctx.Err() != nil || isNetErr(err) {
				return err
			}
			// A reader error: the slave gets its text and the stream ends.
			m.out = protocol.AppendReplyError(m.out[:0], err.Error())
			if ferr := m.flush(); ferr != nil {
				return fmt.Errorf("%w (and the 400 could not be sent: %v)", err, ferr)
			}
			return fmt.Errorf("read binlog: %w", err)
		}
		if n == 0 && !committed {
			m.out = protocol.AppendReplyAlive(m.out[:0])
			if err := m.flush(); err != nil {
				return err
			}
		}
	}
}

func appendFrameHeader(dst []byte, blockLen int) []byte {
	dst = protocol.AppendReplyOK(dst)
	return append(dst, byte(blockLen), byte(blockLen>>8), byte(blockLen>>16), byte(blockLen>>24))
}

// flush writes the buffered frames.
func (m *masterConn) flush() error {
	if len(m.out) == 0 {
		return nil
	}
	bufs := net.Buffers{m.out}
	err := m.write(&bufs)
	m.out = m.out[:0]
	return err
}

// write writes bufs, failing only when no byte could be written for
// WriteTimeout: a slow slave that keeps reading is never cut off.
func (m *masterConn) write(bufs *net.Buffers) error {
	for {
		if err := m.conn.SetWriteDeadline(time.Now().Add(m.opts.WriteTimeout)); err != nil {
			return &netError{fmt.Errorf("set write deadline: %w", err)}
		}
		remaining := 0
		for _, b := range *bufs {
			remaining += len(b)
		}
		n, err := m.sock.WriteBuffers(bufs)
		if err == nil {
			return nil
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && n > 0 && n < int64(remaining) && (m.ctx == nil || m.ctx.Err() == nil) {
			continue
		}
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return &netError{fmt.Errorf("%w: write: %v", ErrSlaveGone, err)}
		}
		return &netError{fmt.Errorf("write to slave: %w", err)}
	}
}

// discardInput starts the goroutine that reads and drops what the slave
// sends, noticing when it goes away (then it calls gone). The returned
// stop function ends the goroutine and waits for it; it returns
// ErrSlaveGone or the read error if the slave went away first.
func (m *masterConn) discardInput(r *bufio.Reader, gone context.CancelFunc) (func() error, error) {
	if r != nil {
		if m.confirm != nil {
			// The slave's hello may have arrived with its request.
			b, _ := r.Peek(r.Buffered())
			m.confirm.feed(b)
		}
		if _, err := r.Discard(r.Buffered()); err != nil {
			return nil, err
		}
	}
	// The server's per-request deadline must not end the stream.
	if err := m.conn.SetReadDeadline(time.Time{}); err != nil {
		return nil, &netError{fmt.Errorf("clear read deadline: %w", err)}
	}
	done := make(chan error, 1)
	stopping := make(chan struct{})
	go func() {
		var buf [512]byte
		for {
			n, err := m.sock.Read(buf[:])
			if n > 0 && m.confirm != nil {
				m.confirm.feed(buf[:n])
			}
			if err == nil {
				continue
			}
			select {
			case <-stopping:
				if errors.Is(err, os.ErrDeadlineExceeded) {
					done <- nil // our own stop
					return
				}
			default:
			}
			switch {
			case errors.Is(err, io.EOF):
				err = ErrSlaveGone
			case errors.Is(err, net.ErrClosed):
				err = errConnClosed // by the server (shutdown), not by the slave
			default:
				err = fmt.Errorf("%w: %v", ErrSlaveGone, err)
			}
			gone()
			// Unblock a frame write stuck on a dead peer.
			_ = m.conn.SetWriteDeadline(time.Now())
			done <- err
			return
		}
	}()
	return func() error {
		close(stopping)
		_ = m.conn.SetReadDeadline(time.Now())
		return <-done
	}, nil
}

// netError marks failures of the connection (as opposed to the binlog).
type netError struct{ err error }

func (e *netError) Error() string { return e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

func isNetErr(err error) bool {
	var ne *netError
	return errors.As(err, &ne)
}
