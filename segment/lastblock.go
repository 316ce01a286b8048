package segment

import "errors"

// Reading the newest block of a file, or of a whole log, without reading
// whole files: retention learns a file's newest time from it, a slave its
// position, the operator views a log's last eventId and its write time.

// LastBlock returns a copy of the last whole block of file id (nil if it has
// none), found from the file's last verifiable index entry rather than by
// reading the whole file. Retention uses it to learn a file's newest time,
// and the operator views a log's last eventId. When the index of a file
// the writer is done with is missing, lies at its end or falls short of the
// log, the one full read that finds the block also rebuilds the index, so
// it is not repeated at every call.
func (l *Log) LastBlock(id int64) ([]byte, error) {
	committed := l.Committed()
	if id > committed.FileID {
		return nil, nil
	}
	size, err := l.sizeOf(id, committed)
	if err != nil {
		return nil, err
	}
	var last []byte
	start, sound := l.lastIndexed(id, size)
	rebuild := l.indexable(id)
	if !sound && rebuild && size > 0 {
		return l.lastBlockRebuilding(id, size)
	}
	gap := l.gapCheck(start)
	_, err = l.scan(id, start, size, func(off, _, _ int64, b []byte) error {
		if rebuild {
			if err := gap(off); err != nil {
				return err
			}
		}
		last = append(last[:0], b...)
		return nil
	})
	if errors.Is(err, errIndexGap) {
		return l.lastBlockRebuilding(id, size)
	}
	return last, err
}

// lastBlockRebuilding is LastBlock by a full read of the file that rebuilds
// its index on the way.
func (l *Log) lastBlockRebuilding(id, size int64) ([]byte, error) {
	l.log.Warn("segment index missing or short of its log; rebuilding", "file", l.indexPath(id))
	var last []byte
	err := l.buildIndex(id, size, func(_ int64, b []byte) { last = append(last[:0], b...) })
	var iwe *indexWriteError
	if errors.As(err, &iwe) {
		// The block was found; only the index is missing still.
		l.log.Warn("segment index not rebuilt", "file", l.indexPath(id), "err", err)
		return last, nil
	}
	return last, err
}

// NewestBlock returns a copy of the newest whole committed block of the
// log and the id of the file holding it; block is nil when the log holds
// none. It reads one block per file from the newest file back (a file may
// be empty), through the files' indexes, never whole files. On an error,
// id is the file that could not be read.
func (l *Log) NewestBlock() (block []byte, id int64, err error) {
	files := l.Files()
	for i := len(files) - 1; i >= 0; i-- {
		raw, err := l.LastBlock(files[i])
		if err != nil {
			return nil, files[i], err
		}
		if raw != nil {
			return raw, files[i], nil
		}
	}
	return nil, 0, nil
}
