package topicblock

import (
	"encoding/binary"
	"math"

	"github.com/smssmq/smss/internal/textline"
	"github.com/smssmq/smss/protocol"
)

// decodeFast decodes a whole, valid block in one pass over its command line.
// It is the subscription read path's hot loop. It reports no reasons: ok is
// false for anything unusual (torn, corrupt, out of range) and DecodeBlock
// then asks decodeCareful, so errors are unchanged. When ok is true the
// result is exactly decodeCareful's; FuzzDecodeEquivalence checks that.
func decodeFast(buf []byte) (b Block, n int, ok bool) {
	if len(buf) < 4 {
		return Block{}, 0, false
	}
	ll := binary.LittleEndian.Uint32(buf)
	if ll < minLineLen || ll > MaxLineLen {
		return Block{}, 0, false
	}
	lineEnd := 4 + int(ll)
	if len(buf) < lineEnd || buf[lineEnd-1] != '\n' {
		return Block{}, 0, false
	}
	var v [numFields]int64
	if _, _, ok := textline.Scan(buf[4:lineEnd-1], v[:], -1); !ok {
		return Block{}, 0, false
	}
	// checkField's rules.
	payloadSize := v[3]
	if v[1] < 1 || payloadSize < minPayloadSize || payloadSize > MaxPayloadSize || v[4] > math.MaxInt32 {
		return Block{}, 0, false
	}
	total := int64(lineEnd) + payloadSize
	if int64(len(buf)) < total {
		return Block{}, 0, false
	}
	// payloadSize >= minPayloadSize, so the record's prefix is present.
	recLen := payloadSize - 1
	rec := buf[lineEnd:total]
	if c := int64(binary.LittleEndian.Uint32(rec)); c == 0 || c+protocol.RecordPrefixSize != recLen || rec[recLen] != '\n' {
		return Block{}, 0, false
	}
	return Block{Ts: v[0], EventID: v[1], SaveTime: v[2], Index: int(v[4]), SrcFileID: v[5], SrcPos: v[6], Record: rec[:recLen]}, int(total), true
}
