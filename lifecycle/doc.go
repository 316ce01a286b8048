// Package lifecycle runs the time-based jobs that remove things: the topic
// expiry reaper (docs/protocol.md §7.1, §11 "expired topics") and old-file retention
// (§7.3, §11 "retention").
//
// Reaper invariants:
//   - It sleeps on one timer armed on the earliest expireAt in meta (no
//     polling); the broker's TopicExpiry hook lowers it when a topic with an
//     earlier lifetime is created. Errors back off (lifecycle/alarm).
//   - A topic is removed by Broker.ExpireTopic, a normal binlogged delete
//     that slaves replicate and that ends its subscriptions with 255. The
//     delete names the expireAt it was scheduled for, so a topic deleted and
//     re-created under the same name in the meantime is never reaped early.
//   - It runs on a master only; a slave follows the master's deletes.
//
// Retention invariants:
//   - A file's age is the time of its newest message (the last block's
//     writeTime in the binlog, ts in a topic file), not its mtime.
//   - Only the oldest files of a log are removed, oldest first, so the files
//     that remain are always a contiguous suffix; the file being written is
//     never removed. The broker lists and removes them (Broker.OldBinlogFiles,
//     RemoveOldBinlogFile, OldTopicFiles, RemoveOldTopicFile) and enforces
//     this; retention decides when, and how many a slave keeps.
//   - A binlog file a connected slave still reads is kept, up to
//     MaxSlaveKeepFiles such files; beyond that the oldest are removed with a
//     warning naming the slave's position (the slave must then resync).
//   - Readers positioned in a removed file get an error naming the problem
//     from the broker (a 400 on the wire), never a silent skip.
package lifecycle
