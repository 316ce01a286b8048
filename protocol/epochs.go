package protocol

import (
	"errors"
	"fmt"
)

// EpochStart says that the eventIds from Start on were assigned by the
// master of Epoch, until the Start of the next entry of a history. A
// node's epoch history (status field "epochs", meta key smss@epochs) is
// the list of them, oldest first: Kafka's leader-epoch cache.
//
// Two nodes that place one eventId in the same epoch hold the same message
// there: one master per epoch (the cluster's consensus, or a promotion
// numbering itself above every master it followed) assigns each eventId
// once. So a position (eventId, epoch) taken from one node is a position
// of another node's history exactly when that node places the eventId in
// that epoch too; otherwise their histories part at or before it
// (ResumePoint).
type EpochStart struct {
	Epoch uint64 `json:"epoch"`
	Start int64  `json:"start"`
}

// ErrEpochHistory is wrapped by the error of an epoch history that breaks
// its invariants.
var ErrEpochHistory = errors.New("malformed epoch history")

// MaxEpochStarts bounds a history: one entry per promotion the node's
// history went through; far more than any cluster makes, small enough to
// check from any input.
const MaxEpochStarts = 1 << 16

// CheckEpochStarts checks a history: epochs above 0 and strictly
// increasing, starts at least 1 and never decreasing (an epoch whose
// master assigned nothing ends where it began), at most MaxEpochStarts.
func CheckEpochStarts(h []EpochStart) error {
	if len(h) > MaxEpochStarts {
		return fmt.Errorf("%w: %d entries, more than %d", ErrEpochHistory, len(h), MaxEpochStarts)
	}
	for i, e := range h {
		if e.Epoch == 0 || e.Start < 1 {
			return fmt.Errorf("%w: entry %d (epoch %d from eventId %d): epoch and start must be positive", ErrEpochHistory, i, e.Epoch, e.Start)
		}
		if i > 0 && (e.Epoch <= h[i-1].Epoch || e.Start < h[i-1].Start) {
			return fmt.Errorf("%w: entry %d (epoch %d from eventId %d) does not follow epoch %d from eventId %d",
				ErrEpochHistory, i, e.Epoch, e.Start, h[i-1].Epoch, h[i-1].Start)
		}
	}
	return nil
}

// EpochOf is the epoch a history places eventId in: that of the last entry
// starting at or before it; 0 before the first entry: the eventIds the
// first master assigned before any promotion (or before its build kept a
// history) are epoch 0's.
func EpochOf(h []EpochStart, eventID int64) uint64 {
	var e uint64
	for _, s := range h {
		if s.Start > eventID {
			break
		}
		e = s.Epoch
	}
	return e
}

// WithPromotion is h after a promotion to epoch whose first eventId is
// next: entries starting at or after next are dropped (they numbered
// eventIds of another master's history that this one will assign anew),
// and the new epoch is appended, unless h already ends with it (a master
// of that epoch promoted again after a restart).
func WithPromotion(h []EpochStart, epoch uint64, next int64) []EpochStart {
	out := make([]EpochStart, 0, len(h)+1)
	for _, s := range h {
		if s.Start < next && s.Epoch < epoch {
			out = append(out, s)
		} else if s.Epoch == epoch {
			out = append(out, s) // the same epoch again: it keeps its start
			return out
		}
	}
	return append(out, EpochStart{Epoch: epoch, Start: next})
}

// EpochStartOf is the entry of h that places eventID (its epoch and where
// that epoch began), the zero EpochStart before the first entry.
func EpochStartOf(h []EpochStart, eventID int64) EpochStart {
	var e EpochStart
	for _, s := range h {
		if s.Start > eventID {
			break
		}
		e = s
	}
	return e
}

// Position is where a consumer is in a history: the last eventId it took,
// the epoch the serving node placed it in, and where that epoch began
// there (EpochStartOf). A consumer served by a node that reports no status
// at all (an original smss) has no Position to check.
type Position struct {
	EventID int64
	Epoch   uint64
	Start   int64
}

// ResumePoint is where a consumer at pos resumes on a node with history
// h. When h places pos.EventID in pos.Epoch, both hold the same messages
// through it (one master per epoch) and it resumes there, ok. Otherwise the histories part at or before it,
// and point is the last eventId they provably share: before h's first
// epoch above the consumer's, before the consumer's epoch began if h never
// had that epoch, and within the part of that epoch h has; the consumer
// takes again what follows it (duplicates of what both share, never a gap).
func ResumePoint(h []EpochStart, pos Position) (point int64, ok bool) {
	if EpochOf(h, pos.EventID) == pos.Epoch {
		return pos.EventID, true
	}
	point = pos.EventID
	had := pos.Epoch == 0 // epoch 0 is every history's first
	for i, s := range h {
		if s.Epoch == pos.Epoch {
			had = true
			if i+1 < len(h) {
				point = min(point, h[i+1].Start-1) // where h's epoch ended
			}
		}
		if s.Epoch > pos.Epoch {
			point = min(point, s.Start-1)
			break
		}
	}
	if !had {
		point = min(point, pos.Start-1)
	}
	return max(point, 0), false
}
