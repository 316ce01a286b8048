package broker

// Inline delivery (issue 24, worker.inlineDeliveries; docs/benchmarks-history.md "Issue
// 24: the low-rate path").
//
// At low rates every message used to cost two thread wake-ups on the
// server: the publisher's goroutine (netpoll), then, once its group
// committed, the subscriber's goroutine waiting in Next (closing the log's
// changed channel readies it, and the scheduler wakes an idle thread to run
// it, which then parks again). A subscription with a commit hook does not
// wait on that channel while it is idle: its server parks it, and the
// goroutine that committed a group to the topic calls the hook right after
// the group, so the hook can poll Next and write the frame itself when the
// subscriber is caught up and its socket takes the frame without blocking.
// The parking, and every fallback to the subscriber's own goroutine, are
// the hook owner's (server/subinline.go); the broker only promises:
//
//   - every commit of a topic's messages, by whatever goroutine commits it
//     (a publisher leading a group, the writer goroutine, a slave's
//     applier), calls every registered hook of that topic once, after the
//     commit's readers were woken (its Changed channel is closed by then);
//   - hooks run after the committer handed the writer token on and outside
//     the writer's fail-stop guard: a hook never delays the next group, and
//     a panic in one is the hook's to recover, not a writer panic;
//   - at most Options.InlineDeliveries hooks per commit are told to serve
//     inline; the others are told to wake their subscriber's goroutine, so
//     that one commit never writes to many sockets in turn;
//   - a hook may still be called once after Close (a committer may have
//     loaded the list just before): it must then do nothing.

// DefaultInlineDeliveries is the default of Options.InlineDeliveries
// (worker.inlineDeliveries): a few subscribers per commit are served on the
// committing goroutine; more are woken, so that a commit to a topic with
// many idle subscribers writes to few sockets in turn and the rest are
// served in parallel by their own goroutines.
const DefaultInlineDeliveries = 4

// SetCommitHook registers fn to be called after every commit of the
// topic's messages (see above) until Close. inline tells fn whether it may
// serve the subscriber itself; fn reports whether it used that (claimed a
// parked subscriber), which spends one of the commit's inline deliveries.
// It returns false, registering nothing, when inline delivery is off.
func (s *Subscription) SetCommitHook(fn func(inline bool) bool) bool {
	if s.b.opts.InlineDeliveries <= 0 || s.b.commit.on || fn == nil || s.hook != nil {
		return false
	}
	s.hook = fn
	t := s.t
	t.subMu.Lock()
	var hs []*Subscription
	if old := t.hooks.Load(); old != nil {
		hs = append(hs, *old...)
	}
	hs = append(hs, s)
	t.hooks.Store(&hs)
	t.subMu.Unlock()
	return true
}

// dropHook unregisters the commit hook (Close).
func (s *Subscription) dropHook() {
	if s.hook == nil {
		return
	}
	t := s.t
	t.subMu.Lock()
	defer t.subMu.Unlock()
	old := t.hooks.Load()
	if old == nil {
		return
	}
	hs := make([]*Subscription, 0, len(*old))
	for _, h := range *old {
		if h != s {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		t.hooks.Store(nil)
		return
	}
	t.hooks.Store(&hs)
}

// Changed returns the channel the topic's next commit closes. A caller
// that parks its subscription takes it before the poll (Next with no wait)
// that found nothing, and checks it after parking: a commit between the
// poll and the park closed it, and its hooks may have run before the park.
func (s *Subscription) Changed() <-chan struct{} { return s.t.log.Changed() }

// Rest closes the subscription's file while it is idle (as Next does when
// its wait passes); the next Next reopens it.
func (s *Subscription) Rest() { s.reader.Close() }

// notifyCommits calls the commit hooks of the topics a group committed
// (writer.notify, taken by lead). It runs on the committing goroutine once
// the writer token is handed on.
func (b *Broker) notifyCommits(ts []*topic) {
	budget := b.opts.InlineDeliveries
	for _, t := range ts {
		hs := t.hooks.Load()
		if hs == nil {
			continue
		}
		for _, s := range *hs {
			if s.hook(budget > 0) {
				budget--
			}
		}
	}
}
