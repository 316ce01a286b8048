package meta

import (
	"encoding/binary"
	"fmt"

	"github.com/smssmq/smss/protocol"
)

// keyEpochs is ours: the node's epoch history (protocol.EpochStart), where
// each promotion epoch of the history this node holds began. Like
// smss@epoch it is never in the binlog; the original never reads it.
var keyEpochs = []byte("smss@epochs")

// EpochStartSize is the encoded size of one history entry: epoch (uint64
// LE) then start (int64 LE).
const EpochStartSize = 16

// EncodeEpochStarts is the smss@epochs value: the entries back to back,
// oldest first.
func EncodeEpochStarts(h []protocol.EpochStart) []byte {
	out := make([]byte, 0, len(h)*EpochStartSize)
	for _, e := range h {
		out = binary.LittleEndian.AppendUint64(out, e.Epoch)
		out = binary.LittleEndian.AppendUint64(out, uint64(e.Start))
	}
	return out
}

// DecodeEpochStarts parses an smss@epochs value and checks its invariants
// (protocol.CheckEpochStarts); a bad value is ErrMalformed.
func DecodeEpochStarts(v []byte) ([]protocol.EpochStart, error) {
	if len(v)%EpochStartSize != 0 {
		return nil, fmt.Errorf("epoch history of %d bytes, not a multiple of %d: %w", len(v), EpochStartSize, ErrMalformed)
	}
	if len(v)/EpochStartSize > protocol.MaxEpochStarts {
		return nil, fmt.Errorf("epoch history of %d entries, more than %d: %w", len(v)/EpochStartSize, protocol.MaxEpochStarts, ErrMalformed)
	}
	h := make([]protocol.EpochStart, 0, len(v)/EpochStartSize)
	for i := 0; i < len(v); i += EpochStartSize {
		h = append(h, protocol.EpochStart{Epoch: binary.LittleEndian.Uint64(v[i:]), Start: int64(binary.LittleEndian.Uint64(v[i+8:]))})
	}
	if err := protocol.CheckEpochStarts(h); err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrMalformed)
	}
	return h, nil
}

// SetEpochStarts records the epoch history (smss@epochs).
func (b *Batch) SetEpochStarts(h []protocol.EpochStart) { b.set(keyEpochs, EncodeEpochStarts(h)) }

// EpochStarts returns the epoch history, nil when none was ever recorded
// (a directory of the original, or of a build before the key existed).
func (s *Store) EpochStarts() ([]protocol.EpochStart, error) {
	v, ok, err := s.get(keyEpochs)
	if err != nil {
		return nil, fmt.Errorf("read epoch history: %w", err)
	}
	if !ok {
		return nil, nil
	}
	return DecodeEpochStarts(v)
}
