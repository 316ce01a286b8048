// Package delay fires delayed messages (docs/protocol.md §1.5.5, §7.2, §11).
//
// A delay pub (16) is stored by the broker's writer as a delay@ key in meta
// (§5.8) with a binlogged delay block. The Scheduler in this package turns
// each due key into a delay-apply (101) through Broker.ApplyDelay, which
// publishes the records and deletes the key in one commit: the binlog block
// is the truth and recovery replays it, so each delayed message is
// published exactly once, also across kill -9 (the scheduler keeps no state
// of its own that could disagree).
//
// Invariants:
//   - The scheduler sleeps on one timer armed on the earliest trigger time in
//     meta (no polling); the broker's DelayStored hook lowers it when a new
//     delay is due earlier. Messages that fell due while the server was down
//     fire at the first scan, right after start (background.firstExecSecond,
//     1 s by default).
//   - Due entries are fired in (trigger time, delay eventId) order, one at a
//     time, so messages of one topic are published in the order they were
//     due; a scan reads at most Options.Batch entries.
//   - A scan starts at the earliest trigger time not known to be fired
//     (Broker.ScanDelays), so the deletion markers fired delays leave in
//     badger are not stepped over again by every scan; the hook lowers that
//     start for a delay stored with an earlier trigger (a clock stepped
//     back), and a full scan runs at least every Options.Rescan.
//   - Errors back off exponentially (100 ms doubling to 30 s); the scheduler
//     never spins.
//   - It runs on a master only; a slave stores replicated delays, ready for
//     a promotion, and does not fire them.
package delay
