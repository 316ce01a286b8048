package topicblock

import (
	"encoding/binary"
	"strconv"
)

// RunEncoder encodes the topic blocks of one binlog block's records. They
// share ts, saveTime, srcFileId and srcPos (§5.6), so those four decimals
// are formatted once per run instead of once per message; the output is
// byte-identical to AppendBlock's.
type RunEncoder struct {
	head []byte // "<ts>\t"
	mid  []byte // "\t<saveTime>\t"
	tail []byte // "\t<srcFileId>\t<srcPos>\n"
}

// Reset starts a run of blocks with these shared fields.
func (e *RunEncoder) Reset(ts, saveTime, srcFileID, srcPos int64) {
	e.head = append(strconv.AppendInt(e.head[:0], ts, 10), '\t')
	e.mid = append(strconv.AppendInt(append(e.mid[:0], '\t'), saveTime, 10), '\t')
	e.tail = strconv.AppendInt(append(e.tail[:0], '\t'), srcFileID, 10)
	e.tail = append(strconv.AppendInt(append(e.tail, '\t'), srcPos, 10), '\n')
}

// Append appends the block of one record of the run: its eventId, its
// index in the binlog block and its bytes. Like AppendBlock it does not
// validate: the caller supplies non-negative numbers and a valid record.
func (e *RunEncoder) Append(dst []byte, eventID int64, index int, record []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, e.head...)
	dst = strconv.AppendInt(dst, eventID, 10)
	dst = append(dst, e.mid...)
	dst = strconv.AppendInt(dst, int64(len(record))+1, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, int64(index), 10)
	dst = append(dst, e.tail...)
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	dst = append(dst, record...)
	return append(dst, '\n')
}
