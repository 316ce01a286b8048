package cluster

import (
	"context"
	"errors"
	"fmt"
)

// ErrSwitchover is wrapped by a switchover that could not complete (the
// target did not catch up in time, another switchover is pending).
var ErrSwitchover = errors.New("cluster: switchover")

// switchover hands the request to the controller loop and waits for its
// answer: the applied Elect, a refusal, or ctx done.
func (c *controller) switchover(ctx context.Context, target string) error {
	req := &switchReq{ctx: ctx, target: target, resp: make(chan error, 1)}
	select {
	case c.switchCh <- req:
	case <-c.stopped:
		return &NotLeaderError{}
	case <-ctx.Done():
		return fmt.Errorf("%w to %s: %w", ErrSwitchover, target, ctx.Err())
	}
	select {
	case err := <-req.resp:
		return err
	case <-c.stopped:
		select {
		case err := <-req.resp: // answered on the way out
			return err
		default:
			return &NotLeaderError{}
		}
	case <-ctx.Done():
		// The loop drops the request at its next round (ctx is its own).
		return fmt.Errorf("%w to %s: target did not catch up with the master: %w", ErrSwitchover, target, ctx.Err())
	}
}

// checkTarget: only an eligible ISR member can be switched to.
func checkTarget(st State, target string) error {
	if target == st.Master {
		return fmt.Errorf("%w to %s: already the master of epoch %d", ErrSwitchover, target, st.Epoch)
	}
	m, ok := st.Member(target)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s is not in the ISR of epoch %d", ErrNotEligible, target, st.Epoch)
	case !m.Eligible:
		return fmt.Errorf("%w: %s is in the ISR but not eligible yet", ErrNotEligible, target)
	}
	return nil
}

func (c *controller) acceptSwitchover(req *switchReq) error {
	if c.sw != nil && c.sw.ctx.Err() != nil {
		c.sw.resp <- fmt.Errorf("%w to %s: %w", ErrSwitchover, c.sw.target, c.sw.ctx.Err())
		c.sw = nil // its caller gave up
	}
	if c.sw != nil {
		return fmt.Errorf("%w to %s: a switchover to %s is pending", ErrSwitchover, req.target, c.sw.target)
	}
	if err := checkTarget(c.n.fsm.State(), req.target); err != nil {
		return err
	}
	c.log.Info("cluster: switchover requested", "target", req.target)
	c.sw = req
	return nil
}

// trySwitchover elects the pending switchover's target once it reached the
// master's last eventId in the same round (the master healthy); it drops a
// request whose caller gave up or whose target is no longer eligible.
func (c *controller) trySwitchover(st State, mr Report) *Command {
	req := c.sw
	if req == nil {
		return nil
	}
	if err := req.ctx.Err(); err != nil {
		c.sw = nil
		req.resp <- fmt.Errorf("%w to %s: %w", ErrSwitchover, req.target, err)
		return nil
	}
	if err := checkTarget(st, req.target); err != nil {
		c.sw = nil
		req.resp <- err
		return nil
	}
	tp := c.cur[req.target]
	m, _ := st.Member(req.target)
	if !tp.ok || tp.rep.Instance != m.Instance || tp.rep.LastEventID < mr.LastEventID {
		return nil // not caught up yet: wait for a later round
	}
	c.sw = nil
	cands := c.candidates(st)
	var best *candidate
	for i := range cands {
		if cands[i].id == req.target {
			best = &cands[i]
		}
	}
	c.answer = req.resp
	return c.elect(st, best, cands, fmt.Sprintf("switchover from %s requested, %s caught up", st.Master, req.target))
}
