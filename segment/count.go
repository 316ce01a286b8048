package segment

import "fmt"

// Counting blocks serves the broker's per-topic message count (a topic
// block is one message, docs/protocol.md §5.6). Like the other read methods these only
// read, so they may run on a ReadOnly view next to the writer's Log.

// CountCheckEvery is about how many bytes CountBlocks reads between two
// calls of its check function: often enough that a count of a large file
// stops promptly, rarely enough to cost nothing.
const CountCheckEvery = 256 << 10

// BlockCount is what CountBlocks found.
type BlockCount struct {
	Blocks int64
	// FirstEventID is the first eventId of the first block counted, 0
	// when there was none.
	FirstEventID int64
}

// CountBlocks counts the whole blocks of file id between from and to, both
// block boundaries (to is never past the committed end for a file that is
// being appended to). check, if set, is called with the offset reached
// about every CountCheckEvery bytes; an error it returns ends the count
// and is returned. Bytes in the range that are not whole blocks give a
// *CorruptError.
func (l *Log) CountBlocks(id, from, to int64, check func(off int64) error) (BlockCount, error) {
	var c BlockCount
	if to < from {
		return c, fmt.Errorf("segment: count %s from %d to %d: empty range", l.Path(id), from, to)
	}
	if to == from {
		return c, nil
	}
	next := from + CountCheckEvery
	_, err := l.scan(id, from, to, func(off, first, _ int64, _ []byte) error {
		if c.Blocks == 0 {
			c.FirstEventID = first
		}
		c.Blocks++
		if check != nil && off >= next {
			next = off + CountCheckEvery
			return check(off)
		}
		return nil
	})
	if err != nil {
		return BlockCount{}, err
	}
	return c, nil
}

// FileFirstEventID returns the first eventId of file id, ok=false when the
// file holds no whole block.
func (l *Log) FileFirstEventID(id int64) (first int64, ok bool, err error) {
	return l.firstID(id)
}
