// Package msgcount counts the messages of each topic: the number of topic
// blocks (one per message, docs/protocol.md §5.6) in a topic's log files
// up to the end the writer counted, which metrics.TopicStats.Messages
// reports. It is named for what it counts, messages, as opposed to the
// bytes and files the broker's other figures measure; it is part of the
// broker (only the broker imports it) but holds no rule of its own about
// what is written: it only reads what the writer appended.
//
// Where the counts come from:
//
//   - Blocks the broker's writer appends in this process are counted by
//     the writer itself (Counter.Add) as it commits each group: per topic
//     and group, a few atomic integer operations and nothing per message.
//     Counting them instead in the stats path, from the last counted
//     offset to the committed one, would read back every byte written
//     (twice the page-cache traffic and a decode per block, at the
//     server's full write rate, whenever anyone watches), which is what
//     the writer already knows for free.
//   - Files that existed before (the previous runs', and the part of a
//     file that start-up recovery appended to) are counted by one
//     background goroutine per Counts, through a read-only view, never
//     inline in a stats call. Until every file of a topic is counted its
//     count is unknown (-1).
//   - A file that can no longer change (a later file is counted, or the
//     writer stopped) gets a sidecar "<id>.cnt" (format below) so that
//     the next start reads 36 bytes instead of the file.
//
// Invariants:
//
//   - Only the writer appends to a topic's log once the broker is open
//     (recovery is over before Start), and it calls Counter.Add for every
//     group it appended, before making the group visible to readers and
//     never for a group it rolls back. So the counted end of a log is
//     never behind its committed end, and a file the writer appended to
//     from offset from holds, from there to the counted end, exactly the
//     blocks the Counter counted.
//   - Counted offsets are block boundaries of bytes that never change:
//     a count resumes from them, and a file below the counted end's file
//     is final (its size is its count's end).
//   - A stats call (Messages) never reads a file: it sums what is known
//     or answers -1 and wakes the background goroutine.
//   - Counts belong to one topic incarnation: a deleted and re-created
//     topic starts from zero, and the sidecars of the old one never reach
//     the new one's directory (Source.Live).
//   - Sidecars are derived data: trusted only when they decode and
//     describe the file's current size and first eventId; anything else
//     costs a recount, never a wrong count.
//
// Memory per topic is the writer's ring (Ring slots) plus one small
// record per log file.
//
// Count sidecar "<id>.cnt", next to a topic file "<id>.log" that no longer
// changes, so that a restart need not read the file to count it. Written
// in place by the background goroutine or by Finish, never fsynced (it is
// derived data: a torn one fails its checksum), removed when retention
// removes its file; original smss ignores such names. 36 bytes:
//
//	0  8  magic "smsscnt1"
//	8  8  int64 LE  size of the .log file it describes, in bytes
//	16 8  int64 LE  whole blocks (messages) in those bytes
//	24 8  int64 LE  eventId of the file's first block, 0 for an empty file
//	32 4  uint32 LE CRC-32C (Castagnoli) of bytes 0..31
//
// A sidecar is trusted only if it decodes (length, magic, checksum, sane
// figures) and its size and first eventId are those of the file as it is
// at the first look of this process, which a truncation, a file removed
// and re-created under the same id, or a stray copy does not survive;
// otherwise it is removed and the file counted again.
package msgcount
