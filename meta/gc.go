package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Value-log GC, and why it is wrapped.
//
// Badger's GC rewrite copies each entry of the chosen value-log file whose
// exact version still exists in the LSM tree back into the tree, with its
// old version, even when a newer tombstone shadows it. The copy lands above
// the tombstone. If compaction then purges the tombstone at the last level
// without meeting the copy (it only looks downwards), the deleted key is
// visible again. Badger 4.9.3 (#2310) only guards deletions committed
// during a rewrite, not earlier ones. Reproduced with v4.9.6: of 150 deleted
// delays, 16 came back after one GC, which for us is a message published
// twice.
//
// So a GC round, holding gcMu exclusively:
//  1. lists the delay keys whose newest version is a tombstone and which
//     still have an older version in the value log (the only ones a rewrite
//     can resurrect: delays are never overwritten, and only delay values
//     reach the value-log threshold);
//  2. runs badger's GC;
//  3. deletes those keys again: the new tombstone is newer than, and lands
//     above, any copy the rewrite made, which restores badger's "newer is
//     higher" order.
//
// A key can be briefly visible between a compaction that purged its old
// tombstone during the rewrite and step 3, so delay reads (read-lock gcMu)
// wait for the round; deletions wait too, since a key deleted during the
// rewrite is not on the list. Rewrites are rare: only payloads of at least
// valueThreshold live in the value log.

// gcDiscardRatio: rewrite a value-log file once half of it is garbage.
const gcDiscardRatio = 0.5

// RunGC reclaims value-log space every interval until ctx is done or the
// store is closed.
func (s *Store) RunGC(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.gcRound(ctx) {
			return
		}
	}
}

// gcRound rewrites value-log files until badger finds none worth it. It
// returns false when RunGC should stop for good.
func (s *Store) gcRound(ctx context.Context) bool {
	for ctx.Err() == nil {
		if err := s.acquire(); err != nil {
			return false
		}
		err := s.gcStep()
		s.mu.RUnlock()
		switch {
		case err == nil:
			s.log.Debug("value log file rewritten")
		case errors.Is(err, badger.ErrNoRewrite), errors.Is(err, badger.ErrRejected):
			return true
		case errors.Is(err, badger.ErrGCInMemoryMode):
			return false
		default:
			s.log.Error("value log gc failed", "err", err)
			return true
		}
	}
	return false
}

// gcStep runs one badger GC call and repairs what it may have resurrected.
// The caller holds s.mu, so badger is used directly.
func (s *Store) gcStep() error {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	// Keys whose repair failed last time come first: they may be visible.
	if len(s.gcRepair) > 0 {
		if err := s.deleteAgain(s.gcRepair); err != nil {
			return err
		}
		s.gcRepair = nil
	}
	keys, err := s.deletedInValueLog()
	if err != nil {
		return fmt.Errorf("value log gc: list deleted delays: %w", err)
	}
	gcErr := s.db.RunValueLogGC(gcDiscardRatio)
	if errors.Is(gcErr, badger.ErrNoRewrite) || errors.Is(gcErr, badger.ErrRejected) ||
		errors.Is(gcErr, badger.ErrGCInMemoryMode) {
		return gcErr // nothing was rewritten
	}
	// A failed rewrite may have written part of its copies: repair anyway.
	if err := s.deleteAgain(keys); err != nil {
		s.gcRepair = keys
		return errors.Join(gcErr, err)
	}
	return gcErr
}

// deletedInValueLog lists the delay keys whose newest version is a
// tombstone over an older version whose value is in the value log.
func (s *Store) deletedInValueLog() ([][]byte, error) {
	var keys [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixDelay, AllVersions: true})
		defer it.Close()
		var cur []byte
		deleted, listed := false, false
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			// Versions of a key come newest first.
			if cur == nil || string(item.Key()) != string(cur) {
				cur = item.KeyCopy(cur[:0])
				deleted, listed = item.IsDeletedOrExpired(), false
				continue
			}
			// For a value-log entry badger reports the whole entry
			// (header, versioned key, value, checksum), for an in-tree one
			// key plus value, which stays below key+threshold.
			if deleted && !listed && !item.IsDeletedOrExpired() &&
				item.EstimatedSize() >= int64(len(item.Key()))+s.valueThreshold {
				keys = append(keys, item.KeyCopy(nil))
				listed = true
			}
		}
		return nil
	})
	return keys, err
}

// deleteAgain writes fresh tombstones for keys, in as many transactions as
// needed: each deletion stands on its own.
func (s *Store) deleteAgain(keys [][]byte) error {
	for len(keys) > 0 {
		txn := s.db.NewTransaction(true)
		n := 0
		for ; n < len(keys); n++ {
			err := txn.Delete(keys[n])
			if errors.Is(err, badger.ErrTxnTooBig) && n > 0 {
				break
			}
			if err != nil {
				txn.Discard()
				return fmt.Errorf("value log gc: delete %q again: %w", keys[n], err)
			}
		}
		if err := txn.Commit(); err != nil {
			return fmt.Errorf("value log gc: delete %d keys again: %w", n, err)
		}
		keys = keys[n:]
	}
	return nil
}
