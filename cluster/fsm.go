package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/hashicorp/raft"
)

// fsm is the raft state machine: State, changed only by Apply and Restore
// (both called by raft's FSM goroutine, one at a time).
type fsm struct {
	log *slog.Logger

	mu    sync.RWMutex
	state State
	// last is the raft index of the last entry Apply received (applied or
	// refused), or what a snapshot restored covers as far as the FSM
	// knows (its state's Version): CaughtUp compares it with raft's.
	last uint64

	// changes holds at most the newest state not yet received: publish
	// replaces an unread one, so the FSM never blocks on a slow reader and
	// the newest state is never lost.
	changes chan State
}

func newFSM(log *slog.Logger) *fsm {
	return &fsm{log: log, changes: make(chan State, 1)}
}

func (f *fsm) State() State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Clone()
}

// masterEpoch is the state's master and epoch, without copying the rest
// (the fence asks it for every write).
func (f *fsm) masterEpoch() (string, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Master, f.state.Epoch
}

// Apply applies one log entry. Its return value is the ApplyFuture's
// Response: nil when applied, an error when refused. A refused or malformed
// entry leaves the state as it was and is logged; it never panics, since
// log bytes come from the network.
func (f *fsm) Apply(l *raft.Log) any {
	c, err := DecodeCommand(l.Data)
	if err != nil {
		f.mu.Lock()
		f.last = max(f.last, l.Index)
		f.mu.Unlock()
		f.log.Error("cluster: raft entry refused", "index", l.Index, "err", err)
		return err
	}
	f.mu.Lock()
	f.last = max(f.last, l.Index)
	next, err := apply(f.state, c, l.Index)
	if err != nil {
		f.mu.Unlock()
		f.log.Warn("cluster: raft entry refused", "index", l.Index, "err", err)
		return err
	}
	f.state = next
	f.mu.Unlock()
	f.publish(next.Clone())
	return nil
}

func (f *fsm) publish(s State) {
	select {
	case f.changes <- s:
		return
	default:
	}
	// Full: drop the unread older state. Apply and Restore are the only
	// senders and never run at once, so the slot is free after the drain.
	select {
	case <-f.changes:
	default:
	}
	select {
	case f.changes <- s:
	default:
	}
}

// Snapshot captures the state; Persist writes it as JSON.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return snapshot{f.State()}, nil
}

// Restore replaces the state with a snapshot's, refusing a malformed one.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := decodeState(rc)
	if err != nil {
		f.log.Error("cluster: snapshot refused", "err", err)
		return err
	}
	f.mu.Lock()
	f.state = s
	f.last = max(f.last, s.Version)
	f.mu.Unlock()
	f.publish(s.Clone())
	return nil
}

// lastIndex is the raft index of the last entry the FSM took in.
func (f *fsm) lastIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.last
}

func decodeState(r io.Reader) (State, error) {
	var s State
	dec := json.NewDecoder(io.LimitReader(r, maxCommandBytes*16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return State{}, fmt.Errorf("cluster: decode snapshot: %w", err)
	}
	if err := checkState(s); err != nil {
		return State{}, fmt.Errorf("cluster: snapshot: %w", err)
	}
	return s, nil
}

type snapshot struct{ s State }

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.s); err != nil {
		sink.Cancel()
		return fmt.Errorf("cluster: write snapshot: %w", err)
	}
	return sink.Close()
}

func (snapshot) Release() {}
