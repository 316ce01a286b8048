package replication

import (
	"encoding/binary"
	"fmt"

	"github.com/smssmq/smss/binlog"
)

// lastBlockIDs returns the first and last eventId of the last block of t's
// binlog, (0, 0) for an empty binlog.
func lastBlockIDs(t Target) (first, last int64, err error) {
	blk, ok, err := t.NewestBinlogBlock()
	if err != nil || !ok {
		return 0, 0, err
	}
	if last, err = blk.LastEventID(); err != nil {
		return 0, 0, fmt.Errorf("last binlog block (eventId %d): %w", blk.EventID, err)
	}
	return blk.EventID, last, nil
}

// blockFirstID returns field 3 (eventId) of a block's command line, or 0
// when the bytes do not hold one. The broker validates blocks; this is only
// a cheap look at a block that was already applied.
func blockFirstID(raw []byte) int64 {
	if len(raw) < 4 {
		return 0
	}
	n := int(binary.LittleEndian.Uint32(raw))
	if n > len(raw)-4 || n > binlog.MaxLineLen {
		return 0
	}
	line := raw[4 : 4+n]
	field := 0
	var v int64
	for _, c := range line {
		if c == '\t' {
			field++
			if field == 3 {
				return v
			}
			continue
		}
		if field == 2 {
			if c < '0' || c > '9' || v > (1<<62)/10 {
				return 0
			}
			v = v*10 + int64(c-'0')
		}
	}
	return 0
}
