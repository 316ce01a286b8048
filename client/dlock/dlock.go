package dlock

import (
	"context"
	"errors"

	"github.com/smssmq/smss/client"
)

var (
	// ErrNotAcquired: the lock is held by another owner.
	ErrNotAcquired = errors.New("dlock: lock is held by another owner")
	// ErrLeaseLost: the lease no longer owns the lock.
	ErrLeaseLost = errors.New("dlock: lease lost")
)

// Locker hands out leases on one lock.
type Locker interface {
	// TryAcquire makes one attempt. It returns ErrNotAcquired when another
	// owner holds the lock and another error when the store could not be
	// asked (nothing is then held).
	TryAcquire(ctx context.Context) (Lease, error)
}

// Lease is held ownership of a lock, renewed in the background until
// released or lost.
type Lease interface {
	// Lost is closed when the holder must stop acting as the owner: the
	// lease was released, taken over, or could not be renewed in time.
	// It is closed before the lock can expire in the store.
	Lost() <-chan struct{}
	// Release stops the renewal and deletes the lock if this lease still
	// owns it. Lost is closed when Release returns.
	Release(ctx context.Context) error
}

// GroupStore is a Locker whose leases also guard the group's progress.
type GroupStore interface {
	Locker
	// Progress returns the last eventId the group saved; ok is false when
	// nothing was saved yet.
	Progress(ctx context.Context) (eventID int64, ok bool, err error)
	// SaveProgress stores eventID as the group's progress if lease still
	// owns the lock (else ErrLeaseLost). A smaller value than the stored
	// one is ignored.
	SaveProgress(ctx context.Context, lease Lease, eventID int64) error
}

// PositionStore is a GroupStore that also keeps the epoch of the group's
// progress (client.Position, docs/protocol.md §4.7), so that a holder
// taking over after a failover that changed the history resumes where the
// histories part instead of skipping the new master's messages. A group
// uses it when its Store implements it.
type PositionStore interface {
	GroupStore
	// Position returns the saved progress with its epoch; known is false
	// when it was saved without one (SaveProgress, an older client), ok
	// false when nothing was saved.
	Position(ctx context.Context) (pos client.Position, known, ok bool, err error)
	// SavePosition is SaveProgress with the epoch. A position of another
	// epoch than the stored one replaces it even when lower: the
	// subscription resumed before it because the history changed.
	SavePosition(ctx context.Context, lease Lease, pos client.Position) error
}
