package replication

// The tracker's non-blocking side, for a server that answers many
// connections from one goroutine (the server's epoll loop). Wait parks its
// caller until the write is confirmed; a loop cannot park, so it holds the
// reply and asks again: Settle says whether the outcome is known now,
// Expire gives the outcome once the write's time is up, and WakeAt arms a
// callback for the moment the confirmed position reaches a given eventId.
// The outcomes are exactly Wait's (the same checks, counters and log
// lines), so a reply means the same whichever path sent it.

import "time"

// Settle reports whether the outcome of the write at eventID is known
// without waiting, and that outcome: what Wait would return at once (a nil
// tracker, Slaves 0, nothing written, a fence, a confirmation already
// there, a degraded tracker). done false means Wait would block: hold the
// reply, and ask again when woken (WakeAt) or call Expire at the
// deadline (Timeout after the write).
func (t *SyncTracker) Settle(eventID int64) (done bool, err error) {
	if t == nil || t.need == 0 || eventID <= 0 {
		return true, nil
	}
	if err := t.fenced(); err != nil {
		return true, err
	}
	t.mu.Lock()
	done = t.settledLocked(eventID)
	t.mu.Unlock()
	if !done {
		return false, nil
	}
	return true, t.fenced()
}

// settledLocked is the part of Wait's fast path under the lock: the write
// is confirmed, or the tracker is degraded (the write is then answered
// 200 unconfirmed and counted as such).
func (t *SyncTracker) settledLocked(eventID int64) bool {
	if t.kth >= eventID {
		return true
	}
	if t.degraded {
		// Answered 200: make it visible as the acknowledged write it is.
		t.raiseCommitLocked(t.last())
		t.unconfirmed.Add(1)
		return true
	}
	return false
}

// Expire is the outcome of a write whose Timeout passed unsettled: what
// Wait returns when its timer fires (ErrNotConfirmed, or nil in degrade
// mode, which then turns the tracker asynchronous), or Settle's outcome if
// the write was confirmed meanwhile.
func (t *SyncTracker) Expire(eventID int64) error {
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
	return t.timedOutLocked(eventID)
}

// timedOutLocked counts and answers a write whose wait timed out; it
// releases t.mu.
func (t *SyncTracker) timedOutLocked(eventID int64) error {
	if !t.degrade {
		t.mu.Unlock()
		t.timeoutsFail.Add(1)
		t.logTimeout(eventID)
		return t.biz
	}
	t.timeoutsDeg.Add(1)
	t.unconfirmed.Add(1)
	t.enterDegradedLocked()
	t.raiseCommitLocked(t.last())
	t.mu.Unlock()
	t.logTimeout(eventID)
	return nil
}

// Timeout is how long a write may wait for its confirmations
// (replication.syncTimeoutMs).
func (t *SyncTracker) Timeout() time.Duration {
	if t == nil {
		return 0
	}
	return t.timeout
}

// SetWaker sets the function WakeAt arms. It is called with the tracker's
// lock held, from a replica connection's reader or a waiter's timeout: it
// must not block nor call back into the tracker (an eventfd write).
func (t *SyncTracker) SetWaker(fn func()) {
	t.mu.Lock()
	t.waker = fn
	t.mu.Unlock()
}

// WakeAt arms the waker for the moment the write at eventID settles: the
// confirmed position reaches it, or the tracker degrades (every write then
// settles). It reports true, arming nothing, when that is already so, so
// that a caller that checked with Settle before cannot miss a
// confirmation that came in between. One position is armed at a time; the
// waker is called once per arming.
func (t *SyncTracker) WakeAt(eventID int64) (settled bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.kth >= eventID || t.degraded {
		t.wakeAt = 0
		return true
	}
	t.wakeAt = eventID
	return false
}

// wakeLocked calls the waker if what it was armed for happened.
func (t *SyncTracker) wakeLocked() {
	if t.wakeAt == 0 || t.waker == nil || (t.kth < t.wakeAt && !t.degraded) {
		return
	}
	t.wakeAt = 0
	t.waker()
}

// Holding adds n (negative: releases) to the writes waiting for
// confirmations outside Wait, for the waiting gauge (status, metrics).
func (t *SyncTracker) Holding(n int) {
	if t != nil {
		t.waiting.Add(int64(n))
	}
}
