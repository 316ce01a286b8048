/*
Package topicblock encodes and decodes topic file blocks (docs/protocol.md §5.6) and
maps topic names to their hashed directories (docs/protocol.md §5.5). It is pure: the
file layer that stores blocks lives elsewhere.

# Block format

A topic file holds one block per message; a pub or delay-apply carrying K
records appends K blocks in a single write. Blocks never span files and
binary integers are little-endian.

	+----------+----------------------------------+-------------------------+
	| length   | command line                     | payload                 |
	| 4 bytes  | length bytes, ASCII, ends in \n  | payloadSize bytes       |
	+----------+----------------------------------+-------------------------+

length is a uint32 holding the byte length of the command line including
its '\n'. The command line is seven '\t'-separated fields:

	ts \t eventId \t saveTime \t payloadSize \t indexOfBatch \t srcFileId \t srcPos \n

	ts            ms when this block was built; delivered to subscribers
	eventId       this message's eventId: the binlog block's eventId + index
	saveTime      ms when the batch entered the topic writer (same for all K)
	payloadSize   record length + 1 for the trailing '\n'
	indexOfBatch  0..K-1, position of the record in its binlog block
	srcFileId     id of the binlog file holding the source block
	srcPos        offset of the start of the source block in that file

srcFileId and srcPos (identical for the K blocks of one batch) tie every
message to its binlog block, which is what crash recovery compares.

Numbers are canonical non-negative decimals (digits only, no sign, padding
or leading zero except "0", at most math.MaxInt64), so decoding and
re-encoding reproduces the bytes. The payload is exactly one message record
(§1.4) followed by '\n': contentSize u32 | headerCount u32 | contentSize
bytes, contentSize > 0, hence payloadSize = contentSize + 9 >= 10.

Example (spec Appendix A), the message with eventId 2 whose binlog block
starts at offset 53 of binlog file 0:

	28 00 00 00  "1795950274738\t2\t1795950274738\t31\t0\t0\t53\n"
	<30-byte record>  0a

DecodeBlock returns the block, an error that is codec.ErrIncomplete (the
buffer is a strict prefix of something that could still be a valid block:
a torn write at end of file) or a *CorruptError (the present bytes prove that no valid block starts
here). It never panics, allocates only to report corruption, and Record
aliases the input.

Whole valid blocks take a one-pass path; anything else goes to the careful
decoder, which names the reason. Both must match the pre-fast-path decoder
frozen in reference_test.go exactly (FuzzDecodeEquivalence), so the fast path
can never widen or narrow what a topic file may contain.

# Directory hashing

Each topic lives in <store.path>/topic/<p1>/<p2>/<name>, where

	p1 = FNV-1a-64(name ++ "talk is cheap, show me your code") mod folderCount
	p2 = FNV-1a-64(name ++ "The world is beautiful")           mod folderCount

with the standard 64-bit FNV-1a parameters and unsigned modulo. The salts
and the formula are fixed by the original server: changing them, or
store.folderCount, orphans every existing topic. With folderCount 10,
"order" maps to 3/3; the info JSON shows it as topicRoot "/3/3/order".
*/
package topicblock
