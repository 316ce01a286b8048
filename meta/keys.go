package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Key prefixes (docs/protocol.md §5.8). They are part of the on-disk format shared with
// the original server and must never change.
var (
	prefixNorm    = []byte("norm@")
	prefixLife    = []byte("lf@")
	prefixDelay   = []byte("delay@")
	keyRole       = []byte("global@role")
	keyCheckpoint = []byte("smss@checkpoint")
	// keyEpoch is ours: the promotion epoch (never in the binlog, which
	// must stay byte-compatible with the original's).
	keyEpoch = []byte("smss@epoch")
	// keyFolderCount (our extension, like the checkpoint) records the
	// store.folderCount the topic directories were laid out with: 8 bytes,
	// uint64 LE. The original never reads smss@ keys.
	keyFolderCount = []byte("smss@folderCount")
)

// Sizes of the fixed parts of keys and values.
const (
	// DelayHeaderSize is the triggerTime+delayEventId prefix of a delay@
	// value (and of the delay payload in the binlog).
	DelayHeaderSize = 16
	// CheckpointSize is the length of the smss@checkpoint value.
	CheckpointSize = 24
	// EpochSize is the length of the smss@epoch value.
	EpochSize = 8
)

// Roles stored under global@role.
const (
	RoleMaster byte = 0
	RoleSlave  byte = 1
)

// ErrMalformed is wrapped by every error about a key or value whose bytes do
// not follow §5.8, so callers can tell corruption from I/O failures.
var ErrMalformed = errors.New("malformed meta entry")

// Checkpoint is the recovery checkpoint (our extension, key smss@checkpoint):
// everything up to BinlogOffset in binlog file BinlogFileID is reflected in
// meta and topic files, and NextEventID is the next id to assign.
type Checkpoint struct {
	BinlogFileID int64
	BinlogOffset int64
	NextEventID  int64
}

// NormKey returns the norm@ key of a topic.
func NormKey(name []byte) []byte {
	return concat(prefixNorm, name)
}

// LifeKey returns the lf@ key of a topic that expires at expireAt. The time is
// big-endian so that a prefix scan visits topics in expiry order.
func LifeKey(expireAt int64, name []byte) []byte {
	k := make([]byte, 0, len(prefixLife)+8+len(name))
	k = append(k, prefixLife...)
	k = binary.BigEndian.AppendUint64(k, uint64(expireAt))
	return append(k, name...)
}

// DelayKey returns the delay@ key of one delayed message. Only the trigger
// time is big-endian (scan order); the event id is little-endian exactly as
// in the original, so ties on triggerTime are not ordered by event id.
func DelayKey(triggerTime, delayEventID int64, name []byte) []byte {
	k := make([]byte, 0, len(prefixDelay)+DelayHeaderSize+len(name))
	k = append(k, prefixDelay...)
	k = binary.BigEndian.AppendUint64(k, uint64(triggerTime))
	k = binary.LittleEndian.AppendUint64(k, uint64(delayEventID))
	return append(k, name...)
}

// DelayKeyFromValue rebuilds the delay@ key from a delay value (or a binlog
// delay / delay-apply payload, which has the same layout) and the topic name:
// the first 8 bytes are reversed to big-endian, the next 8 are kept.
func DelayKeyFromValue(value []byte, name []byte) ([]byte, error) {
	if len(value) < DelayHeaderSize {
		return nil, fmt.Errorf("delay value of %d bytes, want at least %d: %w", len(value), DelayHeaderSize, ErrMalformed)
	}
	trigger := int64(binary.LittleEndian.Uint64(value[0:8]))
	eventID := int64(binary.LittleEndian.Uint64(value[8:16]))
	return DelayKey(trigger, eventID, name), nil
}

// DelayValue returns the delay@ value: triggerTime LE, delayEventId LE, then
// the message records.
func DelayValue(triggerTime, delayEventID int64, records []byte) []byte {
	v := make([]byte, 0, DelayHeaderSize+len(records))
	v = binary.LittleEndian.AppendUint64(v, uint64(triggerTime))
	v = binary.LittleEndian.AppendUint64(v, uint64(delayEventID))
	return append(v, records...)
}

// ParseDelayKey splits a delay@ key into its trigger time, event id and topic
// name.
func ParseDelayKey(key []byte) (triggerTime, delayEventID int64, name string, err error) {
	if len(key) < len(prefixDelay)+DelayHeaderSize || string(key[:len(prefixDelay)]) != string(prefixDelay) {
		return 0, 0, "", fmt.Errorf("delay key %q: %w", key, ErrMalformed)
	}
	b := key[len(prefixDelay):]
	return int64(binary.BigEndian.Uint64(b[0:8])), int64(binary.LittleEndian.Uint64(b[8:16])), string(b[16:]), nil
}

// ParseLifeKey splits an lf@ key into its expiry time and topic name.
func ParseLifeKey(key []byte) (expireAt int64, name string, err error) {
	if len(key) < len(prefixLife)+8 || string(key[:len(prefixLife)]) != string(prefixLife) {
		return 0, "", fmt.Errorf("lifetime key %q: %w", key, ErrMalformed)
	}
	b := key[len(prefixLife):]
	return int64(binary.BigEndian.Uint64(b[0:8])), string(b[8:]), nil
}

// checkDelayEntry verifies that a delay value agrees with its key, so that a
// fired delay-apply carries the same (trigger, id) the key was found under.
func checkDelayEntry(key, value []byte) error {
	if len(value) < DelayHeaderSize {
		return fmt.Errorf("delay key %q: value of %d bytes: %w", key, len(value), ErrMalformed)
	}
	b := key[len(prefixDelay):]
	for i := 0; i < 8; i++ {
		if b[i] != value[7-i] {
			return fmt.Errorf("delay key %q: trigger time differs from value: %w", key, ErrMalformed)
		}
	}
	if string(b[8:16]) != string(value[8:16]) {
		return fmt.Errorf("delay key %q: event id differs from value: %w", key, ErrMalformed)
	}
	return nil
}

func encodeCheckpoint(c Checkpoint) []byte {
	b := make([]byte, 0, CheckpointSize)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.BinlogFileID))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.BinlogOffset))
	return binary.LittleEndian.AppendUint64(b, uint64(c.NextEventID))
}

func decodeCheckpoint(b []byte) (Checkpoint, error) {
	if len(b) != CheckpointSize {
		return Checkpoint{}, fmt.Errorf("checkpoint value of %d bytes, want %d: %w", len(b), CheckpointSize, ErrMalformed)
	}
	return Checkpoint{
		BinlogFileID: int64(binary.LittleEndian.Uint64(b[0:])),
		BinlogOffset: int64(binary.LittleEndian.Uint64(b[8:])),
		NextEventID:  int64(binary.LittleEndian.Uint64(b[16:])),
	}, nil
}

func concat(a, b []byte) []byte {
	k := make([]byte, 0, len(a)+len(b))
	k = append(k, a...)
	return append(k, b...)
}
