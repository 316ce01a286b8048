package meta

import (
	"encoding/binary"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// DelayPage is one read of the delay queue by ScanDelays.
type DelayPage struct {
	// Due are the entries with trigger time <= nowMs, in key order, at most
	// limit of them.
	Due []DelayEntry
	// Next is the trigger time of the first usable entry after Due (due or
	// not); HasNext is false when there is none.
	Next    int64
	HasNext bool
}

// ScanDelays is DueDelays plus NextDelayTime in one pass that starts at the
// first key whose trigger time is >= fromMs (fromMs <= 0: the whole queue).
// Fired delays leave deletion markers that every scan from the start of the
// prefix has to step over until compaction drops them; a scheduler that
// knows everything before fromMs was fired seeks past them, so its scans
// cost O(limit) instead of O(entries fired recently). Malformed entries are
// skipped as DueDelays and NextDelayTime skip them.
func (s *Store) ScanDelays(fromMs, nowMs int64, limit int) (DelayPage, error) {
	var p DelayPage
	start := prefixDelay
	if fromMs > 0 {
		start = binary.BigEndian.AppendUint64(append([]byte(nil), prefixDelay...), uint64(fromMs))
	}
	err := s.viewDelays(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixDelay})
		defer it.Close()
		for it.Seek(start); it.Valid(); it.Next() {
			item := it.Item()
			trigger, id, name, err := ParseDelayKey(item.Key())
			if err != nil {
				s.log.Warn("skipping delay entry", "err", err)
				continue
			}
			if trigger > nowMs || len(p.Due) >= limit {
				ok, err := delayOK(item)
				if err != nil {
					return err
				}
				if ok {
					p.Next, p.HasNext = trigger, true
					return nil
				}
				continue
			}
			val, err := item.ValueCopy(nil)
			if err != nil {
				return fmt.Errorf("read delay key %q: %w", item.Key(), err)
			}
			if err := checkDelayEntry(item.Key(), val); err != nil {
				s.log.Warn("skipping delay entry", "err", err)
				continue
			}
			p.Due = append(p.Due, DelayEntry{Key: item.KeyCopy(nil), TriggerTime: trigger, DelayEventID: id, Topic: name, Value: val})
		}
		return nil
	})
	if err != nil {
		return DelayPage{}, fmt.Errorf("scan delays from %d: %w", fromMs, err)
	}
	return p, nil
}
