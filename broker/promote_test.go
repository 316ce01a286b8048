package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
)

// replicateAll applies every block of m after `after` to s.
func replicateAll(t *testing.T, m, s *Broker, after int64) {
	t.Helper()
	ctx := context.Background()
	stream, err := m.ReplicaStream(after)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for {
		n, err := stream.Next(ctx, 10, 10*time.Millisecond, func(block []byte) error {
			_, err := s.ApplyReplicated(ctx, append([]byte(nil), block...))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

// slaveOfMaster is a slave (its data in sdir) that replicated a master
// holding topic order with messages a and b; the master stays open for
// the test.
func slaveOfMaster(t *testing.T) (s *Broker, sdir string) {
	t.Helper()
	ctx := context.Background()
	m := openTest(t, t.TempDir(), nil)
	t.Cleanup(func() { m.Close() })
	m.CreateTopic(ctx, []byte("order"), 0)
	m.Publish(ctx, []byte("order"), append(rec("a"), rec("b")...), 2)
	sdir = t.TempDir()
	s = openTest(t, sdir, func(o *Options) { o.Slave = true })
	replicateAll(t, m, s, 0)
	return s, sdir
}

func TestPromote(t *testing.T) {
	ctx := context.Background()
	s, sdir := slaveOfMaster(t)
	last := s.LastEventID()

	steps := []struct {
		name string
		run  func() error
	}{
		{"slave refuses a publish", func() error {
			if _, err := s.Publish(ctx, []byte("order"), rec("x"), 1); !errors.Is(err, protocol.ErrSlavePub) {
				return errorf("publish on a slave: %v", err)
			}
			return nil
		}},
		{"learn the master's epoch", func() error {
			if ch, err := s.LearnEpoch(ctx, 4); !ch || err != nil || s.Epoch() != 4 {
				return errorf("learn 4: %v %v, epoch %d", ch, err, s.Epoch())
			}
			if ch, err := s.LearnEpoch(ctx, 2); ch || err != nil || s.Epoch() != 4 {
				return errorf("learning a lower epoch changed it: %v %v, epoch %d", ch, err, s.Epoch())
			}
			return nil
		}},
		{"promote", func() error {
			e, err := s.Promote(ctx)
			if err != nil || e != 5 || s.Epoch() != 5 || s.IsSlave() {
				return errorf("promote: epoch %d %v, slave %v", e, err, s.IsSlave())
			}
			return nil
		}},
		{"second promote", func() error {
			if _, err := s.Promote(ctx); !errors.Is(err, protocol.ErrAlreadyMaster) {
				return errorf("promote on a master: %v", err)
			}
			return nil
		}},
		{"writes continue the eventIds", func() error {
			id, err := s.Publish(ctx, []byte("order"), rec("c"), 1)
			if err != nil || id != last+1 {
				return errorf("publish after promotion: id %d %v, want %d", id, err, last+1)
			}
			if id, err := s.CreateTopic(ctx, []byte("new"), 0); err != nil || id != last+2 {
				return errorf("create after promotion: %d %v", id, err)
			}
			return nil
		}},
		{"replicated blocks refused", func() error {
			if _, err := s.ApplyReplicated(ctx, []byte("x")); err == nil {
				return errorf("a master applied a replicated block")
			}
			if _, err := s.LearnEpoch(ctx, 9); !errors.Is(err, ErrNotSlave) {
				return errorf("a master learned an epoch: %v", err)
			}
			return nil
		}},
	}
	for _, st := range steps {
		if err := st.run(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
	}
	// Role and epoch are in meta, so a restart sees them.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, sdir, nil)
	defer s.Close()
	if s.Epoch() != 5 {
		t.Fatalf("epoch after reopen %d", s.Epoch())
	}
	if r, ok, err := s.meta.Role(); err != nil || !ok || r != meta.RoleMaster {
		t.Fatalf("role after reopen %d %v %v", r, ok, err)
	}
	if id, err := s.Publish(ctx, []byte("order"), rec("d"), 1); err != nil || id != last+3 {
		t.Fatalf("publish after reopen: %d %v", id, err)
	}
}

// A promotion continues after the highest id the node holds, including a
// topic the start-up sync copied from the master with an id the slave never
// replicated (as recovery does for a master).
func TestPromoteSkipsSyncedTopicIDs(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), func(o *Options) { o.Slave = true })
	defer s.Close()
	if ok, err := s.SyncTopic(ctx, meta.Topic{Name: "synced", CreateEventID: 40, CreateTime: 1, StateChangeEventID: 40}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := s.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if id, err := s.Publish(ctx, []byte("synced"), rec("x"), 1); err != nil || id != 41 {
		t.Fatalf("first id after promotion %d %v, want 41", id, err)
	}
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }

// The epoch history: a slave adopts its master's, a promotion appends the
// new epoch from the next eventId (once, even when promoted to it again),
// a bad history is refused, and meta keeps it across a restart.
func TestEpochStarts(t *testing.T) {
	ctx := context.Background()
	s, sdir := slaveOfMaster(t)
	if h := s.EpochStarts(); len(h) != 0 {
		t.Fatalf("a new slave's history %v", h)
	}
	master := []protocol.EpochStart{{Epoch: 2, Start: 1}}
	for _, tc := range []struct {
		name    string
		h       []protocol.EpochStart
		changed bool
		bad     bool
	}{
		{"adopt", master, true, false},
		{"the same again", master, false, false},
		{"malformed", []protocol.EpochStart{{Epoch: 3, Start: 9}, {Epoch: 2, Start: 10}}, false, true},
	} {
		ch, err := s.LearnEpochStarts(ctx, tc.h)
		if ch != tc.changed || (err != nil) != tc.bad || (tc.bad && !errors.Is(err, protocol.ErrEpochHistory)) {
			t.Fatalf("%s: LearnEpochStarts(%v) = %v, %v", tc.name, tc.h, ch, err)
		}
	}
	if _, err := s.LearnEpoch(ctx, 2); err != nil {
		t.Fatal(err)
	}
	next := s.LastEventID() + 1
	if _, err := s.PromoteTo(ctx, 4); err != nil {
		t.Fatal(err)
	}
	want := []protocol.EpochStart{{Epoch: 2, Start: 1}, {Epoch: 4, Start: next}}
	if h := s.EpochStarts(); !equalStarts(h, want) {
		t.Fatalf("history after the promotion %v, want %v", h, want)
	}
	if _, err := s.LearnEpochStarts(ctx, master); !errors.Is(err, ErrNotSlave) {
		t.Fatalf("a master adopted a history: %v", err)
	}
	s.Publish(ctx, []byte("order"), rec("c"), 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Restarted as a slave, then promoted to the same epoch again (a
	// cluster master that restarted): the history is unchanged.
	s = openTest(t, sdir, func(o *Options) { o.Slave = true })
	defer s.Close()
	if h := s.EpochStarts(); !equalStarts(h, want) {
		t.Fatalf("history after a restart %v, want %v", h, want)
	}
	if _, err := s.PromoteTo(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if h := s.EpochStarts(); !equalStarts(h, want) {
		t.Fatalf("history after promoting to the same epoch again %v, want %v", h, want)
	}
}

func equalStarts(a, b []protocol.EpochStart) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
