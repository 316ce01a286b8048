package meta

import (
	"encoding/binary"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// DelayTriggers calls fn with the trigger time of every delay@ entry, in
// key (trigger) order. It reads keys only: values, which may live in the
// value log, are never touched, so counting a large queue for operators
// costs one pass over the LSM keys. Keys too short to hold a trigger time
// are skipped; unlike PendingDelays it does not check that each value
// agrees with its key, so a malformed entry is still counted as pending.
func (s *Store) DelayTriggers(fn func(triggerMs int64)) error {
	err := s.viewDelays(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixDelay, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) < len(prefixDelay)+DelayHeaderSize {
				continue
			}
			fn(int64(binary.BigEndian.Uint64(k[len(prefixDelay):])))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list delay trigger times: %w", err)
	}
	return nil
}
