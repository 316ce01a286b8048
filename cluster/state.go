package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// State is the cluster metadata every node holds in its FSM: who is master,
// of which epoch, and which slaves the master must hear from before it
// answers a write. It changes only through the raft log.
type State struct {
	// Epoch only grows; it is assigned only by an applied Elect.
	Epoch uint64 `json:"epoch"`
	// Master is the node id of the master of Epoch; "" before the first
	// election.
	Master string `json:"master"`
	// ISR is the in-sync set, sorted by node id; the master is never in it.
	ISR []Member `json:"isr"`
	// Version is the raft index of the last applied change (0: none yet).
	Version uint64 `json:"version"`
	// Reason says why the last change happened.
	Reason string `json:"reason"`
}

// Member is one slave of the in-sync set.
type Member struct {
	Node string `json:"node"`
	// Instance is the slave's data-directory instance id (12 hex digits):
	// a node whose data directory was replaced is a different member.
	Instance string `json:"instance"`
	// Eligible: the member provably holds every acknowledged write, so it
	// may be elected (design "ack rule": set by MarkEligible only).
	Eligible bool `json:"eligible"`
	// Added is the raft index of the ISRAdd that admitted this instance;
	// MarkEligible needs a master report that adopted at least it.
	Added uint64 `json:"added"`
}

// Clone returns a deep copy (the ISR slice is not shared).
func (s State) Clone() State {
	s.ISR = slices.Clone(s.ISR)
	return s
}

// Member returns the ISR member of node id, if any.
func (s State) Member(node string) (Member, bool) {
	for _, m := range s.ISR {
		if m.Node == node {
			return m, true
		}
	}
	return Member{}, false
}

// Command operations (the op field of an encoded command).
const (
	OpElect        = "elect"
	OpISRAdd       = "isrAdd"
	OpISRRemove    = "isrRemove"
	OpMarkEligible = "markEligible"
)

// Command is one entry of the raft log. Every command carries the Epoch and
// Version of the state it was decided on; the FSM applies it only if the
// state still has both (compare-and-set), so a decision taken on a state
// that has changed since — by another controller, or by this one — is
// refused instead of applied twice.
type Command struct {
	Op      string `json:"op"`
	Epoch   uint64 `json:"epoch"`
	Version uint64 `json:"version"`
	// Node: the elected master (elect) or the member concerned (others).
	Node string `json:"node"`
	// NewEpoch (elect): the epoch of the new master, > Epoch. It may jump
	// past Epoch+1 when a data node already knows a higher epoch (a manual
	// promote before the cluster existed), so that no node refuses it.
	NewEpoch uint64 `json:"newEpoch,omitempty"`
	// Instance (isrAdd): the member's data-directory instance id.
	Instance string `json:"instance,omitempty"`
	// AfterVersion (markEligible): the Added of the member it marks; a
	// member re-admitted since (another instance) is not marked by it.
	AfterVersion uint64 `json:"afterVersion,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// commandFormat is the first byte of every encoded command, so that the
// encoding can change without old entries being misread.
const commandFormat = 1

// maxCommandBytes bounds a command; real ones are a few hundred bytes.
const maxCommandBytes = 64 << 10

// ErrMalformed is returned by DecodeCommand for bytes that are not a valid
// command.
var ErrMalformed = errors.New("cluster: malformed command")

// EncodeCommand returns the log bytes of c.
func EncodeCommand(c Command) ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode command: %w", err)
	}
	return append([]byte{commandFormat}, b...), nil
}

// DecodeCommand parses log bytes; every structural problem is ErrMalformed
// (wrapped with what is wrong). It never panics, whatever the input.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if len(b) == 0 {
		return c, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if b[0] != commandFormat {
		return c, fmt.Errorf("%w: unknown format %d", ErrMalformed, b[0])
	}
	if len(b) > maxCommandBytes {
		return c, fmt.Errorf("%w: %d bytes (at most %d)", ErrMalformed, len(b), maxCommandBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b[1:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Command{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return Command{}, fmt.Errorf("%w: trailing data", ErrMalformed)
	}
	if err := c.check(); err != nil {
		return Command{}, err
	}
	return c, nil
}

// check validates what can be checked without the state.
func (c Command) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s %s", ErrMalformed, c.Op, fmt.Sprintf(format, args...))
	}
	if err := checkNodeID(c.Node); err != nil {
		return bad("node: %v", err)
	}
	if len(c.Reason) > 1024 {
		return bad("reason of %d bytes", len(c.Reason))
	}
	switch c.Op {
	case OpElect:
		if c.NewEpoch <= c.Epoch {
			return bad("newEpoch %d not above epoch %d", c.NewEpoch, c.Epoch)
		}
	case OpISRAdd:
		if !validInstance(c.Instance) {
			return bad("instance %q is not 12 hex digits", c.Instance)
		}
	case OpISRRemove:
	case OpMarkEligible:
		if c.AfterVersion == 0 {
			return bad("afterVersion 0")
		}
	default:
		return fmt.Errorf("%w: unknown op %q", ErrMalformed, c.Op)
	}
	return nil
}

// checkNodeID accepts the ids config.Cluster accepts: 1 to 64 bytes of
// letters, digits, '-', '_' and '.'.
func checkNodeID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("id %q must have 1 to 64 characters", id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("id %q: only letters, digits, '-', '_' and '.'", id)
		}
	}
	return nil
}

func validInstance(s string) bool {
	if len(s) != 12 {
		return false
	}
	for i := range len(s) {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// ErrStale is wrapped by the FSM's refusal of a command decided on a state
// that has changed since.
var ErrStale = errors.New("cluster: stale command")

// ErrRefused is wrapped by the FSM's refusal of a command the current state
// does not allow (electing a non-eligible member, removing a non-member).
var ErrRefused = errors.New("cluster: command refused")

// apply returns the state after c, applied at raft index index, or an error
// (ErrStale or ErrRefused) and s unchanged. It is deterministic: it reads
// only s, c and index, so every node computes the same state.
func apply(s State, c Command, index uint64) (State, error) {
	if c.Epoch != s.Epoch || c.Version != s.Version {
		return s, fmt.Errorf("%w: %s %s decided at epoch %d version %d, state is at epoch %d version %d",
			ErrStale, c.Op, c.Node, c.Epoch, c.Version, s.Epoch, s.Version)
	}
	refuse := func(format string, args ...any) (State, error) {
		return s, fmt.Errorf("%w: %s %s: %s", ErrRefused, c.Op, c.Node, fmt.Sprintf(format, args...))
	}
	n := s.Clone()
	n.Version, n.Reason = index, c.Reason
	switch c.Op {
	case OpElect:
		if s.Master != "" {
			// Only an eligible member holds every acknowledged write.
			m, ok := s.Member(c.Node)
			if !ok {
				return refuse("not in the ISR of epoch %d", s.Epoch)
			}
			if !m.Eligible {
				return refuse("in the ISR but not eligible yet")
			}
			n.ISR = slices.DeleteFunc(n.ISR, func(m Member) bool { return m.Node == c.Node })
		} else if len(s.ISR) != 0 {
			return refuse("no master but a non-empty ISR")
		}
		n.Epoch, n.Master = c.NewEpoch, c.Node
	case OpISRAdd:
		if s.Master == "" {
			return refuse("no master yet")
		}
		if c.Node == s.Master {
			return refuse("the master is never in its own ISR")
		}
		m := Member{Node: c.Node, Instance: c.Instance, Added: index}
		i := slices.IndexFunc(n.ISR, func(m Member) bool { return m.Node == c.Node })
		switch {
		case i >= 0 && n.ISR[i].Instance == c.Instance:
			return refuse("instance %s already in the ISR", c.Instance)
		case i >= 0:
			// Another data directory on the same node: it replaces the
			// old member (which no longer exists) and starts ineligible.
			n.ISR[i] = m
		default:
			n.ISR = append(n.ISR, m)
			slices.SortFunc(n.ISR, func(a, b Member) int { return compareString(a.Node, b.Node) })
		}
	case OpISRRemove:
		i := slices.IndexFunc(n.ISR, func(m Member) bool { return m.Node == c.Node })
		if i < 0 {
			return refuse("not in the ISR")
		}
		n.ISR = slices.Delete(n.ISR, i, i+1)
	case OpMarkEligible:
		i := slices.IndexFunc(n.ISR, func(m Member) bool { return m.Node == c.Node })
		switch {
		case i < 0:
			return refuse("not in the ISR")
		case n.ISR[i].Added != c.AfterVersion:
			return refuse("member was admitted at version %d, not %d", n.ISR[i].Added, c.AfterVersion)
		case n.ISR[i].Eligible:
			return refuse("already eligible")
		}
		n.ISR[i].Eligible = true
	}
	return n, nil
}

func compareString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkState validates a decoded snapshot.
func checkState(s State) error {
	if s.Master == "" && (s.Epoch != 0 || len(s.ISR) != 0) {
		return errors.New("no master but an epoch or an ISR")
	}
	if s.Master != "" {
		if err := checkNodeID(s.Master); err != nil {
			return fmt.Errorf("master: %w", err)
		}
	}
	for i, m := range s.ISR {
		if err := checkNodeID(m.Node); err != nil {
			return fmt.Errorf("isr: %w", err)
		}
		if !validInstance(m.Instance) {
			return fmt.Errorf("isr: member %s instance %q", m.Node, m.Instance)
		}
		if m.Node == s.Master {
			return fmt.Errorf("isr: holds the master %s", m.Node)
		}
		if i > 0 && s.ISR[i-1].Node >= m.Node {
			return fmt.Errorf("isr: not sorted or duplicate at %s", m.Node)
		}
	}
	return nil
}
