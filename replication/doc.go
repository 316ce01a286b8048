/*
Package replication implements master/slave replication from the binlog
(docs/protocol.md §4, §11 "replica start eventId").

# Master side

ServeMaster serves one replica request (command 64) on a connection that
the server has already read it from. It resolves the start through the
broker (right after the binlog block whose last eventId is the slave's
eventId; 0 = oldest retained block), then streams every committed block as
one frame each (§4.3):

	c8 00 | 8 zero bytes | uint32 LE B | B bytes: the block exactly as stored

and a 201 alive frame whenever no block arrives within the alive interval.
A start that cannot be resolved gets one 400 frame and the connection stays
usable. Invariants:

  - The stream reads binlog files on its own goroutine; it never blocks or
    slows the writer. A slave that stops reading stalls only its own
    stream, which fails after the write timeout without progress.
  - Anything the slave sends is read while streaming, so its send buffer
    never fills. A slave whose first bytes are the confirmation magic
    (confirm.go: our slave) has its hello and confirm records parsed and
    counted by the SyncTracker (semi-synchronous replication); anything
    else (an original slave sends nothing, the Go ReplicaClient sends
    2-byte acks) is discarded, and that connection never counts. The
    goroutine that reads is stopped (read deadline in the past) and
    joined before ServeMaster returns: nothing reads the socket afterwards
    (§10 item 7).

# Slave side

Slave connects to the master, performs the first-start topic sync (valid
list, command 99) when §4.2 asks for it, sends the 28-byte replica request
and applies every received block through the broker's single writer
(broker.ApplyReplicated), so the slave's binlog is byte-identical to the
master's. Invariants:

  - The position is never kept separately: at start it is the last eventId
    of the last block in the slave's own binlog, afterwards the last
    eventId of the last block applied. A reconnect resumes from it.
  - A block is applied at most once and never skipped: any apply error, a
    400 from the master, or input that breaks the protocol (unknown frame
    code, a block length over the cap, a block that does not decode) stops
    replication for good, loudly (error log, Status state "stopped" with
    the error), until an operator intervenes. Network failures and a
    silent master (no frame within the silence timeout, about twice the
    master's alive interval) only cause a reconnect with capped
    exponential backoff; an unreachable master never ends the process.
  - A frame is applied only once it has been received whole.
  - Once the first frame arrived (the master accepted the stream) the slave
    sends a hello record with its position, and after each apply step one
    confirm record with the last eventId its writer committed (fsynced
    when SlaveOptions.Fsynced). The apply loop writes a record itself
    only when the socket takes it at once; otherwise a sender goroutine
    writes it, coalescing: the apply loop never waits for the network,
    and an original master simply discards them.
  - One goroutine reads, applies and confirms what arrives live; a
    read-ahead goroutine reads while the session catches up (a read fills
    a batch) and hands the reads back at the first batch that does not.
  - A slave follows only a master whose binlog starts with its own, byte
    for byte (diverge.go): every session asks from the block before its
    last local block and compares the first frame with that block; on a
    mismatch a bounded search finds the common prefix and replication
    stops with a DivergenceError (ErrDiverged) naming both positions. The
    tail is moved aside only by an explicit -rejoin (broker.Rewind).
*/
package replication
