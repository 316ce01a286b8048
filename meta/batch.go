package meta

import (
	"encoding/binary"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// ErrBatchTooBig is returned by Commit when a batch does not fit in one
// badger transaction. Nothing of the batch is written.
var ErrBatchTooBig = errors.New("meta batch too big for one transaction")

// MaxBatchValueBytes caps the value bytes of one batch. A batch holds its
// values in memory, and badger puts all value-log entries of a transaction
// into one value-log file, which grows past its 64 MiB target to take them;
// the cap bounds both for a group of 8 MiB delays. The writer keeps its
// groups below it (see Store.Fits).
const MaxBatchValueBytes = 256 << 20

// batchOp is one set (del false) or delete of a key.
type batchOp struct {
	key, value []byte
	del        bool
}

// Batch collects the meta changes of one write group so that Commit applies
// them atomically. When a key is written twice, the later change wins. A
// Batch keeps references to the slices it is given until Commit returns or
// Reset; callers must not modify them meanwhile. Not safe for concurrent use.
type Batch struct {
	ops        []batchOp
	valueBytes int
	deletes    bool
}

// NewBatch returns an empty batch.
func (s *Store) NewBatch() *Batch { return &Batch{} }

func (b *Batch) set(key, value []byte) {
	b.ops = append(b.ops, batchOp{key: key, value: value})
	b.valueBytes += len(value)
}

func (b *Batch) del(key []byte) {
	b.ops = append(b.ops, batchOp{key: key, del: true})
	b.deletes = true
}

// PutTopic writes the topic's norm@ entry and, when it has a lifetime, its
// lf@ entry.
func (b *Batch) PutTopic(t *Topic) {
	name := []byte(t.Name)
	b.set(NormKey(name), EncodeTopicValue(t))
	if t.ExpireAt > 0 {
		b.set(LifeKey(t.ExpireAt, name), []byte{0})
	}
}

// DeleteTopic removes the topic's norm@ entry and its lf@ entry, which is
// found through t.ExpireAt, so t must be the stored meta. State "deleted"
// is never written (§10.2): the keys are simply gone.
func (b *Batch) DeleteTopic(t *Topic) {
	name := []byte(t.Name)
	b.del(NormKey(name))
	if t.ExpireAt > 0 {
		b.del(LifeKey(t.ExpireAt, name))
	}
}

// PutDelay stores a delayed message (key from DelayKey, value from
// DelayValue). A delay key is written once: event ids are unique, and the
// value-log GC guard (gc.go) relies on delay values never being overwritten.
func (b *Batch) PutDelay(key, value []byte) { b.set(key, value) }

// DeleteDelay removes a delayed message.
func (b *Batch) DeleteDelay(key []byte) { b.del(key) }

// SetCheckpoint records the recovery checkpoint.
func (b *Batch) SetCheckpoint(c Checkpoint) { b.set(keyCheckpoint, encodeCheckpoint(c)) }

// SetRole records the server's role (RoleMaster or RoleSlave).
func (b *Batch) SetRole(role byte) { b.set(keyRole, []byte{role}) }

// SetEpoch records the promotion epoch (our key smss@epoch).
func (b *Batch) SetEpoch(epoch uint64) {
	b.set(keyEpoch, binary.LittleEndian.AppendUint64(nil, epoch))
}

// SetFolderCount records the store.folderCount of the topic layout.
func (b *Batch) SetFolderCount(n int) {
	b.set(keyFolderCount, binary.LittleEndian.AppendUint64(nil, uint64(n)))
}

// Empty reports whether the batch holds no change.
func (b *Batch) Empty() bool { return len(b.ops) == 0 }

// Len is the number of changes collected (a topic counts once per key).
func (b *Batch) Len() int { return len(b.ops) }

// Reset empties the batch for reuse and drops its references to the
// caller's slices.
func (b *Batch) Reset() {
	clear(b.ops)
	b.ops = b.ops[:0]
	b.valueBytes = 0
	b.deletes = false
}

// ValueBytes is the total length of the values the batch writes.
func (b *Batch) ValueBytes() int { return b.valueBytes }

// Fits reports whether Commit will accept b: its values stay within
// MaxBatchValueBytes and badger's per-transaction limits on entry count and
// in-tree size hold. The estimate mirrors badger's own accounting (see
// badger Txn.checkSize), so the single writer can close a group before it
// grows too big instead of failing the whole group.
func (s *Store) Fits(b *Batch) bool {
	if b.valueBytes > MaxBatchValueBytes {
		return false
	}
	const (
		versionBytes = 10 // badger's allowance for the key version
		metaBytes    = 2  // meta and user meta
		pointerBytes = 12 // value pointer of a value-log entry
	)
	count := int64(1)                                // the transaction's end marker
	size := int64(len("!badger!txn") + versionBytes) // and its size
	for _, op := range b.ops {
		count++
		v := int64(len(op.value))
		if v >= s.valueThreshold {
			v = pointerBytes
		}
		size += int64(len(op.key)) + v + metaBytes + versionBytes
	}
	return count < s.db.MaxBatchCount() && size < s.db.MaxBatchSize()
}

// Commit applies the batch in one badger transaction: after an error none
// of it is visible. The batch is left untouched; the caller resets it. An
// empty batch is a no-op. Durability follows Sync, not Commit.
func (s *Store) Commit(b *Batch) error {
	if b.Empty() {
		return nil
	}
	if b.valueBytes > MaxBatchValueBytes {
		return fmt.Errorf("commit meta batch: %w: %d value bytes, limit %d", ErrBatchTooBig, b.valueBytes, MaxBatchValueBytes)
	}
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if b.deletes {
		// A deletion must not be committed while a value-log rewrite is
		// running (gc.go).
		s.gcMu.RLock()
		defer s.gcMu.RUnlock()
	}
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	for i, op := range b.ops {
		var err error
		if op.del {
			err = txn.Delete(op.key)
		} else {
			err = txn.Set(op.key, op.value)
		}
		if errors.Is(err, badger.ErrTxnTooBig) {
			return fmt.Errorf("commit meta batch: %w: change %d of %d does not fit", ErrBatchTooBig, i+1, len(b.ops))
		}
		if err != nil {
			return fmt.Errorf("commit meta batch: key %q: %w", op.key, err)
		}
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("commit meta batch of %d changes: %w", len(b.ops), err)
	}
	return nil
}
