package replication

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Modes of confirmState.
const (
	confirmUndecided  int32 = iota // nothing received yet
	confirmActive                  // said hello: counted by the tracker
	confirmDiscarding              // not a confirming slave (or broke the format): input discarded
	confirmReader                  // a replica reader's hello (smss-bridge): commit frames, never counted
)

// maxSentMarks bounds the commit times a stream remembers for the latency
// of confirmations; when the slave falls further behind, the oldest are
// dropped and the latency reads low by at most their age.
const maxSentMarks = 1024

type sentMark struct {
	eventID int64
	at      time.Time
}

// confirmState parses what a slave sends on its replica connection (the
// master's reader goroutine feeds it) and reports the confirmations to the
// tracker. The first bytes decide: the confirmation magic makes the
// connection confirming, anything else makes it non-confirming for good
// (an original slave, the ReplicaClient's 2-byte acks) and is discarded as
// before. A malformed record after a valid hello is logged and the slave
// stops counting; replication itself goes on.
type confirmState struct {
	t     *SyncTracker
	addr  string
	sent  func() int64 // last eventId handed to the sender; nil: unknown
	log   *slog.Logger
	mode  atomic.Int32
	buf   [ConfirmLen]byte
	n     int
	slave *SyncSlave
	last  int64
	seq   uint64 // the stream's start order (SyncTracker.streams)

	mu    sync.Mutex
	marks []sentMark // FIFO of (last eventId sent, when its commit was seen)

	// v2 is set when the hello says the slave reads commit frames and
	// sends epoch records (docs/protocol.md §4.6); onEpoch receives those.
	v2      atomic.Bool
	onEpoch func(uint64)
	// decided is closed once the first record decided the mode: a stream
	// waiting before the hello arrived then learns that it is version 2.
	decided     chan struct{}
	decidedOnce sync.Once
}

func newConfirmState(t *SyncTracker, addr string, sent func() int64, onEpoch func(uint64), log *slog.Logger) *confirmState {
	return &confirmState{t: t, addr: addr, sent: sent, onEpoch: onEpoch, log: log, seq: t.streams.Add(1),
		decided: make(chan struct{})}
}

func (c *confirmState) decide() { c.decidedOnce.Do(func() { close(c.decided) }) }

// feed consumes bytes the slave sent (reader goroutine only).
func (c *confirmState) feed(b []byte) {
	for len(b) > 0 {
		mode := c.mode.Load()
		if mode == confirmDiscarding {
			return
		}
		k := copy(c.buf[c.n:], b)
		c.n += k
		b = b[k:]
		if mode == confirmUndecided && !IsConfirmPrefix(c.buf[:c.n]) {
			c.mode.Store(confirmDiscarding)
			c.decide()
			c.log.Debug("the slave does not confirm (an original smss slave or a debug client); it never counts toward replication.syncSlaves")
			return
		}
		if c.n < ConfirmLen {
			return
		}
		c.n = 0
		rec, err := DecodeConfirm(c.buf[:])
		if err != nil {
			c.malformed(err.Error())
			return
		}
		c.handle(rec)
	}
}

func (c *confirmState) handle(rec Confirm) {
	sent := int64(-1)
	if c.sent != nil {
		sent = c.sent()
	}
	beyond := sent >= 0 && rec.EventID > sent
	if c.mode.Load() == confirmUndecided {
		switch {
		case rec.Kind != ConfirmHello:
			c.malformed("the first record is not a hello")
		case rec.Reader:
			// A reader (smss-bridge) holds what it mirrors at the commit
			// point and never confirms: it gets commit frames but must
			// never count toward syncSlaves or be seen as a slave by a
			// cluster's controller, so it is not registered.
			c.mu.Lock()
			c.marks = nil // no confirmation will ever pop them
			c.mu.Unlock()
			c.v2.Store(true)
			c.mode.Store(confirmReader)
			c.decide()
			c.log.Info("a replica reader (smss-bridge) reads commit frames; it never counts toward replication.syncSlaves")
		case beyond:
			c.malformed("the hello's position is beyond what this stream started from")
		default:
			c.last = rec.EventID
			// The hello's position covers the blocks streamed before it
			// (a slave says hello after its first apply): their marks go,
			// or they would age as unconfirmed writes while idle.
			c.latency(rec.EventID)
			c.slave = c.t.register(c.addr, c.seq, rec, c.oldestUnconfirmed)
			c.v2.Store(rec.V2)
			c.mode.Store(confirmActive)
			c.decide()
			c.log.Info("the slave confirms what it applies (semi-synchronous replication)",
				"position", rec.EventID, "fsynced", rec.Fsynced, "streamVersion2", rec.V2)
		}
		return
	}
	if c.mode.Load() == confirmReader && rec.Kind != ConfirmEpoch {
		c.malformed("a replica reader sent a record other than its epoch")
		return
	}
	switch {
	case rec.Kind == ConfirmEpoch && c.v2.Load():
		if c.onEpoch != nil {
			c.onEpoch(uint64(rec.EventID))
		}
	case rec.Kind == ConfirmEpoch:
		c.malformed("an epoch record from a slave whose hello did not announce version 2")
	case rec.Kind != ConfirmConfirm:
		c.malformed("a second hello")
	case rec.EventID < c.last:
		c.malformed("the confirmed position went back")
	case beyond:
		c.malformed("it confirms an eventId this stream has not sent")
	default:
		c.last = rec.EventID
		lat, ok := c.latency(rec.EventID)
		c.slave.confirm(rec.EventID, rec.Fsynced, lat, ok)
	}
}

func (c *confirmState) malformed(why string) {
	c.mode.Store(confirmDiscarding)
	c.decide()
	if c.slave != nil {
		c.slave.remove()
	}
	c.log.Warn("malformed confirmation from the slave; it no longer counts toward replication.syncSlaves (replication goes on)",
		"why", why, "record", c.buf[:], "lastConfirmed", c.last)
}

// noteSent remembers when the commit of the blocks just written up to
// the stream's sent position was seen (stream goroutine).
func (c *confirmState) noteSent(at time.Time) {
	if m := c.mode.Load(); c.sent == nil || m == confirmDiscarding || m == confirmReader {
		return
	}
	id := c.sent()
	c.mu.Lock()
	if n := len(c.marks); n == 0 || c.marks[n-1].eventID < id {
		if n >= maxSentMarks {
			c.marks = append(c.marks[:0], c.marks[1:]...)
		}
		c.marks = append(c.marks, sentMark{id, at})
	}
	c.mu.Unlock()
}

// latency pops the marks a confirmation of pos covers and returns the age
// of the newest: the time from the commit of the latest confirmed block.
func (c *confirmState) latency(pos int64) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := 0
	for i < len(c.marks) && c.marks[i].eventID <= pos {
		i++
	}
	if i == 0 {
		return 0, false
	}
	at := c.marks[i-1].at
	c.marks = append(c.marks[:0], c.marks[i:]...)
	return time.Since(at), true
}

// urgent reports whether the stream should send at once rather than
// linger: the slave confirms and the master is semi-synchronous (not
// degraded), so every write's reply waits for this stream. Whether a
// waiter is registered yet cannot tell: the stream is woken by the same
// commit as the writes' handlers, and often runs first.
func (c *confirmState) urgent() bool {
	return c != nil && c.mode.Load() == confirmActive && c.t.need > 0 && !c.t.degradedFlag.Load()
}

// oldestUnconfirmed is when the oldest commit streamed and not confirmed
// was seen.
func (c *confirmState) oldestUnconfirmed() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.marks) == 0 {
		return time.Time{}, false
	}
	return c.marks[0].at, true
}

// close takes the slave out of the tracker (the stream ended).
func (c *confirmState) close() {
	if c.slave != nil {
		c.slave.remove()
	}
}
