package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	badger "github.com/dgraph-io/badger/v4"
)

// DelayEntry is one due delayed message as found by DueDelays.
type DelayEntry struct {
	Key          []byte
	TriggerTime  int64
	DelayEventID int64
	Topic        string
	// Value is the full delay@ value: trigger, event id, message records.
	// It is also the payload of the delay-apply command.
	Value []byte
}

// view runs fn in a read-only transaction on an open store.
func (s *Store) view(fn func(txn *badger.Txn) error) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	return s.db.View(fn)
}

// viewDelays is view for reads of delay@ entries, which must not see the
// inside of a value-log GC round (gc.go).
func (s *Store) viewDelays(fn func(txn *badger.Txn) error) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	return s.db.View(fn)
}

// get returns a copy of the value under key, or ok=false when it is absent.
func (s *Store) get(key []byte) (val []byte, ok bool, err error) {
	err = s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		val, err = item.ValueCopy(nil)
		return err
	})
	return val, ok, err
}

// Topics returns every topic in meta, in name byte order.
func (s *Store) Topics() ([]Topic, error) {
	var out []Topic
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixNorm, PrefetchValues: true, PrefetchSize: 100})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			name := string(item.Key()[len(prefixNorm):])
			var t Topic
			err := item.Value(func(v []byte) error {
				var err error
				t, err = decodeTopic(name, v)
				return err
			})
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	return out, nil
}

// Topic returns the meta of one topic; ok is false when it does not exist.
func (s *Store) Topic(name string) (Topic, bool, error) {
	v, ok, err := s.get(NormKey([]byte(name)))
	if err != nil {
		return Topic{}, false, fmt.Errorf("read topic %q: %w", name, err)
	}
	if !ok {
		return Topic{}, false, nil
	}
	t, err := decodeTopic(name, v)
	if err != nil {
		return Topic{}, false, err
	}
	return t, true, nil
}

func decodeTopic(name string, v []byte) (Topic, error) {
	t, err := DecodeTopicValue(name, v)
	if err != nil {
		return Topic{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return t, nil
}

// HasDelay reports whether the delay@ key exists.
func (s *Store) HasDelay(key []byte) (bool, error) {
	found := false
	err := s.viewDelays(func(txn *badger.Txn) error {
		_, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("look up delay key %q: %w", key, err)
	}
	return found, nil
}

// Role returns the role stored by the last start; ok is false if none is.
func (s *Store) Role() (role byte, ok bool, err error) {
	v, ok, err := s.get(keyRole)
	if err != nil {
		return 0, false, fmt.Errorf("read role: %w", err)
	}
	if !ok {
		return 0, false, nil
	}
	if len(v) != 1 {
		return 0, false, fmt.Errorf("role value of %d bytes, want 1: %w", len(v), ErrMalformed)
	}
	return v[0], true, nil
}

// Epoch returns the promotion epoch, 0 when none was ever recorded (a data
// directory that never saw a promotion, the original's among them).
func (s *Store) Epoch() (uint64, error) {
	v, ok, err := s.get(keyEpoch)
	if err != nil {
		return 0, fmt.Errorf("read epoch: %w", err)
	}
	if !ok {
		return 0, nil
	}
	if len(v) != EpochSize {
		return 0, fmt.Errorf("epoch value of %d bytes, want %d: %w", len(v), EpochSize, ErrMalformed)
	}
	return binary.LittleEndian.Uint64(v), nil
}

// FolderCount returns the store.folderCount recorded at the first start;
// ok is false if none is (a new directory, or one written by the original
// server or a build before the key existed).
func (s *Store) FolderCount() (n int, ok bool, err error) {
	v, ok, err := s.get(keyFolderCount)
	if err != nil {
		return 0, false, fmt.Errorf("read folder count: %w", err)
	}
	if !ok {
		return 0, false, nil
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("folder count value of %d bytes, want 8: %w", len(v), ErrMalformed)
	}
	c := binary.LittleEndian.Uint64(v)
	if c < 1 || c > math.MaxInt32 {
		return 0, false, fmt.Errorf("folder count %d: %w", c, ErrMalformed)
	}
	return int(c), true, nil
}

// Checkpoint returns the recovery checkpoint; ok is false if none was set.
func (s *Store) Checkpoint() (Checkpoint, bool, error) {
	v, ok, err := s.get(keyCheckpoint)
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("read checkpoint: %w", err)
	}
	if !ok {
		return Checkpoint{}, false, nil
	}
	c, err := decodeCheckpoint(v)
	if err != nil {
		return Checkpoint{}, false, err
	}
	return c, true, nil
}

// DueDelays returns up to limit delayed messages whose trigger time is
// <= nowMs, in key order. Entries whose key or value is malformed are
// logged and skipped (NextDelayTime and PendingDelays skip them too): they
// cannot be applied, and failing the scan would stop every other delay.
func (s *Store) DueDelays(nowMs int64, limit int) ([]DelayEntry, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []DelayEntry
	err := s.viewDelays(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixDelay})
		defer it.Close()
		for it.Rewind(); it.Valid() && len(out) < limit; it.Next() {
			item := it.Item()
			trigger, id, name, err := ParseDelayKey(item.Key())
			if err != nil {
				s.log.Warn("skipping delay entry", "err", err)
				continue
			}
			if trigger > nowMs {
				return nil
			}
			val, err := item.ValueCopy(nil)
			if err != nil {
				return fmt.Errorf("read delay key %q: %w", item.Key(), err)
			}
			if err := checkDelayEntry(item.Key(), val); err != nil {
				s.log.Warn("skipping delay entry", "err", err)
				continue
			}
			out = append(out, DelayEntry{
				Key:          item.KeyCopy(nil),
				TriggerTime:  trigger,
				DelayEventID: id,
				Topic:        name,
				Value:        val,
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan due delays: %w", err)
	}
	return out, nil
}

// delayOK reports whether the delay entry at item is one DueDelays would
// return. Only the value header is checked; badger hands out value-log
// values without copying them.
func delayOK(item *badger.Item) (bool, error) {
	if _, _, _, err := ParseDelayKey(item.Key()); err != nil {
		return false, nil
	}
	ok := false
	err := item.Value(func(v []byte) error {
		ok = checkDelayEntry(item.Key(), v) == nil
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("read delay key %q: %w", item.Key(), err)
	}
	return ok, nil
}

// NextDelayTime returns the earliest trigger time in the delay queue. It
// skips entries DueDelays skips, so a scheduler that sleeps until this time
// never wakes up for an entry it cannot fire.
func (s *Store) NextDelayTime() (int64, bool, error) {
	var at int64
	found := false
	err := s.viewDelays(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixDelay})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			ok, err := delayOK(it.Item())
			if err != nil {
				return err
			}
			if ok {
				at, _, _, _ = ParseDelayKey(it.Item().Key())
				found = true
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("find next delay: %w", err)
	}
	return at, found, nil
}

// PendingDelays counts the delayed messages not yet applied.
func (s *Store) PendingDelays() (int, error) {
	n := 0
	err := s.viewDelays(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixDelay})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			ok, err := delayOK(it.Item())
			if err != nil {
				return err
			}
			if ok {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count delays: %w", err)
	}
	return n, nil
}

// liveLife parses an lf@ key and reports whether it indexes a topic: a
// norm@ entry with the same expireAt. Keys that do not (written by a foreign
// tool or corrupted) are skipped by ExpiredTopics and NextExpiry, which
// otherwise would report a due expiry that deleting can never clear.
func (s *Store) liveLife(txn *badger.Txn, key []byte) (expireAt int64, name string, ok bool, err error) {
	expireAt, name, err = ParseLifeKey(key)
	if err != nil {
		return 0, "", false, nil
	}
	item, err := txn.Get(NormKey([]byte(name)))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return expireAt, name, false, nil
	}
	if err != nil {
		return 0, "", false, fmt.Errorf("read topic %q: %w", name, err)
	}
	err = item.Value(func(v []byte) error {
		t, derr := DecodeTopicValue(name, v)
		ok = derr == nil && t.ExpireAt == expireAt
		return nil
	})
	if err != nil {
		return 0, "", false, fmt.Errorf("read topic %q: %w", name, err)
	}
	return expireAt, name, ok, nil
}

// ExpiredTopics returns the names of topics whose lifetime ended at or
// before nowMs, in expiry order.
func (s *Store) ExpiredTopics(nowMs int64) ([]string, error) {
	var out []string
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixLife, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			key := it.Item().Key()
			at, name, ok, err := s.liveLife(txn, key)
			if err != nil {
				return err
			}
			if !ok {
				s.log.Warn("skipping lifetime entry without matching topic", "key", fmt.Sprintf("%q", key))
				continue
			}
			if at > nowMs {
				return nil
			}
			out = append(out, name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan expired topics: %w", err)
	}
	return out, nil
}

// NextExpiry returns the earliest expireAt of any topic with a lifetime.
func (s *Store) NextExpiry() (int64, bool, error) {
	var at int64
	found := false
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixLife, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			t, _, ok, err := s.liveLife(txn, it.Item().Key())
			if err != nil {
				return err
			}
			if ok {
				at, found = t, true
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("find next expiry: %w", err)
	}
	return at, found, nil
}
