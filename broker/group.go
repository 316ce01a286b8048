package broker

import (
	"runtime"
	"time"
)

// maxGroupMetaBytes bounds the meta entries one group commits in its single
// badger transaction, far below what a transaction can hold with the meta
// store's small memtables (see meta.Store.Fits).
const maxGroupMetaBytes = 256 << 10

// maxGroupYields bounds the scheduling rounds a leader gives submitters to
// join its group.
const maxGroupYields = 4

// gather gives submitters whose requests are already on their way a few
// scheduling rounds to queue them, so a group gathers what arrives together
// instead of writing one request per group. Only a leader that had to
// queue, or that saw contention lately (lead.go), gathers: a lone submitter
// never yields. A round that brings nothing ends the wait.
func (w *writer) gather() {
	w.gathers.Add(1)
	n := w.b.queued()
	for range maxGroupYields {
		runtime.Gosched()
		m := w.b.queued()
		if m == n || m >= w.b.opts.MaxGroup {
			return
		}
		n = m
	}
}

// collect takes the next group off the front of the queue: the first
// command and every one queued behind it, up to the group limits. An
// exclusive command always forms its own group, and a command that must
// start a group of its own stays queued for the next. The token is held.
func (w *writer) collect() []*command {
	b := w.b
	b.qmu.Lock()
	c := b.queue[0]
	w.grp.group = append(w.grp.group[:0], c)
	n := 1
	if !c.exclusive() {
		bytes, metaBytes := c.size(), c.metaSize()
		for n < len(b.queue) && len(w.grp.group) < b.opts.MaxGroup && bytes < b.opts.MaxGroupBytes {
			if !w.join(b.queue[n], &bytes, &metaBytes) {
				break
			}
			n++
		}
		drained := n == len(b.queue) // nothing queued was left out
		b.take(n)
		b.qmu.Unlock()
		if drained && w.gw.expect > len(w.grp.group) && len(w.grp.group) < b.opts.MaxGroup && bytes < b.opts.MaxGroupBytes {
			return w.waitForExpected(bytes, metaBytes)
		}
		w.gw.expect = 0
		return w.grp.group
	}
	b.take(n)
	b.qmu.Unlock()
	return w.grp.group
}

// join adds n to the group and to its byte counts, or reports false when n
// must start a group of its own (exclusive, or too much meta for this one).
func (w *writer) join(n *command, bytes, metaBytes *int) bool {
	if n.exclusive() || *metaBytes+n.metaSize() > maxGroupMetaBytes {
		return false
	}
	w.grp.group = append(w.grp.group, n)
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
// PublishBatch's commands are not counted: their connections send again
// through the batch caller (the server's epoll loop), which is the one
// waiting for this group, so waiting for them could only run out the clock;
// the caller gathers them itself before its next batch.
func (w *writer) expectGroup(synced time.Duration) {
	if w.b.opts.GroupWait <= 0 {
		return
	}
	answered := 0
	for _, c := range w.grp.group {
		if !c.batched {
			answered++
		}
	}
	w.gw.expect, w.gw.expectAt, w.gw.lastSync = answered+w.b.queued(), time.Now(), synced
}

// waitForExpected lets a flushLevel 2 group wait, briefly, for the commands
// expectGroup predicted: without it, concurrent publishers settle into two
// halves that alternate between fsyncs, each paying a device flush for half
// of them. A lone publisher (expectation met) never waits; a stale or unmet
// expectation costs one bounded wait and is then dropped.
func (w *writer) waitForExpected(bytes, metaBytes int) []*command {
	b := w.b
	expect, since := w.gw.expect, time.Since(w.gw.expectAt)
	w.gw.expect = 0
	wait := min(b.opts.GroupWait, w.gw.lastSync/2)
	if wait <= 0 || since > 10*w.gw.lastSync+b.opts.GroupWait {
		return w.grp.group
	}
	w.waits.Add(1)
	defer armTimer(&w.gw.waitTimer, wait).Stop()
	b.qmu.Lock()
	b.arriveWanted = true
	defer func() {
		b.qmu.Lock()
		b.arriveWanted = false
		b.qmu.Unlock()
		select { // a wake-up for the wait that ended
		case <-b.arrive:
		default:
		}
	}()
	for {
		n, full := 0, false
		for n < len(b.queue) && len(w.grp.group) < expect && len(w.grp.group) < b.opts.MaxGroup && bytes < b.opts.MaxGroupBytes {
			if !w.join(b.queue[n], &bytes, &metaBytes) {
				full = true
				break
			}
			n++
		}
		b.take(n)
		b.qmu.Unlock()
		if full || len(w.grp.group) >= expect || len(w.grp.group) >= b.opts.MaxGroup || bytes >= b.opts.MaxGroupBytes {
			return w.grp.group
		}
		select {
		case <-b.arrive:
		case <-w.gw.waitTimer.C:
			return w.grp.group
		}
		b.qmu.Lock()
	}
}
