package replication

// Divergence detection (issue 16): before a slave follows a master it
// establishes that its own binlog is a byte prefix of the master's, using
// only the replica request (64), so that it works against an original smss
// master too.
//
// A probe of local block k asks the master for the stream after block k-1
// (named by its first eventId, which both this and the original master
// resolve) and compares the first frame with block k byte for byte. Every
// session does this for the last local block on the very connection it then
// streams from, so a normal reconnect costs one re-sent block. When it
// fails, a search finds the common prefix: "block k is on the master" is
// monotone (histories are identical up to the fork and differ after it,
// every block carries its eventId and writeTime), so a gallop backwards from
// the end followed by a binary search needs O(log d) probes for a tail of d
// eventIds, each on a fresh connection.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
)

// ErrDiverged is wrapped by the error that stops replication when the
// local binlog is not a byte prefix of the master's.
var ErrDiverged = errors.New("the local binlog has diverged from the master's")

// DefaultMaxProbes bounds the probes of one divergence search: enough for
// a tail of 2^30 eventIds.
const DefaultMaxProbes = 64

// DivergenceError says where the local binlog and the master's part. It
// wraps ErrDiverged and ErrStopped.
type DivergenceError struct {
	Master    string
	LocalLast int64 // last eventId of the local binlog
	// FirstDiff is the first eventId of the first local block the master
	// does not hold byte for byte; At is where that block starts locally.
	FirstDiff int64
	At        segment.Position
	// MasterSays is what the master answered for that block.
	MasterSays string
	// CommonLast is the last eventId of the common prefix (0 when it is
	// empty). Found is false when no common prefix could be established
	// (the master no longer retains it, or the search gave up): then
	// FirstDiff/At describe the lowest block tried and a rejoin is not
	// possible.
	CommonLast int64
	Found      bool
	Probes     int
}

func (e *DivergenceError) Error() string {
	if !e.Found {
		return fmt.Sprintf("%v: this node's binlog ends at eventId %d, but the master %s does not hold its block at eventId %d (it %s), and no common prefix could be established after %d probes; this node cannot rejoin by replication: move its data directory aside and start it as a new slave",
			ErrDiverged, e.LocalLast, e.Master, e.FirstDiff, e.MasterSays, e.Probes)
	}
	return fmt.Sprintf("%v: this node's binlog ends at eventId %d, the master %s %s at eventId %d (the first local block it does not hold byte for byte, binlog position %s); the common prefix ends at eventId %d. Restart with -rejoin to move the divergent tail (eventIds %d..%d) aside into <store.path>/diverged/ and follow the master",
		ErrDiverged, e.LocalLast, e.Master, e.MasterSays, e.FirstDiff, e.At, e.CommonLast, e.FirstDiff, e.LocalLast)
}

// Unwrap lets errors.Is find ErrDiverged and ErrStopped.
func (e *DivergenceError) Unwrap() []error { return []error{ErrDiverged, ErrStopped} }

// localBlock is one block of the local binlog and how to probe it.
type localBlock struct {
	first, last int64
	pos         segment.Position
	raw         []byte
	// anchor is the eventId to send: the first eventId of the block
	// before, or first-1 when this is the oldest local block.
	anchor int64
}

// blockAt returns the local block holding eventId id: the last block whose
// first eventId is <= id, or the oldest block when id is below it.
func blockAt(t Target, id int64) (localBlock, bool, error) {
	blk, ok, err := t.BinlogBlockAt(id)
	if err != nil || !ok {
		return localBlock{}, false, err
	}
	lb := localBlock{first: blk.First, last: blk.Last, pos: blk.Pos, raw: blk.Raw, anchor: blk.First - 1}
	if blk.PrevFirst > 0 {
		lb.anchor = blk.PrevFirst
	}
	return lb, true, nil
}

// lastLocalBlock returns the newest block of the local binlog.
func lastLocalBlock(t Target) (localBlock, bool, error) {
	_, last, err := lastBlockIDs(t)
	if err != nil || last == 0 {
		return localBlock{}, false, err
	}
	return blockAt(t, last)
}

// verdict is the outcome of one probe.
type verdict struct {
	match bool
	says  string // what the master answered, when not a match
	// masterFirst is the first eventId of the block the master sent, 0
	// when it sent none.
	masterFirst int64
	// refused: the master answered 400 (it could not resolve the anchor,
	// or it serves no replication at all); msg is its text.
	refused bool
	msg     string
}

// firstFrame reads the master's first answer to a replica request and
// compares it with lb. A network error is returned as such.
func (s *Slave) firstFrame(br *bufio.Reader, lb *localBlock) (verdict, error) {
	var b batch
	err := s.readFrame(br, &b)
	var be *protocol.BizError
	switch {
	case errors.As(err, &be):
		return verdict{refused: true, msg: be.Msg, says: fmt.Sprintf("answered %q to a replica request from eventId %d", be.Msg, lb.anchor)}, nil
	case err != nil:
		return verdict{}, err
	case len(b.ends) == 0:
		// An alive: nothing follows the anchor on the master.
		return verdict{says: fmt.Sprintf("has nothing after eventId %d", lb.anchor)}, nil
	}
	got := b.buf[:b.ends[0]]
	if bytes.Equal(got, lb.raw) {
		return verdict{match: true}, nil
	}
	v := verdict{masterFirst: blockFirstID(got)}
	if lb.anchor == 0 && v.masterFirst > lb.first {
		// Asked from the beginning, the master starts later: it no
		// longer retains this block, which says nothing about whether it
		// ever had it.
		v.refused = true
		v.says = fmt.Sprintf("no longer holds eventId %d (its oldest block starts at eventId %d)", lb.first, v.masterFirst)
		return v, nil
	}
	if blk, last, _, derr := binlog.DecodeSpan(got); derr == nil {
		v.says = fmt.Sprintf("holds a different block (eventIds %d..%d, written at %d)", blk.EventID, last, blk.WriteTime)
	} else {
		v.says = fmt.Sprintf("holds a different block (%d bytes)", len(got))
	}
	return v, nil
}

// probe asks the master on a fresh connection whether it holds lb.
//
// A replica request whose anchor falls in the master's last block gets no
// frame until the master writes again or sends an alive (30 s by
// default): when the common prefix ends exactly at the master's last
// block, an idle master would hold the search, and a -rejoin start-up,
// that long. So the master's status is asked first: a master whose last
// eventId is at or after the anchor but before lb has nothing to send, and
// that is the verdict.
func (s *Slave) probe(ctx context.Context, lb *localBlock) (verdict, error) {
	if last, ok := s.masterLast(ctx); ok && lb.anchor <= last && last < lb.first {
		return verdict{says: fmt.Sprintf("has nothing after eventId %d (its last eventId is %d)", lb.anchor, last)}, nil
	}
	conn, br, err := s.dial(ctx)
	if err != nil {
		return verdict{}, err
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	req, err := protocol.AppendReplica(nil, lb.anchor)
	if err != nil {
		return verdict{}, err
	}
	if err := writeAll(conn, req, s.opts.RequestTimeout); err != nil {
		return verdict{}, fmt.Errorf("send replica request: %w", err)
	}
	v, err := s.firstFrame(br, lb)
	if err != nil && ctx.Err() != nil {
		return v, ctx.Err()
	}
	return v, err
}

// masterLast asks the master's status (command 34) for its last eventId,
// on its own connection. ok is false when it cannot tell: a failure (the
// replica request that follows meets it too), or a master without the
// command (an original smss), which is not asked again.
func (s *Slave) masterLast(ctx context.Context) (last int64, ok bool) {
	if s.noStatus.Load() {
		return 0, false
	}
	dctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	conn, err := s.opts.DialContext(dctx, "tcp", s.opts.MasterAddr)
	cancel()
	if err != nil {
		return 0, false
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	// A status is answered at once, unlike a replica request: a master
	// that does not is taken not to know it.
	br := bufio.NewReader(&deadlineConn{c: conn, timeout: s.opts.RequestTimeout})
	req, err := protocol.AppendStatus(nil, nil)
	if err != nil {
		return 0, false
	}
	if err := writeAll(conn, req, s.opts.RequestTimeout); err != nil {
		return 0, false
	}
	body, err := protocol.ReadReply(br, protocol.ReplyJSON, maxStatusBytes)
	var be *protocol.BizError
	if errors.As(err, &be) {
		s.noStatus.Store(true)
		s.log.Info("the master has no status command; divergence probes wait for its stream", "masterSays", be.Msg)
		return 0, false
	}
	if err != nil {
		return 0, false
	}
	st, err := protocol.DecodeNodeStatus(body)
	if err != nil {
		return 0, false
	}
	return st.LastEventID, true
}

// maxStatusBytes caps a status reply read by masterLast (a cluster
// master's lists its slaves).
const maxStatusBytes = 1 << 20

func (s *Slave) dial(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	dctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	conn, err := s.opts.DialContext(dctx, "tcp", s.opts.MasterAddr)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("connect to master: %w", err)
	}
	// The first frame may be an alive: wait up to the silence timeout.
	dc := &deadlineConn{c: conn, timeout: s.opts.SilenceTimeout}
	return conn, bufio.NewReaderSize(dc, 64<<10), nil
}

// verifies reports whether a session must check the local binlog: it
// resumes from its own last block (not from -event with a topic sync).
func (s *Slave) verifies() bool { return !s.needSync && s.pos > 0 }

// Check establishes, on its own connections, whether the local binlog is a
// prefix of the master's. It returns nil when it is (or when there is
// nothing local to check), a *DivergenceError when not, and any other
// error when the master could not be asked (unreachable, network).
func (s *Slave) Check(ctx context.Context) error {
	if !s.verifies() {
		return nil
	}
	lb, ok, err := lastLocalBlock(s.t)
	if err != nil {
		return fmt.Errorf("replication: read the last local block: %w", err)
	}
	if !ok {
		return nil
	}
	v, err := s.probe(ctx, &lb)
	if err != nil {
		return err
	}
	if v.match {
		s.log.Info("the local binlog is a prefix of the master's", "lastEventId", lb.last)
		return nil
	}
	if s.cannotVerify(&lb, v) {
		return nil
	}
	return s.search(ctx, lb, v)
}

// cannotVerify reports, and logs, the one case the check cannot decide:
// the last local block is also the oldest (retention removed the ones
// before it), so it is anchored at its first eventId - 1, which only a
// master of this implementation resolves, and an original master (its
// texts for an eventId that starts no block, docs/protocol.md §5.7) refused that. Such
// a slave resumes as it did before the check existed. This
// implementation's refusals name the reason and are searched as usual.
func (s *Slave) cannotVerify(lb *localBlock, v verdict) bool {
	legacy := v.msg == legacyNotFound || strings.HasPrefix(v.msg, "can't find event id")
	if !v.refused || !legacy || lb.anchor != lb.first-1 || lb.anchor == 0 {
		return false
	}
	if oldest, ok, err := s.t.OldestBinlogEventID(); err != nil || !ok || oldest != lb.first {
		return false
	}
	s.log.Warn("cannot check that the local binlog is a prefix of the master's: its last block is also its oldest, and the master refused the eventId before it; resuming unchecked",
		"block", lb.first, "masterSays", v.says)
	return true
}

// search finds the common prefix once the last local block bad turned out
// not to be on the master (v is what the master said about it).
func (s *Slave) search(ctx context.Context, bad localBlock, v verdict) error {
	d := &DivergenceError{Master: s.opts.MasterAddr, LocalLast: bad.last, FirstDiff: bad.first, At: bad.pos, MasterSays: v.says, Probes: 1}
	maxProbes := s.opts.MaxProbes
	s.log.Warn("the master does not hold the last local binlog block; searching for the common prefix",
		"localLast", bad.last, "block", bad.first, "masterSays", v.says)
	oldest, _, err := s.t.OldestBinlogEventID()
	if err != nil {
		return fmt.Errorf("replication: divergence search: %w", err)
	}
	hi, hiV := bad, v
	var lo *localBlock
	// streamed: the master answered at least one probe with a stream (a
	// block or an alive), so it is a replication source whose history
	// differs; a master that refused every probe may be no source at all.
	streamed := !v.refused
	probe := func(c *localBlock) (verdict, error) {
		if d.Probes >= maxProbes {
			return verdict{}, errGiveUp
		}
		pv, err := s.probe(ctx, c)
		if err != nil {
			return pv, err
		}
		d.Probes++
		streamed = streamed || !pv.refused
		loFirst := int64(0)
		if lo != nil {
			loFirst = lo.first
		}
		s.log.Info("divergence search", "probe", d.Probes, "maxProbes", maxProbes, "block", c.first, "match", pv.match,
			"masterSays", pv.says, "matchedUpTo", loFirst, "differsFrom", hi.first)
		return pv, nil
	}
	// Gallop backwards until a block matches. floor/ceil remember the first
	// refused probe below one the master answered with another history:
	// below the master's oldest retained block every probe is refused, so
	// a gallop can jump over a short matching stretch (a master that
	// started as a slave with -event, or pruned more).
	var floor, ceil *localBlock
	var ceilV verdict
	for step := int64(1); lo == nil; step *= 2 {
		if hi.first <= oldest {
			if floor == nil {
				return s.noPrefix(d, hi, hiV, streamed)
			}
			var err error
			if lo, err = s.refine(*floor, ceil, &ceilV, probe); err != nil {
				if errors.Is(err, errGiveUp) || errors.Is(err, errNoMatch) {
					return s.noPrefix(d, hi, hiV, streamed)
				}
				return err
			}
			hi, hiV = *ceil, ceilV
			break
		}
		c, ok, err := blockAt(s.t, max(hi.first-step, oldest))
		if err != nil || !ok {
			return fmt.Errorf("replication: divergence search: read the local binlog: %w", err)
		}
		cv, err := probe(&c)
		if errors.Is(err, errGiveUp) {
			return s.noPrefix(d, hi, hiV, streamed)
		}
		if err != nil {
			return err
		}
		switch {
		case cv.match:
			lo = &c
		case cv.refused && !hiV.refused && floor == nil:
			floor, ceil, ceilV = &c, &localBlock{}, hiV
			*ceil = hi
			fallthrough
		default:
			hi, hiV = c, cv
		}
	}
	// Binary search between the matching lo and the differing hi.
	for {
		nf, ok, err := s.t.NextBinlogBlockFirst(lo.first)
		if err != nil || !ok {
			return fmt.Errorf("replication: divergence search: read the local binlog: %w", err)
		}
		if nf >= hi.first {
			break
		}
		c, ok, err := blockAt(s.t, lo.first+(hi.first-lo.first)/2)
		if err != nil || !ok {
			return fmt.Errorf("replication: divergence search: read the local binlog: %w", err)
		}
		if c.first <= lo.first {
			if c, ok, err = blockAt(s.t, nf); err != nil || !ok {
				return fmt.Errorf("replication: divergence search: read the local binlog: %w", err)
			}
		}
		cv, err := probe(&c)
		if errors.Is(err, errGiveUp) {
			return s.noPrefix(d, hi, hiV, streamed)
		}
		if err != nil {
			return err
		}
		if cv.match {
			lo = &c
		} else {
			hi, hiV = c, cv
		}
	}
	d.Found, d.CommonLast = true, lo.last
	d.FirstDiff, d.At, d.MasterSays = hi.first, hi.pos, hiV.says
	s.log.Error("DIVERGED: the local binlog is not a prefix of the master's", "commonLastEventId", d.CommonLast,
		"firstDifferingEventId", d.FirstDiff, "localLastEventId", d.LocalLast, "masterSays", d.MasterSays, "probes", d.Probes)
	return d
}

var (
	errGiveUp  = errors.New("probe limit reached")
	errNoMatch = errors.New("no matching block")
)

// refine looks for a matching block between floor (refused: taken to be
// below the master's retained history) and ceil (another history there),
// narrowing ceil as it goes. It returns the matching block.
func (s *Slave) refine(floor localBlock, ceil *localBlock, ceilV *verdict,
	probe func(*localBlock) (verdict, error)) (*localBlock, error) {
	for {
		nf, ok, err := s.t.NextBinlogBlockFirst(floor.first)
		if err != nil || !ok {
			return nil, fmt.Errorf("replication: divergence search: read the local binlog: %w", err)
		}
		if nf >= ceil.first {
			return nil, errNoMatch
		}
		c, ok, err := blockAt(s.t, floor.first+(ceil.first-floor.first)/2)
		if err != nil || !ok {
			return nil, fmt.Errorf("replication: divergence search: read the local binlog: %w", err)
		}
		if c.first <= floor.first {
			if c, ok, err = blockAt(s.t, nf); err != nil || !ok {
				return nil, fmt.Errorf("replication: divergence search: read the local binlog: %w", err)
			}
		}
		cv, err := probe(&c)
		if err != nil {
			return nil, err
		}
		switch {
		case cv.match:
			return &c, nil
		case cv.refused:
			floor = c
		default:
			*ceil, *ceilV = c, cv
		}
	}
}

// noPrefix ends a search in which no local block matched down to hi. When
// hi is the very first eventId and the master holds another block 1 there,
// the histories differ from the start: the common prefix is empty.
//
// When the master refused every probe it did not show a different history:
// it may serve no replication (a slave, a user without the replication
// role) or no longer retain the slave's position. That stops replication
// as the master's refusal always did, not as a divergence.
func (s *Slave) noPrefix(d *DivergenceError, hi localBlock, v verdict, streamed bool) error {
	if !streamed {
		return stopped("the master refused replication from the slave's position (%d probes, down to eventId %d): it %s",
			d.Probes, hi.first, v.says)
	}
	d.FirstDiff, d.At, d.MasterSays = hi.first, hi.pos, v.says
	if hi.first == 1 && hi.anchor == 0 && v.masterFirst == 1 && hi.pos.Offset == 0 {
		d.Found, d.CommonLast = true, 0
	}
	s.log.Error("DIVERGED: the local binlog is not a prefix of the master's", "commonPrefixFound", d.Found,
		"firstDifferingEventId", d.FirstDiff, "localLastEventId", d.LocalLast, "masterSays", d.MasterSays, "probes", d.Probes)
	return d
}
