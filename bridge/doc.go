/*
Package bridge mirrors smss topics into NATS JetStream or Kafka
(docs/bridge.md); cmd/smss-bridge is its command.

A Bridge reads an smss master's binlog as a replica reader: it sends the
28-byte replica request (docs/protocol.md §4.2), and only to a master whose
status says "replica":3 a reader's hello and its epoch after the first
frame (docs/protocol.md §4.6), so the master never takes it for a
confirming slave. From such a master it reads commit frames and holds
every block above the commit point until the point passes it
(read-committed delivery: the target, where nothing can be taken back,
gets only what a failover keeps). Every binlog block is decoded (a block
that does not decode stops the bridge for good), and the messages of
publish (1) and delay-apply (101) blocks of the selected topics are
published to a Target in binlog order, with a bounded number in flight.
Delay (16) blocks are not mirrored: the message goes out when it is
applied. Creates and deletes are logged.

# Exactly once without a state file

Every published message carries its eventId, its block's first eventId
and CRC-32C, and a safe position: the last eventId of a block up to which
everything mirrored had been acknowledged when the message was sent. On
every (re)start the bridge reads the last message of each lane of the
target (Target.Marks), resumes the binlog after the largest safe position
(always a block's end, as docs/protocol.md §11 requires for the replica start), reads
back the messages the lanes hold above it (Target.Tail; at most the
in-flight window) and skips exactly those when the binlog replays them.
A replayed block whose first eventId a lane recorded must have the same
CRC, or the master's history has diverged from what was mirrored (a
failover to a slave that lacked the last writes) and the bridge stops.

Targets keep their lanes gapless: JetStream publishes name their
predecessor (expected last message id / sequence), and Kafka's idempotent
producer fails the rest of a partition after a failed batch.
*/
package bridge
