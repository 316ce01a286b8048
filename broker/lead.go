package broker

// How commands reach the writer: leader/follower group commit (RocksDB's
// WriteThread, MySQL's binlog group commit; issue 24, BENCHMARKS.md).
//
// There is one writer state (writer) and one token to touch it. A submitter
// queues its command; if nobody holds the token it takes it and, on its own
// goroutine, runs the writer for one group: every command queued from the
// front, up to the group limits (collect), staged, written, committed or
// rolled back as one (writer.process, by the stages of groupStages,
// pipeline.go). It then wakes only the submitters of that group and, if
// commands queued meanwhile, hands the token to the first of them, whose
// goroutine runs the next group; else it puts the token down. A lone
// publishing connection thus never wakes a goroutine: it writes its own
// message and replies. Under load a submitter sleeps once, until its group
// is written, as it did with a dedicated writer goroutine, and one
// hand-over per group replaces the writer's wake-up.
//
// The writer goroutine (writer.run) remains for what no submitter asks
// for: the flushLevel 1 flush timer, the end of a background fsync, idle
// work (dedupe expiry, idle file closes, level 0 checkpoints) and the final
// drain. It queues those as commands like any submitter and so takes the
// same token: exactly one goroutine at a time touches writer state, and
// ordering and rollback stay in writer.process. Commands are executed in
// queue order, so eventIds follow the order in which submitters queued.

import (
	"context"
	"fmt"
	"runtime/debug"
)

// Contention decides whether a submitter that finds the token free gathers
// (writer.gather) before writing: each command queued behind a leader adds
// contentionStep, each such free take spends one, up to contentionMax. With
// one publisher nothing is ever queued behind a leader, so it never pays
// for a yield (which wakes an idle thread); with many, one command in
// contentionStep arriving behind a leader keeps the leaders gathering, and
// the groups, and with them the share of commands that queue, grow.
const (
	contentionStep = 8
	contentionMax  = 256
)

// enqueue queues cs (in order) and, when no group is being written, gives
// the token to the first of them; callers then wait with await. internal
// commands (the writer goroutine's) are queued even after Close, which
// queues the final drain that way.
func (b *Broker) enqueue(ctx context.Context, internal bool, cs ...*command) error {
	b.qmu.Lock()
	for !internal && len(b.queue) >= b.opts.BuffSize && !b.closed {
		// worker.buffSize bounds the queue: wait for the writer to take
		// commands off it.
		room := b.room
		b.roomWanted = true
		b.qmu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.qmu.Lock()
	}
	if b.closed && !internal {
		b.qmu.Unlock()
		return ErrClosed
	}
	b.queue = append(b.queue, cs...)
	var lead *command
	gather := false
	if !b.leading {
		b.leading = true
		lead = b.queue[0]
		if b.contention > 0 {
			b.contention--
			gather = true
		}
	} else {
		b.contention = min(b.contention+contentionStep, contentionMax)
		if b.arriveWanted {
			select {
			case b.arrive <- struct{}{}:
			default:
			}
		}
	}
	b.qmu.Unlock()
	if lead != nil {
		// queue was empty (else a leader would be at work), so lead is
		// cs[0]: the caller's own await picks the token up without any
		// goroutine being woken.
		lead.lead, lead.gather = true, gather
		lead.done <- struct{}{}
	}
	return nil
}

// await returns once c has been executed, running groups whenever the
// token is handed to c.
func (b *Broker) await(c *command) {
	for {
		<-c.done
		if !c.lead {
			return
		}
		c.lead = false
		var buf [4]*topic
		// The commit hooks run here, with the token handed on and outside
		// lead's fail-stop guard (subinline.go).
		b.notifyCommits(b.lead(c.gather, buf[:0]))
	}
}

// lead runs one group with the token held (the caller's command is at the
// front of the queue, so it is in that group), then hands the token on. It
// returns notify with the committed topics that have commit hooks appended.
func (b *Broker) lead(gather bool, notify []*topic) []*topic {
	defer failStop()
	w := b.w
	if gather {
		w.gather()
	}
	w.process(w.collect())
	notify = append(notify, w.grp.notify...)
	clear(w.grp.notify)
	w.grp.notify = w.grp.notify[:0]
	b.qmu.Lock()
	if w.life.final {
		// The drain ran: the token is kept for good, for shutdown.
		b.qmu.Unlock()
		return notify
	}
	var next *command
	if len(b.queue) > 0 {
		next = b.queue[0]
	} else {
		b.leading = false
	}
	b.qmu.Unlock()
	if next != nil {
		next.lead, next.gather = true, true
		next.done <- struct{}{}
	}
	return notify
}

// failStop ends the process when the writer panics. A group runs on a
// submitter's goroutine, and callers may recover panics (the server closes
// just the one connection): the writer's state would then be half-changed
// and its token held for good, hanging every later write. A panic of the
// dedicated writer goroutine used to end the process; so does this one.
func failStop() {
	if r := recover(); r != nil {
		stack := debug.Stack()
		go func() { panic(fmt.Sprintf("broker: writer panicked: %v\n%s", r, stack)) }()
		select {} // the panic above ends the process
	}
}

// take removes the first n commands from the queue; b.qmu is held.
func (b *Broker) take(n int) {
	k := copy(b.queue, b.queue[n:])
	clear(b.queue[k:])
	b.queue = b.queue[:k]
	if b.roomWanted {
		close(b.room)
		b.room = make(chan struct{})
		b.roomWanted = false
	}
}

// queued is the number of commands waiting for the writer.
func (b *Broker) queued() int {
	b.qmu.Lock()
	defer b.qmu.Unlock()
	return len(b.queue)
}

// runJob queues one of the writer goroutine's own commands and waits for
// it (running groups meanwhile if handed the token).
func (b *Broker) runJob(op writerOp, r bgSync) {
	c := getCommand()
	defer putCommand(c)
	c.op, c.synced = op, r
	_ = b.enqueue(context.Background(), true, c) // internal: never refused
	b.await(c)
}
