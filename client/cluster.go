package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/smssmq/smss/protocol"
)

// This file holds what a Client does with several addresses (finding the
// master) and the retry loop every call goes through.

// role is what a probe learnt about one address.
type role uint8

const (
	roleUnreachable role = iota
	// roleUnknown: the server does not answer status (an original smss) or
	// refused it; only sending the request tells whether it is the master.
	roleUnknown
	roleSlave
	roleMaster
)

type probeResult struct {
	role  role
	epoch uint64
	// view is the node's cluster view (smss -role auto); nil otherwise.
	view *protocol.ClusterView
	// instance is the node's data-directory instance id ("" from a build
	// without it): two addresses of one node are not two masters.
	instance string
	err      error // why unreachable or unknown
}

// newest is the highest epoch the node knows of: its own, or the one its
// cluster view names (a node that learnt of a newer election before it
// acted on it).
func (p probeResult) newest() uint64 {
	if p.view != nil && p.view.Epoch > p.epoch {
		return p.view.Epoch
	}
	return p.epoch
}

// proven reports a master that proves it is the current one: a cluster
// node whose own view names it master at its epoch, not fenced (so it
// holds the cluster's lease).
func (p probeResult) proven() bool {
	return p.role == roleMaster && p.view != nil && p.view.Node != "" && p.view.Master == p.view.Node &&
		p.view.Epoch == p.epoch && p.view.Fenced == ""
}

func (p probeResult) String() string {
	switch p.role {
	case roleMaster:
		if p.view != nil && p.view.Fenced != "" {
			return fmt.Sprintf("master (epoch %d, fenced: %s)", p.epoch, p.view.Fenced)
		}
		if p.newest() > p.epoch {
			return fmt.Sprintf("master (epoch %d; its cluster is at epoch %d)", p.epoch, p.newest())
		}
		return fmt.Sprintf("master (epoch %d)", p.epoch)
	case roleSlave:
		return fmt.Sprintf("slave (epoch %d)", p.newest())
	case roleUnknown:
		return fmt.Sprintf("role unknown (%v)", p.err)
	}
	return p.err.Error()
}

// callKind says where a request may go and whether sending it twice is
// harmless.
type callKind uint8

const (
	// readCall: topic info, list, alive. Any server, repeatable.
	readCall callKind = iota
	// manageCall: create, delete. The master; repeated only when it was
	// certainly not applied.
	manageCall
	// publishCall: pub, delay. The master; repeatable when the request
	// carries a message id.
	publishCall
)

type policy struct {
	kind  callKind
	hasID bool
	// idempotent: applying the request twice has the effect of once (a
	// queue group created again with the same settings), so a retry after
	// a lost reply is harmless.
	idempotent bool
}

func (p policy) needMaster() bool { return p.kind != readCall }

func (p policy) repeatable() bool { return p.kind == readCall || p.hasID || p.idempotent }

// notSentError marks a failure before the request was written (no
// connection could be had), so repeating it cannot store anything twice.
type notSentError struct{ err error }

func (e notSentError) Error() string { return e.err.Error() }
func (e notSentError) Unwrap() error { return e.err }

// do runs one call: it picks the server, sends req and retries within the
// budget as the policy allows. The whole call is bounded by ctx (or
// RequestTimeout when ctx has no deadline), each attempt also by
// AttemptTimeout. req is sent byte for byte the same on every attempt, so
// a retry carries the same message id and traceId.
func (c *Client) do(ctx context.Context, op, topic string, req []byte, kind protocol.ReplyKind, pol policy) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	retries := c.opts.MaxRetries
	if pol.kind != publishCall && len(c.addrs) == 1 {
		// One address: the other calls behave as they always did.
		retries = 0
	}
	for attempt := 0; ; attempt++ {
		i, err := c.target(ctx, pol.needMaster())
		var body []byte
		if err == nil {
			body, err = c.attempt(ctx, i, topic, req, kind, retries > 0)
			if err == nil {
				if pol.needMaster() {
					c.setMaster(i)
				}
				return body, nil
			}
			err = c.wrapAt(op, topic, c.addrs[i], err)
		} else {
			err = c.wrap(op, topic, err)
		}
		if ctx.Err() != nil {
			// The caller's context ended (or the call's RequestTimeout):
			// stop at once, whatever the failure allows.
			return nil, err
		}
		retry, forget := c.retryable(err, pol)
		if i >= 0 && forget {
			c.forget(i, err)
		}
		if !retry {
			return nil, err
		}
		if attempt >= retries {
			if retries == 0 {
				return nil, err
			}
			return nil, fmt.Errorf("%w (%d attempts); last: %w", ErrRetriesExhausted, attempt+1, err)
		}
		wait := backoff(c.opts.RetryBackoff, c.opts.MaxRetryBackoff, attempt)
		c.opts.Logger.Debug("smss client: retrying", "op", op, "topic", topic, "attempt", attempt+1, "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w while waiting to retry; last: %w", ctx.Err(), err)
		case <-c.pool.stop:
			t.Stop()
			return nil, fmt.Errorf("%w; last: %w", ErrClosed, err)
		case <-t.C:
		}
	}
}

// attempt sends req once to server i and reads its reply. AttemptTimeout
// bounds it only when a retry may follow: otherwise the call's own
// deadline is the only limit, as before there were retries.
func (c *Client) attempt(ctx context.Context, i int, topic string, req []byte, kind protocol.ReplyKind, retrying bool) ([]byte, error) {
	if retrying && c.opts.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.AttemptTimeout)
		defer cancel()
	}
	p := c.pools[i]
	cn, err := p.get(ctx)
	if err != nil {
		return nil, notSentError{err}
	}
	body, err := cn.roundTrip(ctx, req, kind, c.opts.MaxReplyBytes, c.opts.RequestTimeout, topic)
	// An original server closes the connection after "don't support
	// action" (docs/protocol.md §11): pooling it would fail the next call.
	p.put(cn, err != nil && (!IsServerError(err) || errors.Is(err, ErrNotSupported)))
	return body, err
}

// retryable decides whether a failed attempt may be repeated, and whether
// the server it went to must stop being taken for the master.
func (c *Client) retryable(err error, pol policy) (retry, forget bool) {
	var se *ServerError
	var pe permanentError
	var ns notSentError
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, ErrPoolTimeout), errors.As(err, &pe):
		// Local conditions, or a failure (TLS trust, no auth support) that
		// the same request meets again.
		return false, false
	case errors.Is(err, ErrNoMaster):
		// Nothing was sent; a master may appear (a slave being promoted).
		return true, false
	case errors.As(err, &se):
		switch se.kind {
		case kindNotMaster:
			// A slave refused it: nothing was stored, another server may
			// be the master.
			return len(c.addrs) > 1, true
		case kindNotConfirmed, kindFenced:
			// Stored on that master, which may no longer be the master
			// (its slaves gone with a failover, or it was fenced): look for
			// the master again. Only a message id makes a retry safe.
			return pol.repeatable(), true
		}
		// Any other refusal repeats itself.
		return false, false
	case errors.As(err, &ns):
		// No connection: nothing was sent.
		return true, true
	}
	// Lost connection, timeout, malformed reply: the request may or may not
	// have been applied.
	return pol.repeatable(), true
}

// target returns the index of the server a call goes to.
func (c *Client) target(ctx context.Context, needMaster bool) (int, error) {
	if len(c.addrs) == 1 {
		return 0, nil
	}
	if i := c.knownMaster(); i >= 0 {
		return i, nil
	}
	// One discovery at a time: concurrent calls after a failover wait for
	// its result instead of each probing every server.
	select {
	case c.discovering <- struct{}{}:
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	defer func() { <-c.discovering }()
	if i := c.knownMaster(); i >= 0 {
		return i, nil
	}
	return c.discover(ctx, needMaster)
}

// discover asks every server its status, in parallel, each probe bounded
// by ProbeTimeout, and returns the master to use:
//
//   - A master proven current (a cluster node that by its own view is the
//     master of its epoch, not fenced) whose epoch is at least every epoch
//     answered so far is taken as soon as it answers: a hung node does not
//     delay it.
//   - Otherwise, once every probe answered or ran out: the master with the
//     highest epoch, provided no node answered a newer epoch (its own or
//     its cluster view's); a master behind that is stale and never taken.
//
// Without one it returns, in rotation order from the cursor, a server
// whose role is unknown (to be tried by sending the request), or for a
// read any reachable slave of the newest epoch.
func (c *Client) discover(ctx context.Context, needMaster bool) (int, error) {
	n := len(c.addrs)
	c.mu.Lock()
	start := c.cursor
	noStatus := append([]bool(nil), c.noStatus...)
	c.mu.Unlock()
	order := make([]int, n)
	for k := range n {
		order[k] = (start + k) % n
	}
	res := make([]probeResult, n)
	answered := make([]bool, n)
	type answer struct {
		i int
		r probeResult
	}
	pctx, cancel := context.WithTimeout(ctx, c.opts.ProbeTimeout)
	// Probes still running when a master is chosen are cut short.
	defer cancel()
	answers := make(chan answer, n)
	pending := 0
	for i := range n {
		if noStatus[i] {
			res[i], answered[i] = probeResult{role: roleUnknown, err: ErrNoStatus}, true
			continue
		}
		pending++
		go func() { answers <- answer{i, c.probe(pctx, i)} }()
	}
	for pending > 0 {
		select {
		case a := <-answers:
			res[a.i], answered[a.i] = a.r, true
			pending--
		case <-ctx.Done():
			return -1, ctx.Err()
		}
		if best := chooseMaster(res, answered, order, pending == 0); best >= 0 {
			if err := c.twoMasters(res, answered, best); err != nil {
				return -1, err
			}
			c.setMaster(best)
			return best, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	if best := chooseMaster(res, answered, order, true); best >= 0 {
		if err := c.twoMasters(res, answered, best); err != nil {
			return -1, err
		}
		c.setMaster(best)
		return best, nil
	}
	for _, i := range order {
		if res[i].role == roleUnknown {
			return i, nil
		}
	}
	newest := newestEpoch(res, answered)
	if !needMaster {
		for _, i := range order {
			if res[i].role == roleSlave && res[i].newest() >= newest {
				return i, nil
			}
		}
	}
	var b strings.Builder
	for i, r := range res {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %v", c.addrs[i], r)
		if r.role == roleMaster && r.epoch < newest {
			fmt.Fprintf(&b, " [stale: a node reports epoch %d]", newest)
		}
	}
	return -1, fmt.Errorf("%w among %d addresses (%s)", ErrNoMaster, n, b.String())
}

// newestEpoch is the highest epoch the answered probes know of.
func newestEpoch(res []probeResult, answered []bool) uint64 {
	var e uint64
	for i, r := range res {
		if answered[i] && r.role >= roleSlave {
			e = max(e, r.newest())
		}
	}
	return e
}

// chooseMaster picks, in order, a master of the newest epoch answered so
// far (see discover): a proven one at any time, any one once all probes
// are in (final). -1: none (yet).
func chooseMaster(res []probeResult, answered []bool, order []int, final bool) int {
	newest := newestEpoch(res, answered)
	best := -1
	for _, i := range order {
		r := res[i]
		if !answered[i] || r.role != roleMaster || r.epoch < newest || r.newest() > r.epoch {
			continue
		}
		if r.proven() {
			return i
		}
		if best < 0 {
			best = i
		}
	}
	if final {
		return best
	}
	return -1
}

// twoMasters refuses best when another answered node is a master of its
// epoch too (ErrTwoMasters): of two at one epoch neither is known to be
// the current one. A proven cluster master is never refused: its
// consensus gives each epoch one master.
func (c *Client) twoMasters(res []probeResult, answered []bool, best int) error {
	if res[best].proven() {
		return nil
	}
	other := rivalMaster(res, answered, best)
	if other < 0 {
		return nil
	}
	return fmt.Errorf("%w: %s and %s are both masters of epoch %d; writing to either could lose what the other takes "+
		"when one rejoins: make one follow the other (smssctl follow), or use a cluster (-role auto)",
		ErrTwoMasters, c.addrs[best], c.addrs[other], res[best].epoch)
}

// rivalMaster is another answered master of best's epoch on another node
// (-1: none).
func rivalMaster(res []probeResult, answered []bool, best int) int {
	b := res[best]
	for i, r := range res {
		if i == best || !answered[i] || r.role != roleMaster || r.epoch != b.epoch || r.newest() > r.epoch {
			continue
		}
		if b.instance != "" && r.instance == b.instance {
			continue // the same node at two addresses
		}
		return i
	}
	return -1
}

// probe asks server i for its status on a pooled connection.
func (c *Client) probe(ctx context.Context, i int) probeResult {
	p := c.pools[i]
	cn, err := p.get(ctx)
	if err != nil {
		return probeResult{role: roleUnreachable, err: err}
	}
	req, err := protocol.AppendStatus(nil, traceID(ctx))
	if err != nil {
		p.put(cn, false)
		return probeResult{role: roleUnknown, err: err}
	}
	body, err := cn.roundTrip(ctx, req, protocol.ReplyJSON, c.opts.MaxReplyBytes, c.opts.ProbeTimeout, "")
	if errors.Is(err, ErrNotSupported) {
		// An original server: it closes the connection after this
		// refusal (docs/protocol.md §11), so the connection is not pooled, and it is
		// not asked again until a call to it fails.
		p.put(cn, true)
		c.mu.Lock()
		c.noStatus[i] = true
		c.mu.Unlock()
		return probeResult{role: roleUnknown, err: ErrNoStatus}
	}
	p.put(cn, err != nil && !IsServerError(err))
	if err != nil {
		if IsServerError(err) {
			// E.g. permission denied: the server is up, its role unknown.
			return probeResult{role: roleUnknown, err: err}
		}
		return probeResult{role: roleUnreachable, err: err}
	}
	st, err := ParseNodeStatus(body)
	if err != nil {
		return probeResult{role: roleUnknown, err: err}
	}
	r := probeResult{role: roleSlave, epoch: st.Epoch, view: st.Cluster, instance: st.Instance}
	if st.IsMaster() {
		r.role = roleMaster
	}
	return r
}

func (c *Client) knownMaster() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.master
}

func (c *Client) setMaster(i int) {
	c.mu.Lock()
	changed := c.master != i
	c.master = i
	c.mu.Unlock()
	if changed && len(c.addrs) > 1 {
		c.opts.Logger.Info("smss client: using master", "addr", c.addrs[i])
	}
}

// forget stops taking server i for the master after a failure there; the
// next call finds the master again, starting after i. A server that could
// not be reached is asked its status again next time (it may have been
// replaced by a newer version).
func (c *Client) forget(i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.master == i {
		c.master = -1
		if len(c.addrs) > 1 {
			c.opts.Logger.Warn("smss client: master failed, looking for the master again", "addr", c.addrs[i], "err", err)
		}
	}
	c.cursor = (i + 1) % len(c.addrs)
	if !IsServerError(err) {
		c.noStatus[i] = false
	}
}

// Master returns the address of the server last known to be the master:
// the one that answered status as master or accepted the last write. It is
// "" before the first write with several addresses, and after a failure of
// the master until it is found again. With one address it is that address.
func (c *Client) Master() string {
	if len(c.addrs) == 1 {
		return c.addrs[0]
	}
	if i := c.knownMaster(); i >= 0 {
		return c.addrs[i]
	}
	return ""
}

// Addrs returns the client's addresses in the order they are tried.
func (c *Client) Addrs() []string { return append([]string(nil), c.addrs...) }

// addrList is the address given to Dial followed by extra, without empty
// strings and duplicates.
func addrList(first string, extra []string) []string {
	var out []string
	for _, a := range append([]string{first}, extra...) {
		a = strings.TrimSpace(a)
		if a == "" || slices.Contains(out, a) {
			continue
		}
		out = append(out, a)
	}
	return out
}
