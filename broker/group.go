package broker

import (
	"runtime"
	"time"
)

// maxGroupMetaBytes bounds the meta entries one group commits in its single
// badger transaction, far below what a transaction can hold with the meta
// store's small memtables (see meta.Store.Fits).
const maxGroupMetaBytes = 256 << 10

// maxGroupYields bounds the scheduling rounds the writer gives submitters
// to join a group.
const maxGroupYields = 4

// collect starts a group with c and adds every command already waiting,
// up to the group limits. An exclusive command always forms its own group.
func (w *writer) collect(c *command) []*command {
	w.group = append(w.group[:0], c)
	if c.exclusive() {
		return w.group
	}
	bytes, metaBytes := c.size(), c.metaSize()
	yields := 0
	for len(w.group) < w.b.opts.MaxGroup && bytes < w.b.opts.MaxGroupBytes {
		if len(w.b.ch) == 0 && yields < maxGroupYields {
			// Connections whose requests are already on their way get
			// a few scheduling rounds to enqueue them, so a group
			// gathers what arrives together instead of committing one
			// request per write and fsync. A round that brings nothing
			// ends the wait.
			yields++
			runtime.Gosched()
			if len(w.b.ch) == 0 {
				yields = maxGroupYields
			}
		}
		select {
		case n := <-w.b.ch:
			if !w.join(n, &bytes, &metaBytes) {
				return w.group
			}
		default:
			return w.waitForExpected(bytes, metaBytes)
		}
	}
	return w.group
}

// join adds n to the group and to its byte counts, or, when n must start
// a group of its own (exclusive, or too much meta for this one), keeps it
// as pending and reports false.
func (w *writer) join(n *command, bytes, metaBytes *int) bool {
	if n.exclusive() || *metaBytes+n.metaSize() > maxGroupMetaBytes {
		w.pending = n
		return false
	}
	w.group = append(w.group, n)
	*bytes += n.size()
	*metaBytes += n.metaSize()
	return true
}

// armTimer makes *t fire after d, creating it the first time: waits that
// recur per message reuse one timer instead of allocating one each.
func armTimer(t **time.Timer, d time.Duration) *time.Timer {
	if *t == nil {
		*t = time.NewTimer(d)
	} else {
		(*t).Reset(d)
	}
	return *t
}

// expectGroup records, after a flushLevel 2 fsync, how many commands the
// next group should hold: the ones just answered (their connections are
// about to send again) plus the ones that queued behind the fsync.
func (w *writer) expectGroup(answered int, synced time.Duration) {
	if w.b.opts.GroupWait <= 0 {
		return
	}
	w.expect, w.expectAt, w.lastSync = answered+len(w.b.ch), time.Now(), synced
}

// waitForExpected lets a flushLevel 2 group wait, briefly, for the commands
// expectGroup predicted: without it, concurrent publishers settle into two
// halves that alternate between fsyncs, each paying a device flush for half
// of them. A lone publisher (expectation met) never waits; a stale or unmet
// expectation costs one bounded wait and is then dropped.
func (w *writer) waitForExpected(bytes, metaBytes int) []*command {
	expect, since := w.expect, time.Since(w.expectAt)
	w.expect = 0
	wait := min(w.b.opts.GroupWait, w.lastSync/2)
	if expect <= len(w.group) || wait <= 0 || since > 10*w.lastSync+w.b.opts.GroupWait {
		return w.group
	}
	w.waits.Add(1)
	defer armTimer(&w.waitTimer, wait).Stop()
	for len(w.group) < expect && len(w.group) < w.b.opts.MaxGroup && bytes < w.b.opts.MaxGroupBytes {
		select {
		case n := <-w.b.ch:
			if !w.join(n, &bytes, &metaBytes) {
				return w.group
			}
		case <-w.waitTimer.C:
			return w.group
		}
	}
	return w.group
}
