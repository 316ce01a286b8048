// Package meta is the badger (v4) store under <store.path>/meta that holds
// topic meta, the lifetime index, the delay queue, the server role and our
// recovery checkpoint (docs/protocol.md §5.8). The layout is byte-compatible with the
// original server, which ignores prefixes it does not know.
//
// Keys and values (i64 = two's-complement int64):
//
//	norm@ + name                        41 bytes: createTime, expireAt,
//	                                    createEventId, stateChangeTime,
//	                                    stateChangeEventId (i64 LE each),
//	                                    state u8 (0 normal)
//	lf@ + expireAt i64 BE + name        0x00; only when expireAt > 0
//	delay@ + trigger i64 BE             trigger i64 LE + delayEventId i64 LE
//	       + delayEventId i64 LE        + message records (§1.4)
//	       + name
//	global@role                         1 byte: 0 master, 1 slave
//	smss@checkpoint (ours)              24 bytes: binlogFileID, binlogOffset,
//	                                    nextEventID (i64 LE each)
//	smss@epoch (ours)                   8 bytes: promotion epoch (u64 LE)
//
// Only the times inside lf@ and delay@ keys are big-endian, so a prefix scan
// visits lifetimes and delays in time order (for times >= 0, which is all
// real clocks produce). The delay event id stays little-endian as in the
// original: delays with the same trigger time are not ordered by id. A delay
// key is recomputed from its value (or from a delay / delay-apply binlog
// payload, same layout) by reversing the first 8 bytes: DelayKeyFromValue.
//
// Invariants:
//   - A topic has an lf@ entry iff it has a norm@ entry with expireAt > 0,
//     and both carry the same expireAt. PutTopic and DeleteTopic keep them
//     together; DeleteTopic therefore needs the stored Topic.
//   - The "deleted" state (1) is never written: deleting a topic removes its
//     keys (docs/protocol.md §10.2).
//   - The first 16 bytes of every delay@ value equal the key's trigger time
//     and event id. Readers skip (and log) delay@ and lf@ entries that break
//     the layout rather than stopping the scheduler on them; a malformed
//     norm@, role or checkpoint value is an error wrapping ErrMalformed.
//   - Every change goes through a Batch committed as one badger
//     transaction, all or nothing. Batches are written by the single writer
//     only; reads may run concurrently from any goroutine. A transaction
//     holds about 1.2 MiB of in-tree data (Store.Fits tells in advance);
//     Commit fails with ErrBatchTooBig rather than split a batch.
//   - A delay key is written once (event ids are unique) and later deleted,
//     never overwritten.
//   - Values of 64 KiB or more (large delay payloads only) live in badger's
//     value log. Its GC in badger v4.9.6 can resurrect deleted keys, so
//     RunGC wraps it: the delay keys at risk are deleted again after each
//     rewrite, and delay reads and deletions wait for the round (gc.go).
//   - Commit does not fsync (SyncWrites is off). Committed data survives a
//     process crash (badger's WAL is in the page cache); Sync makes it
//     survive a machine crash, and the writer calls it when its durability
//     level or a checkpoint needs that.
package meta
