package replication

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
)

// Target is the slave's broker (*broker.Broker opened with Slave set).
type Target interface {
	// ApplyReplicated appends one block through the writer, byte for byte,
	// and returns its last eventId.
	ApplyReplicated(ctx context.Context, raw []byte) (int64, error)
	// SyncTopic inserts a topic listed by the master's valid list unless
	// one of that name exists.
	SyncTopic(ctx context.Context, m protocol.TopicInfo) (bool, error)
	// NewestBinlogBlock is the newest block of the slave's own binlog,
	// ok=false when it holds none: its last eventId is the position.
	NewestBinlogBlock() (blk binlog.Block, ok bool, err error)
	// BinlogBlockAt returns the local binlog block holding eventId id (the
	// last block whose first eventId is <= id, or the oldest block), and
	// NextBinlogBlockFirst the first eventId of the block after the one
	// starting with first: the divergence check reads the local binlog
	// block by block through them (diverge.go).
	BinlogBlockAt(id int64) (segment.Block, bool, error)
	NextBinlogBlockFirst(first int64) (int64, bool, error)
	// OldestBinlogEventID is the first eventId of the oldest retained local
	// binlog block, ok=false when there is none.
	OldestBinlogEventID() (int64, bool, error)
	// LastEventID is the broker's last assigned eventId.
	LastEventID() int64
}

// BatchApplier is implemented by a Target that can queue several blocks
// back to back so that they share the writer's group commits (catch-up is
// then bounded by the disk, not by one writer round trip per block). It
// applies raws in order and stops at the first failure: the applied blocks
// are always a prefix of raws, and last is the last eventId of that prefix.
type BatchApplier interface {
	ApplyReplicatedBatch(ctx context.Context, raws [][]byte) (last int64, applied int, err error)
}

// SlaveOptions configure a Slave. Zero values take the defaults.
type SlaveOptions struct {
	MasterAddr string // host:port of the master; required
	// StartEvent is the -event flag: the last eventId already replicated
	// (docs/protocol.md §4.2). It matters only while the local binlog is not past it.
	StartEvent int64
	// AliveInterval is the master's timeout.server.alive (default 30 s).
	AliveInterval time.Duration
	// SilenceTimeout reconnects when nothing arrives from the master for
	// this long (default 2 × AliveInterval).
	SilenceTimeout time.Duration
	ConnectTimeout time.Duration // default 3 s (docs/protocol.md §4.2)
	// RequestTimeout bounds the write of a request and the wait for the
	// valid-list reply (default 10 s).
	RequestTimeout time.Duration
	MinBackoff     time.Duration // first reconnect delay (default 1 s)
	MaxBackoff     time.Duration // the delay doubles up to this (default 30 s)
	// MaxBlock caps the length of a received block; a longer one is a
	// protocol violation that stops replication (default 64 MiB; use the
	// master's limit.maxPayload plus DelayPrefixLen and 2 KiB).
	MaxBlock int
	// MaxValidList caps the valid-list reply (default 256 MiB).
	MaxValidList int
	Logger       *slog.Logger
	// OnApply, if set, is called on the replication goroutine after each
	// apply step (one block, or a run of blocks with a BatchApplier) with
	// the last eventId applied so far (metrics, tests).
	OnApply func(lastEventID int64)
	// Fsynced marks the confirmations sent to the master as fsynced: the
	// slave's broker fsyncs its binlog before a commit returns (store.
	// flushLevel 2).
	Fsynced bool
	// DialContext opens the connection to the master, including any TLS
	// handshake and login (see client.SecureDialer); it is bounded by
	// ConnectTimeout. nil uses a plain net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxProbes bounds the replica requests of one divergence search
	// (default DefaultMaxProbes); each is a connection to the master.
	MaxProbes int
	// InstanceID is the id the hello records carry (confirm.go): the
	// master counts the connections with one id as one slave, a newer one
	// replacing the older. It should stay the same for a data directory
	// across restarts (smss keeps it there: broker.Broker.InstanceID), so
	// that a restarted slave replaces its old connection even when the
	// master has not noticed yet that the old one is dead. Zero picks a
	// random id for this Slave.
	InstanceID [InstanceIDLen]byte
	// Probe, if set, asks the master's status before each session: the
	// replica stream version it serves (protocol.NodeStatus.Replica) and
	// its promotion epoch. An original master, which has no status
	// command, is version 0 with epoch 0 and no error. A version 2 master
	// gets a version 2 hello and sends commit frames (docs/protocol.md
	// §4.6). nil: every session is version 0.
	Probe func(ctx context.Context) (version int, epoch uint64, err error)
	// KnownEpoch is the highest promotion epoch this node knows (its own,
	// the masters it followed, its cluster's): the slave refuses to follow
	// or confirm for a master whose epoch is lower (ErrStaleMaster), and
	// tells a version 2 master (an epoch record). nil: 0.
	KnownEpoch func() uint64
	// OnCommit receives the commit point: the master's, from its commit
	// frames; from a master of an earlier version, which sends none, the
	// last eventId applied (its subscribers are served what it holds, as
	// before read-committed delivery existed).
	OnCommit func(eventID int64)
}

// Defaults of SlaveOptions.
const (
	DefaultConnectTimeout = 3 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	DefaultMinBackoff     = time.Second
	DefaultMaxBackoff     = 30 * time.Second
	DefaultMaxBlock       = 64 << 20
	DefaultMaxValidList   = 256 << 20
)

func (o *SlaveOptions) setDefaults() error {
	if o.MasterAddr == "" {
		return errors.New("replication: SlaveOptions.MasterAddr is required")
	}
	if o.StartEvent < 0 {
		return fmt.Errorf("replication: start eventId %d is negative", o.StartEvent)
	}
	if o.AliveInterval <= 0 {
		o.AliveInterval = DefaultAliveInterval
	}
	if o.SilenceTimeout <= 0 {
		o.SilenceTimeout = 2 * o.AliveInterval
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.MaxBlock <= 0 {
		o.MaxBlock = DefaultMaxBlock
	}
	if o.MaxValidList <= 0 {
		o.MaxValidList = DefaultMaxValidList
	}
	if o.MaxProbes <= 0 {
		o.MaxProbes = DefaultMaxProbes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DialContext == nil {
		o.DialContext = (&net.Dialer{}).DialContext
	}
	return nil
}

// State is where a slave's replication is.
type State string

// States of Status.State.
const (
	StateConnecting State = "connecting" // dialling, or waiting to retry
	StateSyncing    State = "syncing"    // first-start topic sync (valid list)
	StateStreaming  State = "streaming"  // replica stream open, applying
	StateStopped    State = "stopped"    // for good: see LastError
)

// Status is a snapshot for operators.
type Status struct {
	State      State
	MasterAddr string
	// LastEventID is the last eventId of the last block in the slave's
	// binlog (applied by this process or found at start).
	LastEventID int64
	// LastError is the error that ended the last session (or stopped
	// replication), "" if none yet.
	LastError  string
	Reconnects int // sessions that ended and were retried
	// ConnectedSince is when the current stream was opened; zero when not
	// streaming.
	ConnectedSince time.Time
	LastFrameAt    time.Time // last frame (data or alive) from the master
	// LastBlockAt is when a block from the master was last applied by
	// this process; zero before the first.
	LastBlockAt time.Time
	// CommitPoint is the last commit point a version 2 master sent
	// (docs/protocol.md §4.6); 0 from an earlier one.
	CommitPoint int64
	NextRetry   time.Time     // when connecting after a failure: next attempt
	RetryIn     time.Duration // the backoff that NextRetry came from
	Blocks      int64         // blocks applied by this process
}

// ErrStopped is wrapped by the error Run returns when replication stopped
// for good (an apply error, a 400 from the master, a protocol violation).
var ErrStopped = errors.New("replication stopped")

// Slave replicates from a master into a slave broker.
type Slave struct {
	t    Target
	opts SlaveOptions
	log  *slog.Logger

	mu sync.Mutex
	st Status

	// Position, owned by Run's goroutine.
	pos       int64 // last eventId the slave has
	posFirst  int64 // first eventId of that block (for an original master)
	needSync  bool  // §4.2 topic sync still to do
	legacyPos bool  // the master matches block-first ids (original smss)
	raws      [][]byte
	// have is the last eventId of the last block in the slave's binlog:
	// what it confirms. Unlike pos it never takes -event's value, which
	// names blocks the slave skipped, not blocks it has.
	have int64

	// instance names this slave in its hello records (confirm.go):
	// SlaveOptions.InstanceID, or random.
	instance [InstanceIDLen]byte
	// unverifiable: the last local block has no local predecessor to
	// anchor the divergence check, and the master refused the fallback
	// anchor (diverge.go); the next session resumes unchecked.
	unverifiable bool
	// noStatus: the master answered status "don't support action" (an
	// original smss); divergence probes no longer ask it (diverge.go).
	noStatus atomic.Bool
	// v2 is the session's stream version (SlaveOptions.Probe): commit
	// frames are expected, epoch records sent. Set before the session's
	// reader starts, read by it.
	v2 bool
	// readAheads counts the catch-ups a read-ahead served (session.go),
	// for tests.
	readAheads atomic.Int64
}

// ErrStaleMaster is wrapped by the error of a session that ended because
// the master's promotion epoch is below the one this node knows: a newer
// master exists, and this slave neither follows nor confirms for the old
// one (fencing). The session is retried with backoff; a cluster re-points
// the slave.
var ErrStaleMaster = errors.New("the master's epoch is below the epoch this node knows")

func (s *Slave) knownEpoch() uint64 {
	if s.opts.KnownEpoch == nil {
		return 0
	}
	return s.opts.KnownEpoch()
}

// checkEpoch refuses a master whose epoch is below the known one.
func (s *Slave) checkEpoch(epoch uint64) error {
	if known := s.knownEpoch(); epoch < known {
		return fmt.Errorf("%w: master %s is at epoch %d, this node knows epoch %d; not following it", ErrStaleMaster, s.opts.MasterAddr, epoch, known)
	}
	return nil
}

// NewSlave prepares replication into t. It reads the position from t's
// binlog; nothing is sent before Run.
func NewSlave(t Target, opts SlaveOptions) (*Slave, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	s := &Slave{t: t, opts: opts, log: opts.Logger.With("master", opts.MasterAddr)}
	s.instance = opts.InstanceID
	if s.instance == ([InstanceIDLen]byte{}) {
		if _, err := rand.Read(s.instance[:]); err != nil {
			return nil, fmt.Errorf("replication: instance id: %w", err)
		}
	}
	first, last, err := lastBlockIDs(t)
	if err != nil {
		return nil, fmt.Errorf("replication: read the slave's position from its binlog: %w", err)
	}
	if bl := t.LastEventID(); bl > last {
		// eventIds above the binlog's last block are reserved locally
		// (the broker counts synced topics' createEventIds): the master's
		// blocks in between would be refused as out of order. Resuming from
		// the binlog makes that a loud stop rather than a silent gap.
		s.log.Warn("the broker's last eventId is ahead of its binlog; resuming from the binlog",
			"brokerLastEventId", bl, "binlogLastEventId", last)
	}
	// §4.2: a slave that already has data past -event resumes from its own
	// position and skips the topic sync.
	if last > opts.StartEvent {
		s.pos, s.posFirst = last, first
	} else {
		s.pos, s.posFirst, s.needSync = opts.StartEvent, opts.StartEvent, true
	}
	s.have = last
	s.st = Status{State: StateConnecting, MasterAddr: opts.MasterAddr, LastEventID: last}
	return s, nil
}

// Status returns a snapshot of the replication state.
func (s *Slave) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *Slave) update(f func(st *Status)) {
	s.mu.Lock()
	f(&s.st)
	s.mu.Unlock()
}

func (s *Slave) setState(state State, attrs ...any) {
	s.mu.Lock()
	old := s.st.State
	s.st.State = state
	if state != StateStreaming {
		s.st.ConnectedSince = time.Time{}
	}
	s.mu.Unlock()
	if old != state {
		s.log.Info("replication state", append([]any{"state", string(state), "previous", string(old)}, attrs...)...)
	}
}

// Run replicates until ctx ends (it returns nil) or replication stops for
// good (it returns an error wrapping ErrStopped; the slave keeps serving
// reads). An unreachable or failing master is retried forever with capped
// exponential backoff.
func (s *Slave) Run(ctx context.Context) error {
	s.log.Info("replication starting", "from", s.pos, "topicSync", s.needSync, "startEvent", s.opts.StartEvent)
	delay := time.Duration(0)
	for {
		progressed, err := s.session(ctx)
		if ctx.Err() != nil {
			s.setState(StateStopped, "reason", "shutdown")
			return nil
		}
		if errors.Is(err, ErrStopped) {
			s.update(func(st *Status) { st.LastError = err.Error() })
			s.setState(StateStopped)
			s.log.Error("REPLICATION STOPPED: the slave no longer follows the master; fix the cause and restart",
				"err", err, "lastEventId", s.pos)
			return err
		}
		switch {
		case errors.Is(err, errRetryNow):
			delay = 0
		case progressed:
			delay = s.opts.MinBackoff
		default:
			delay = min(max(2*delay, s.opts.MinBackoff), s.opts.MaxBackoff)
		}
		next := time.Now().Add(delay)
		s.update(func(st *Status) {
			st.LastError, st.NextRetry, st.RetryIn = err.Error(), next, delay
			st.Reconnects++
		})
		s.setState(StateConnecting)
		s.log.Warn("replication interrupted; retrying", "err", err, "retryIn", delay, "lastEventId", s.pos)
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				s.setState(StateStopped, "reason", "shutdown")
				return nil
			case <-t.C:
			}
		}
	}
}

// errRetryNow ends a session that should be retried at once (the master
// turned out to be an original smss that wants a block-first eventId).
var errRetryNow = errors.New("retry at once")

func stopped(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrStopped, fmt.Sprintf(format, args...))
}
