/*
Package binlog encodes and decodes binlog blocks (docs/protocol.md §5.3, §5.4). It is a
pure codec: the file and segment layer that stores blocks lives elsewhere.

# Block format

A binlog file is a sequence of blocks with no header, padding or checksum.
Blocks never span files. Every integer in binary form is little-endian.

	+----------+----------------------------------+-------------------------+
	| length   | command line                     | payload                 |
	| 4 bytes  | length bytes, ASCII, ends in \n  | payloadLen bytes        |
	+----------+----------------------------------+-------------------------+

length is a uint32 holding the byte length of the command line including
its terminating '\n'. The command line is six fields separated by single
'\t' bytes:

	writeTime \t cmd \t eventId \t timestamp \t topic \t payloadLen \n

	writeTime   ms when the master's writer processed the command (a slave
	            copies the master's value)
	cmd         1 pub, 2 create, 3 delete, 16 delay, 101 delay apply
	eventId     eventId of the command, or of the first message it carries
	timestamp   ms when the request was received (101: when the scheduler
	            created it)
	topic       raw topic name bytes
	payloadLen  payload byte count + 1 for the trailing '\n'; 0 if there
	            is no payload

Numbers are canonical non-negative decimals: digits only, no sign, no
padding, no leading zero except "0" itself, at most math.MaxInt64. Because
the form is canonical, decoding and re-encoding a block reproduces its bytes
exactly, which replication relies on (a slave's binlog is byte-identical to
the master's). The topic may be any bytes without '\t' or '\n': replicated
data from an original master may hold names that this implementation would
refuse to create, so name rules are checked by the caller, not here.

The payload, when present, is the command's data followed by one '\n' that
the writer appends; Block.Payload excludes that '\n'.

# Payload per command

	cmd  payload before the '\n'                              payloadLen  eventIds
	1    message records exactly as received (§1.4)          R+1         K
	2    expireAt int64 (0 = permanent)                      9           1
	3    none; no '\n' either                                0           1
	16   trigger time int64 | this command's eventId int64   16+R+1      1
	     | records
	101  the stored delay value: trigger time int64          16+R+1      K
	     | the original delay command's eventId int64
	     | records

A record set (R bytes) is one or more message records back to back. A
record is contentSize uint32 | headerCount uint32 | contentSize bytes of
headers and body, with contentSize > 0; a set never leaves 1..8 trailing
bytes (the walk of protocol.CountRecords). K is the number of records. A block consumes the eventIds
EventID .. EventID+K-1 where K is Block.MessageCount; eventIds are strictly
increasing across blocks but not dense.

Example (spec Appendix A), create of "order" with eventId 1, 53 bytes:

	28 00 00 00  "1795950274737\t2\t1\t1795950274737\torder\t9\n"
	00 00 00 00 00 00 00 00  0a

# Decoding and torn writes

DecodeBlock is strict so that the end of the valid data in a file can be
found after a crash. For a buffer that starts at a block boundary it
returns exactly one of:

  - the block and its total length, when the bytes are a whole valid block;
  - an error that is codec.ErrIncomplete (errors.Is), when the buffer is
    a strict prefix of something that could still become a valid block
    (at end of file: a torn write);
  - a *CorruptError, when the present bytes already prove that no valid
    block starts here (bad length prefix, a non-digit in a number field,
    a wrong field count, payloadLen inconsistent with cmd, a payload that
    is not a valid record set, a missing trailing '\n', an unknown cmd, a
    delay payload whose embedded eventId differs from field 3, ...).

The command line is at most MaxLineLen bytes and payloadLen at most
MaxPayloadLen, so a reader can bound its buffer before trusting a block.
DecodeBlock never panics and allocates only to report corruption; Topic and
Payload alias the input.

Whole valid blocks take a one-pass path; anything else goes to the careful
decoder, which names the reason. Both must match the pre-fast-path decoder
frozen in reference_test.go exactly (FuzzDecodeEquivalence), so the fast path
can never widen or narrow what a binlog, and so a replica, may contain.
*/
package binlog
