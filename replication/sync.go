package replication

import (
	"container/heap"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// SyncOptions configure a SyncTracker (replication.syncSlaves,
// replication.syncTimeoutMs, replication.onSyncTimeout).
type SyncOptions struct {
	// Slaves is how many confirming slaves must have a write before it is
	// answered; 0 answers at once (asynchronous replication).
	Slaves int
	// Timeout bounds the wait (default DefaultSyncTimeout).
	Timeout time.Duration
	// Degrade answers 200 after a timeout and turns asynchronous until
	// the slaves caught up; false answers the write with ErrNotConfirmed.
	Degrade bool
	// LastEventID is the master's last committed eventId (the broker's);
	// a degraded tracker compares the slaves' confirmations with it.
	LastEventID func() int64
	Logger      *slog.Logger // nil: slog.Default()
	// LogSample logs 1 in LogSample timeouts (0: none); state changes are
	// always logged.
	LogSample int
	// OnCommit, if set, receives every rise of the commit point
	// (CommitPoint), called with the tracker's lock held: it must not
	// call back into the tracker (broker.SetCommitPoint does not).
	OnCommit func(eventID int64)
	// InSync switches to the in-sync rule of a cluster (commit.go): a
	// write is confirmed once every slave of the in-sync set (SetInSync)
	// confirmed it, and only while that set has at least Slaves members.
	InSync bool
	// Fence, if set, is asked before a write is answered 200: a non-nil
	// error (a *protocol.BizError starting protocol.FencedPrefix) refuses
	// it. A cluster master that lost its lease is fenced.
	Fence func() error
	// DurableGate keeps the commit point at or below LastEventID, which
	// must then be the master's own durable position: with
	// broker.Options.ReplicateBeforeSync a slave may confirm a write
	// before the master synced it. The master reports each synced group
	// with Durable (broker.SetDurableHook), which raises the commit point
	// to what both have.
	DurableGate bool
}

// DefaultSyncTimeout is SyncOptions.Timeout's default.
const DefaultSyncTimeout = 2 * time.Second

// ErrNotConfirmed is wrapped by the error Wait returns when too few slaves
// confirmed a write in time (onSyncTimeout: fail). The error is also a
// *protocol.BizError whose text clients see: it starts "write not
// confirmed".
var ErrNotConfirmed = errors.New("write not confirmed")

type notConfirmed struct{ biz *protocol.BizError }

func (e *notConfirmed) Error() string   { return e.biz.Msg }
func (e *notConfirmed) Unwrap() []error { return []error{e.biz, ErrNotConfirmed} }

// SyncTracker counts the confirmations of the slaves connected to a master
// and lets request handlers wait for them. Confirmations arrive on the
// replica connections' reader goroutines; waiting happens only in the
// handler of the write's own connection, never in the writer.
//
// Waiters sit in a min-heap by eventId. The position every waiter compares
// with is the Slaves-th highest confirmed position among the connected
// confirming slaves; when a confirmation raises it, the waiters at or
// below it are popped and woken, each with one channel send. Nothing polls
// and no goroutine is started per write.
type SyncTracker struct {
	need    int
	timeout time.Duration
	degrade bool
	last    func() int64
	log     *slog.Logger
	sample  uint64
	biz     error // the fail-mode error, built once
	fence   func() error
	gate    bool // SyncOptions.DurableGate

	mu       sync.Mutex
	slaves   []*SyncSlave // confirming, connected
	kth      int64        // the need-th highest confirmed position (the in-sync set's lowest, InSync)
	commit   commitState  // commit.go
	waiters  waiterHeap
	degraded bool
	since    time.Time // degraded since
	target   int64     // degraded: the position the slaves must reach
	targetAt time.Time // when target was taken
	pos      []int64   // scratch for kthLocked
	waker    func()    // sync_loop.go: SetWaker
	wakeAt   int64     // the position the waker is armed for; 0: none

	degradedFlag atomic.Bool // degraded, for readers without the lock
	waiting      atomic.Int64
	timeoutsFail atomic.Int64
	timeoutsDeg  atomic.Int64
	unconfirmed  atomic.Int64 // writes answered 200 unconfirmed (degraded)
	degradations atomic.Int64
	logN         atomic.Uint64
	waiterPool   sync.Pool
	// streams numbers the replica streams in the order they started
	// (newConfirmState), so that of two connections with one instance id
	// the later one wins even when its hello is read first.
	streams atomic.Uint64
	// sharedGrace is sharedIDGrace (tests shorten it).
	sharedGrace time.Duration
}

// NewSyncTracker returns a tracker. Slaves 0 makes Wait return at once.
func NewSyncTracker(o SyncOptions) (*SyncTracker, error) {
	if o.Slaves < 0 {
		return nil, fmt.Errorf("replication: sync slaves %d is negative", o.Slaves)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultSyncTimeout
	}
	if o.LastEventID == nil {
		return nil, errors.New("replication: SyncOptions.LastEventID is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	msg := fmt.Sprintf("write not confirmed by %d slave(s) within %d ms; it is stored on the master and may still be replicated",
		o.Slaves, o.Timeout.Milliseconds())
	if o.InSync && o.Degrade {
		return nil, errors.New("replication: onSyncTimeout degrade cannot apply to a cluster's in-sync rule: a fenced or partitioned master would acknowledge writes a failover loses")
	}
	if o.InSync && o.Slaves < 1 {
		return nil, fmt.Errorf("replication: a cluster needs at least 1 sync slave, got %d", o.Slaves)
	}
	if o.InSync {
		msg = fmt.Sprintf("write not confirmed by the in-sync slaves (at least %d) within %d ms; it is stored on the master and may still be replicated",
			o.Slaves, o.Timeout.Milliseconds())
	}
	t := &SyncTracker{need: o.Slaves, timeout: o.Timeout, degrade: o.Degrade, last: o.LastEventID,
		log: o.Logger.With("component", "semi-sync"), sample: uint64(max(o.LogSample, 0)),
		biz: &notConfirmed{protocol.NewBizError(msg)}, sharedGrace: sharedIDGrace}
	t.commit.onCommit, t.commit.inSync, t.fence, t.gate = o.OnCommit, o.InSync, o.Fence, o.DurableGate
	return t, nil
}

// Enabled reports whether writes wait for confirmations (Slaves > 0).
func (t *SyncTracker) Enabled() bool { return t != nil && t.need > 0 }

type waiter struct {
	id    int64
	idx   int // in the heap; -1 once popped
	ch    chan struct{}
	timer *time.Timer
}

type waiterHeap []*waiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].id < h[j].id }
func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.idx = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.idx = -1
	return w
}

// Wait returns once the write that ended at (or, for a multi-record block,
// started at) eventID is confirmed by Slaves confirming slaves: nil. When
// that takes longer than Timeout it returns an error wrapping
// ErrNotConfirmed (and a *protocol.BizError), or nil in degrade mode. It
// returns ctx.Err() when ctx ends first. A nil tracker, Slaves 0, an
// eventID <= 0 (nothing written) and a degraded tracker return nil at once.
//
// A confirmed position is always the last eventId of a block, so a
// position >= the first eventId of a block covers the whole block.
func (t *SyncTracker) Wait(ctx context.Context, eventID int64) error {
	if t == nil || t.need == 0 || eventID <= 0 {
		return nil
	}
	if err := t.fenced(); err != nil {
		return err
	}
	t.mu.Lock()
	if t.settledLocked(eventID) {
		t.mu.Unlock()
		return t.fenced()
	}
	w, _ := t.waiterPool.Get().(*waiter)
	if w == nil {
		w = &waiter{ch: make(chan struct{}, 1)}
	}
	w.id = eventID
	heap.Push(&t.waiters, w)
	t.mu.Unlock()
	t.waiting.Add(1)
	defer t.waiting.Add(-1)
	if w.timer == nil {
		w.timer = time.NewTimer(t.timeout)
	} else {
		w.timer.Reset(t.timeout)
	}
	var err error
	select {
	case <-w.ch:
		w.timer.Stop()
		t.waiterPool.Put(w)
		return t.fenced()
	case <-w.timer.C:
	case <-ctx.Done():
		w.timer.Stop()
		err = ctx.Err()
	}
	t.mu.Lock()
	if w.idx < 0 {
		// Woken while the timer fired: the send is in the channel.
		t.mu.Unlock()
		<-w.ch
		t.waiterPool.Put(w)
		return t.fenced()
	}
	heap.Remove(&t.waiters, w.idx)
	w.idx = -1
	t.waiterPool.Put(w)
	if err != nil {
		t.mu.Unlock()
		return err
	}
	return t.timedOutLocked(eventID)
}

func (t *SyncTracker) logTimeout(eventID int64) {
	if t.sample == 0 || (t.logN.Add(1)-1)%t.sample != 0 {
		return
	}
	t.log.Warn("write not confirmed by the slaves in time", "eventId", eventID, "syncSlaves", t.need,
		"timeout", t.timeout, "degrade", t.degrade, "confirmedUpTo", t.Confirmed())
}

// enterDegradedLocked turns the tracker asynchronous: every waiter is
// answered now (as MySQL does when semi-sync switches off).
func (t *SyncTracker) enterDegradedLocked() {
	if t.degraded {
		return
	}
	t.degraded, t.since = true, time.Now()
	t.degradedFlag.Store(true)
	t.target, t.targetAt = t.last(), t.since
	t.degradations.Add(1)
	released := len(t.waiters)
	t.raiseCommitLocked(t.target) // every write up to it is answered 200 now
	for len(t.waiters) > 0 {
		w := heap.Pop(&t.waiters).(*waiter)
		t.unconfirmed.Add(1)
		w.ch <- struct{}{}
	}
	t.log.Warn("semi-synchronous replication degraded to asynchronous: writes are answered without waiting for slaves",
		"syncSlaves", t.need, "timeout", t.timeout, "confirming", len(t.slaves), "confirmedUpTo", t.kth,
		"lastEventId", t.target, "released", released)
	t.wakeLocked() // every held write settles now
	// The slaves may already be there (e.g. the timeout raced a
	// confirmation).
	t.checkRecoveredLocked()
}

// checkRecoveredLocked ends the degraded state once Slaves slaves have
// caught up: their confirmations reached the master's last eventId as it
// was when the target was taken. The target is refreshed at most every
// half timeout, so a slave that keeps up within that lag recovers even
// under constant writes, and one lagging by more does not.
func (t *SyncTracker) checkRecoveredLocked() {
	if !t.degraded || len(t.slaves) < t.need {
		return
	}
	if t.kth >= t.target {
		t.log.Info("semi-synchronous replication restored: the slaves caught up",
			"syncSlaves", t.need, "confirmedUpTo", t.kth, "degradedFor", time.Since(t.since))
		t.degraded = false
		t.degradedFlag.Store(false)
		return
	}
	if now := time.Now(); now.Sub(t.targetAt) >= t.timeout/2 {
		t.target, t.targetAt = t.last(), now
	}
}

// Degraded reports whether the tracker is answering asynchronously after
// a timeout (degrade mode only).
func (t *SyncTracker) Degraded() bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.degraded
}

// Confirmed is the highest eventId that Slaves confirming slaves have
// confirmed (0 when fewer are connected or Slaves is 0).
func (t *SyncTracker) Confirmed() int64 {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.kth
}

// SyncSlave is one confirming replica connection in a tracker.
type SyncSlave struct {
	t        *SyncTracker
	addr     string
	instance [InstanceIDLen]byte
	seq      uint64 // the stream's start order (SyncTracker.streams)
	since    time.Time

	// Guarded by t.mu.
	pos        int64
	fsynced    bool
	latency    time.Duration
	at         time.Time // last confirmation
	gone       bool      // removed or superseded
	confirms   int64
	replacedBy string    // the address of the newer connection that superseded it
	replacedAt time.Time // when
	warned     bool      // the shared-id warning was logged for it

	// oldest is when the oldest block streamed on this connection and not
	// yet confirmed was committed (ok false: none); set before it counts.
	oldest func() (time.Time, bool)
}

// sharedIDGrace is how long after its replacement a connection's
// confirmations may still arrive without meaning that it is alive: bytes
// the slave sent before it reconnected, read late by the old connection's
// reader. A live second slave with the same id confirms every apply step,
// so it is still reported at its next confirmation after the grace.
const sharedIDGrace = time.Second

// register adds a confirming connection (stream number seq) that said
// hello with its position. A connection of the same slave instance still
// registered is superseded: the slave reconnected (or restarted on the
// same data directory, whose instance id it keeps) before the master
// noticed that the old connection is dead. One slave thus never counts
// twice, and what the slave has is what its newest connection's hello
// says: the old connection's position no longer counts, nor do its later
// confirmations (confirm). Of two connections with one id the one whose
// stream started later wins, whichever hello is read first.
func (t *SyncTracker) register(addr string, seq uint64, h Confirm, oldest func() (time.Time, bool)) *SyncSlave {
	now := time.Now()
	s := &SyncSlave{t: t, addr: addr, instance: h.Instance, seq: seq, since: now, pos: h.EventID, fsynced: h.Fsynced, at: now, oldest: oldest}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := 0; i < len(t.slaves); i++ {
		o := t.slaves[i]
		if o.instance != h.Instance {
			continue
		}
		if o.seq > seq {
			// A newer stream of this slave registered first: this one is
			// stale from the start.
			s.gone, s.replacedBy, s.replacedAt = true, o.addr, now
			t.log.Info("a confirming connection is older than a registered one of the same slave instance; it does not count",
				"instanceId", fmt.Sprintf("%x", h.Instance[:]), "addr", addr, "newer", o.addr)
			return s
		}
		o.gone, o.replacedBy, o.replacedAt = true, addr, now
		t.slaves = slices.Delete(t.slaves, i, i+1)
		i--
		t.log.Info("a newer connection of the same slave instance replaces the older one (the slave reconnected or restarted before the old connection ended)",
			"instanceId", fmt.Sprintf("%x", h.Instance[:]), "addr", addr, "replaced", o.addr,
			"replacedConfirmed", o.pos, "replacedLastConfirmAgo", now.Sub(o.at).Round(time.Millisecond), "position", h.EventID)
	}
	t.slaves = append(t.slaves, s)
	t.advanceLocked()
	return s
}

// confirm records that the slave has everything up to pos. A superseded
// connection's confirmation never counts while another connection of its
// instance id is registered (and is warned about once: two live slaves
// with one id); when none is, a confirmation a grace after its
// replacement proves it is alive and the only one of its id, and it
// counts again from pos.
func (s *SyncSlave) confirm(pos int64, fsynced bool, latency time.Duration, hasLatency bool) {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.gone {
		if s.replacedBy == "" || time.Since(s.replacedAt) < t.sharedGrace {
			return // removed, or bytes sent before a reconnect
		}
		// A superseded connection that still confirms is alive.
		if slices.ContainsFunc(t.slaves, func(o *SyncSlave) bool { return o.instance == s.instance }) {
			// Two live slaves share one instance id (a copied data
			// directory). They count as one, which errs on the safe side
			// (writes wait for another slave) but must be fixed.
			if !s.warned {
				s.warned = true
				t.log.Warn("two live slaves send the same instance id (a copied data directory?): they count as one toward replication.syncSlaves; "+
					"give the copy its own id: stop it, delete instance.id in its store.path, start it",
					"instanceId", fmt.Sprintf("%x", s.instance[:]), "addr", s.addr, "other", s.replacedBy, "confirmed", pos)
			}
			return
		}
		// The connection that replaced it is gone too (e.g. the copy
		// was restarted with an id of its own): this live one is the
		// only connection of its id and counts again, from the position
		// it confirms now, not from what it had before.
		t.log.Info("a replaced confirming connection counts again: no other connection has its instance id any more",
			"instanceId", fmt.Sprintf("%x", s.instance[:]), "addr", s.addr, "replacedBy", s.replacedBy, "position", pos)
		s.gone, s.replacedBy, s.warned = false, "", false
		t.slaves = append(t.slaves, s)
	}
	s.pos, s.fsynced, s.at = pos, fsynced, time.Now()
	s.confirms++
	if hasLatency {
		s.latency = latency
	}
	t.advanceLocked()
}

// remove takes the connection out of the count (it ended).
func (s *SyncSlave) remove() {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.gone {
		return
	}
	s.gone = true
	if i := slices.Index(t.slaves, s); i >= 0 {
		t.slaves = slices.Delete(t.slaves, i, i+1)
	}
	t.advanceLocked()
}

// advanceLocked recomputes the need-th highest position and wakes the
// waiters it covers.
func (t *SyncTracker) advanceLocked() {
	if t.need == 0 {
		return
	}
	k := int64(0)
	switch {
	case t.commit.inSync:
		k = t.inSyncLowestLocked()
	case len(t.slaves) >= t.need:
		t.pos = t.pos[:0]
		for _, s := range t.slaves {
			t.pos = append(t.pos, s.pos)
		}
		slices.Sort(t.pos)
		k = t.pos[len(t.pos)-t.need]
	}
	t.kth = k
	t.raiseCommitLocked(t.committableLocked())
	for len(t.waiters) > 0 && t.waiters[0].id <= k {
		w := heap.Pop(&t.waiters).(*waiter)
		w.ch <- struct{}{}
	}
	t.wakeLocked()
	t.checkRecoveredLocked()
}

// SyncInfo is a snapshot of the tracker and its slaves for operators.
func (t *SyncTracker) Info() (metrics.SyncInfo, map[string]metrics.SlaveSync) {
	if t == nil {
		return metrics.SyncInfo{OnTimeout: "fail"}, nil
	}
	in := metrics.SyncInfo{SyncSlaves: t.need, TimeoutMs: t.timeout.Milliseconds(), OnTimeout: "fail", BeforeSync: t.gate,
		Waiting: t.waiting.Load(), TimeoutsFail: t.timeoutsFail.Load(), TimeoutsDegrade: t.timeoutsDeg.Load(),
		Unconfirmed: t.unconfirmed.Load(), Degradations: t.degradations.Load()}
	if t.degrade {
		in.OnTimeout = "degrade"
	}
	slaves := map[string]metrics.SlaveSync{}
	t.mu.Lock()
	in.Degraded, in.Confirmed, in.Confirming = t.degraded, t.kth, len(t.slaves)
	if t.degraded {
		in.DegradedSince = t.since.UnixMilli()
	}
	for _, s := range t.slaves {
		slaves[s.addr] = metrics.SlaveSync{InstanceID: hex.EncodeToString(s.instance[:]), Confirmed: s.pos, Fsynced: s.fsynced,
			LatencySeconds: s.latency.Seconds(), LastConfirm: s.at.UnixMilli(), Confirms: s.confirms}
	}
	t.mu.Unlock()
	return in, slaves
}

// Annotate adds the tracker's view to r: r.Sync, and the confirmation
// fields of the slaves in r.Slaves that confirm (matched by remote
// address, as the broker's replica streams and the tracker both name
// their connection).
func (t *SyncTracker) Annotate(r *metrics.ReplicationInfo) {
	if t == nil {
		return
	}
	in, slaves := t.Info()
	r.Sync = &in
	for i := range r.Slaves {
		s, ok := slaves[r.Slaves[i].RemoteAddr]
		if !ok {
			continue
		}
		sl := &r.Slaves[i]
		sl.Confirming, sl.InstanceID, sl.Confirmed, sl.Fsynced = true, s.InstanceID, s.Confirmed, s.Fsynced
		sl.ConfirmLatencySeconds, sl.LastConfirm = s.LatencySeconds, s.LastConfirm
	}
}
