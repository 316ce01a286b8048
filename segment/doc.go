// Package segment is the file layer shared by the binlog and every topic log:
// a directory of append-only files named "<id>.log" (docs/protocol.md §5.2) with a
// sparse sidecar index "<id>.idx" per file.
//
// Invariants:
//   - File ids are decimal, start at 0 and have no gaps. A process appends
//     only to the file it created itself (id = max existing + 1, created on
//     first append); older files are immutable except for recovery truncation
//     and retention removal.
//   - Blocks never span files. A file is rolled (fsynced, then closed) after
//     the append that makes it reach MaxFileSize.
//   - Readers see only the committed position: the writer publishes it after
//     a whole group of blocks has been appended and can no longer be rolled
//     back. Bytes past it may be torn or about to be truncated.
//   - The index is derived data. An entry is 16 bytes: the first eventId of a
//     block (int64 LE) and the block's offset (int64 LE); one entry is written
//     for the first block of a file and then at most every IndexInterval
//     bytes. Index files are never fsynced and never trusted over the log:
//     every entry used is checked against the block it points to, and a file
//     whose index fails the check, is missing, or falls short of the log (a
//     block after its last entry that the writer would have indexed) is
//     searched by scanning and its index is rebuilt, so that the scan is not
//     repeated by every lookup. Only the Log whose writer may still append to
//     a file writes its index; a ReadOnly view never writes one. Original
//     smss ignores names other than "<id>.log", so the index files do not
//     disturb it.
//   - Lookups (Locate, FirstEventID, LastBlock, NewestBlock) read about an
//     index interval, not a whole read chunk; a Reader's buffer follows what
//     it reads and is freed by Close, so waiting readers hold none.
package segment
