// Package broker owns every mutation of a smss data directory: one writer,
// run by one goroutine at a time (the submitter holding its token,
// leader/follower, lead.go), assigns eventIds and appends each group of
// commands to the binlog, then to the topics' own logs, then to the meta
// store (docs/protocol.md §6).
//
// Invariants:
//   - Only the goroutine holding the writer's token touches the binlog
//     writer, the topic writers, the meta store's mutations and the eventId
//     counter.
//   - The binlog is the truth. A group is appended to the binlog first; the
//     topic blocks and meta changes it implies follow. If any of those steps
//     fails, every file touched by the group is truncated back to where the
//     group started and every command of the group fails: nothing of a failed
//     group stays visible, on disk or to readers.
//   - A group is visible to readers (Commit) only after all its steps
//     succeeded, so a reader never sees a block that could still be rolled
//     back. With flushLevel 2 the group's binlog blocks (and meta) are
//     also fsynced before any reply; topic files follow on the flushLevel 1
//     schedule, which fsyncs on a background goroutine so the writer never
//     waits for the device, and the checkpoint moves only after it.
//   - A failed fsync, or a failed rollback, is fatal: the writer stops taking
//     writes and reports on Fatal(); the process must exit.
//   - The checkpoint (meta key smss@checkpoint) names a binlog position up to
//     which topic files and meta are known to agree with the binlog. Start-up
//     recovery replays the binlog from there, idempotently rolling every
//     topic log and meta entry forward to what the binlog says, truncates
//     torn tails, and never reuses an eventId.
//   - Deleting a topic moves its directory into <store>/trash by rename (one
//     atomic step) after the binlog block and the meta removal; trash is
//     emptied in the background and at start-up, and Close waits for those
//     removals. Recovery completes a delete whose binlog block exists, so a
//     crash leaves the whole topic or none.
//   - A topic's message count (TopicStats) is the number of its blocks up to
//     the committed position. The writer counts each group it commits (a
//     few atomic integer operations per topic and group) and then makes it
//     visible; everything else (the files of earlier runs) is counted by
//     one background goroutine, never by a stats call, which reports -1
//     until it is done (package msgcount).
//   - No other package holds the binlog, a topic log or the meta store.
//     They read through methods named for what they need (binlogread.go:
//     the newest binlog block, a block by eventId; background.go: the
//     delay queue, expired topics), and retention removes old files through
//     OldBinlogFiles/RemoveOldBinlogFile and OldTopicFiles/RemoveOldTopicFile
//     (retain.go), which remove only a log's oldest file, never the one
//     being written, and never a file of a topic deleted or re-created
//     since it was listed.
//   - The dedupe window of message ids (dedupe.go) belongs to the writer:
//     a pub or delay whose id was stored within the window is answered
//     with the original's eventId and not staged. It is derived from the
//     binlog (rebuilt at start-up, kept by slaves as they apply) and never
//     persisted.
//
// The message counts and their sidecar files are package msgcount's.
//
// # Files written outside the writer
//
// The writer, with its token, writes the binlog, the topic logs, the meta
// store and the topic directories (the cursor log's compaction included:
// it runs as a post action of the snapshot's group). These paths write
// files without the token, each for the reason given; Close waits for
// each of them but the first, which has no goroutine of its own, and the
// last:
//
//   - Retention (retain.go: RemoveOldBinlogFile, RemoveOldTopicFile, via
//     segment.Log.RemoveFile), on the goroutine of its caller (package
//     lifecycle): it removes only a log's oldest file, never the one being
//     written, under the segment log's own lock, which appends and Close
//     also take, so it cannot race the writer; and it refuses a topic
//     deleted or re-created since the file was listed. Holding the token
//     for it would stall every publish behind an unlink. Its caller stops
//     it before Close (cmd/smss: background.stop).
//   - Trash removal (topicfs.go: removeTrashed; broker.go: emptyTrash), on
//     goroutines of their own: the writer's step of a delete is the rename
//     into <store>/trash; unlinking what was renamed changes nothing a
//     reader or recovery looks at, and takes long for a large topic. Close
//     waits for them (lifecycle.trash).
//   - The disk reserve file (disk.go: adjustReserve), by the disk guard's
//     goroutine and by Open and Close: it must be given back when the
//     disk fills, which is when the writer may be stuck. Close waits for
//     the guard (diskGuard.close).
//   - The instance id file (instance.go: writeInstanceFile), once, by the
//     first caller of InstanceID, under instanceID.mu, atomically (a
//     temporary file, fsync, rename): it is not data of the store, and
//     replication asks for it before the writer may have run.
//   - The message-count sidecars (package msgcount, <n>.cnt beside the
//     topic files), by the counts' goroutine and by Close once the writer
//     stopped (Counts.Finish): a torn or stale sidecar only costs a
//     recount. Close waits for the goroutine (Counts.Finish).
//   - The meta store's own close (closeMeta): badger retries its final
//     flush forever on a full disk, so Close gives up on it after
//     metaCloseTimeout and leaves its goroutine behind; the binlog holds
//     everything acknowledged by then.
//
// # Group commit
//
// A group commit is a fixed sequence of named stages, the rows of
// groupStages (pipeline.go), run in this order by writer.process after it
// admitted the group (admit: the writer's own jobs, a stopped writer and a
// read-only broker are answered at once):
//
//	stage       validate every command, assign eventIds, buffer its blocks (stage.go)
//	fs          topic directories made or moved to the trash
//	binlog      the group's one binlog write
//	topics      one write per topic
//	meta        the group's one meta transaction
//	replicate   flushLevel 2 + semi-sync: the binlog to replica streams before the fsync
//	durable     fsync by flushLevel (durability.go)
//	visible     message counts, then the group visible to readers
//	effects     the staged in-memory effects (topic map, cursor table, hooks)
//	roll        full logs move to their next file
//	checkpoint  flushLevel 0 checkpoint (durability.go)
//	metrics     a committed group counted
//	evict       topic files beyond store.maxOpenTopics closed (lru.go)
//	dedupe      the group's message ids kept or dropped by its outcome
//	reply       submitters woken
//	wake        readers woken
//
// A failure in fs..meta rolls back those stages (each row's undo, in
// reverse) and fails the group's commands; a failure in replicate..checkpoint
// is fatal and fails them; a failure in metrics..evict is fatal but the
// commands keep their success. The features that take part in a group
// commit (dedupe, stored positions, message counts, commit hooks,
// replication) do so at the stages pipeline.go's comment names.
//
// # Lock order
//
// This is the one place the order is written; comments at the locks refer
// here. A goroutine that holds a lock of a line may take a lock of a later
// line, never one of an earlier line:
//
//  1. cursorState.wmu (cursor.go): held across a write to __cursors, that
//     is across queueing a command and waiting for the writer.
//  2. The writer's token (lead.go). It is no mutex but the leading flag
//     under qmu; a goroutine holds it from the moment it is handed the
//     token until it hands it on, and runs writer.process meanwhile. No
//     lock of a later line is held while waiting for it (enqueue, await).
//  3. statsState.cacheMu (stats.go): a stats reader holds it while it
//     read-locks Broker.mu (pruneFigures); the token holder never takes it.
//  4. Broker.mu: written only by the token holder (opening a topic log,
//     adding or removing a topic, shutdown); read by everyone else.
//  5. cursorState.mu: taken by the token holder (stageCursorSnapshot) and
//     under Broker.mu read (CursorList).
//  6. Leaves, held without taking any other lock of this package: qmu (the
//     writer's queue, lead.go; the token holder takes it to collect a
//     group, never while writing), topic.subMu, cursorState.lagMu,
//     replicaSet.mu, statsState's subsMu and delayMu,
//     instanceID.mu, diskGuard.checkMu then diskGuard.mu (in that order),
//     and msgcount.Counts.mu. They may take the locks of lower packages
//     (segment, meta) inside.
//
// The durable hook (SetDurableHook) is called by the token holder; it takes
// only its own lock (the replication tracker's) and, inside it,
// commitGate.mu through SetCommitPoint, and never waits for the token.
package broker
