package segment

// Reading one block by eventId, for the replication divergence check,
// which compares a slave's blocks one by one with the master's.

// Block is one whole block of a log and where it lies.
type Block struct {
	First, Last int64    // its first and last eventId
	Pos         Position // where it starts
	Raw         []byte   // its bytes (a copy)
	// PrevFirst is the first eventId of the block before it, 0 when it is
	// the oldest block of the log.
	PrevFirst int64
}

// BlockAt returns the block holding eventId id: the last block whose first
// eventId is <= id, or the oldest block when id is below it; ok=false when
// the log holds no committed block there.
func (l *Log) BlockAt(id int64) (Block, bool, error) {
	loc, err := l.Locate(id)
	if err != nil {
		return Block{}, false, err
	}
	first := loc.PrevFirst
	if loc.BeforeOldest || first == 0 {
		f, ok, err := l.FirstEventID()
		if err != nil || !ok {
			return Block{}, false, err
		}
		first = f
	}
	at, err := l.Locate(first - 1)
	if err != nil {
		return Block{}, false, err
	}
	blk := Block{First: first, Pos: at.Pos}
	if !at.BeforeOldest {
		blk.PrevFirst = at.PrevFirst
	}
	rd := l.NewReader(at.Pos)
	defer rd.Close()
	for blk.Raw == nil {
		n, _, err := rd.Next(1, func(f, last int64, raw []byte, next Position) error {
			blk.First, blk.Last, blk.Raw = f, last, append([]byte(nil), raw...)
			blk.Pos = Position{FileID: next.FileID, Offset: next.Offset - int64(len(raw))}
			return nil
		})
		if err != nil {
			return Block{}, false, err
		}
		if n == 0 && rd.Pos().FileID >= l.Committed().FileID {
			return Block{}, false, nil
		}
	}
	return blk, true, nil
}

// NextBlockFirst returns the first eventId of the block after the one
// starting with first, ok=false at the end of the log.
func (l *Log) NextBlockFirst(first int64) (int64, bool, error) {
	loc, err := l.Locate(first)
	if err != nil {
		return 0, false, err
	}
	rd := l.NewReader(loc.Pos)
	defer rd.Close()
	var got int64
	for got == 0 {
		n, _, err := rd.Next(1, func(f, _ int64, _ []byte, _ Position) error {
			got = f
			return nil
		})
		if err != nil {
			return 0, false, err
		}
		if n == 0 && rd.Pos().FileID >= l.Committed().FileID {
			return 0, false, nil
		}
	}
	return got, true, nil
}
