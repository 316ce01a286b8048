// Package alarm runs a background job at the time it asks for, the "time
// trigger" of docs/protocol.md §7.1/§7.2 without its defects (§10 item 20).
//
// Invariants:
//   - One goroutine runs the job; runs never overlap.
//   - Between runs the goroutine sleeps on one timer armed on the earliest
//     known due time: the time the last run returned, lowered by Set (the
//     broker's commit hooks). Nothing polls; MaxSleep only bounds how long a
//     missed hook can go unnoticed.
//   - Set never blocks: an atomic minimum plus a non-blocking send on a
//     one-slot channel. A Set that lands while the job runs is kept, so a due
//     time committed during a run is never lost.
//   - A failing run (error or panic) is retried after an exponential backoff
//     (MinBackoff doubling up to MaxBackoff, reset by a successful run);
//     Set does not cut a backoff short, so a failing disk cannot make the job
//     spin.
package alarm
