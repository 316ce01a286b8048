package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Confirmation records: what a slave (and, version 3, a replica reader
// such as smss-bridge) sends back on the replica connection
// (docs/protocol.md §12.3, §4.6). They live here, not in replication,
// so that a reader that is no server (the bridge) speaks them without
// linking the server's replication code. The replica stream is one-way in
// the original protocol: an original master reads and discards whatever
// a slave sends (docs/protocol.md §4.3 item 6), an original slave sends
// nothing, and the Go ReplicaClient debug tool sends 2-byte acks. After
// its 28-byte replica request, once the first frame arrived (so a master
// that refused the request never reads one as its next request), an smss
// slave sends one hello record and then one confirm record per apply
// step, each ConfirmLen bytes:
//
//	0..3   "SMC1" (ConfirmMagic)
//	4      kind: 1 hello, 2 confirm, 3 epoch (version 2 streams only)
//	5      flags: bit 0 (ConfirmFsynced) = the eventIds confirmed are
//	       fsynced on the slave (it runs store.flushLevel 2); bit 1
//	       (ConfirmV2, hello only) = this slave reads commit frames and
//	       sends epoch records (docs/protocol.md §4.6); bit 2
//	       (ConfirmReader, hello only, with bit 1 and without bit 0) =
//	       a replica reader: it reads commit frames, sends epoch records
//	       and never confirms, so it never counts as a slave; other bits 0
//	6..11  hello: the slave's instance id (6 random bytes kept in its
//	       data directory, so a master never counts one slave twice over
//	       an old and a new connection, even across a restart of the
//	       slave); a reader's hello, confirm, epoch: zero
//	12..19 hello, confirm: int64 LE eventId: the last eventId of the last
//	       block the slave has in its binlog, written by its writer (and
//	       fsynced when flag bit 0 is set); a reader's hello: zero; epoch:
//	       the highest promotion epoch the sender knows (int64 LE,
//	       non-negative)
//
// A slave sets bit 1 and sends epoch records only to a master whose
// status says it serves version 2 (NodeStatus.Replica), a reader sets bit
// 2 only for version 3 (ReplicaStreamV3), so a master of an earlier
// version, which would take them as malformed, never sees one.
const (
	ConfirmLen = 20
	// ConfirmMagic opens every confirmation record.
	ConfirmMagic = "SMC1"
)

// Kinds of a confirmation record (byte 4).
const (
	ConfirmHello   byte = 1
	ConfirmConfirm byte = 2
	ConfirmEpoch   byte = 3
)

// Flags of byte 5: ConfirmFsynced (bit 0) on hello and confirm records,
// ConfirmV2 (bit 1) and ConfirmReader (bit 2) on a hello only.
const (
	ConfirmFsynced byte = 1
	ConfirmV2      byte = 2
	ConfirmReader  byte = 4
)

// InstanceIDLen is the length of the hello's instance id.
const InstanceIDLen = 6

// ErrBadConfirm is wrapped by every decoding failure of a record.
var ErrBadConfirm = errors.New("malformed confirmation record")

// Confirm is one decoded confirmation record.
type Confirm struct {
	Kind     byte
	Fsynced  bool
	V2       bool                // hello only: a version 2 slave (or a reader)
	Reader   bool                // hello only: a replica reader, never a confirming slave (implies V2)
	Instance [InstanceIDLen]byte // hello only
	EventID  int64               // the epoch in an epoch record
}

// AppendConfirm appends the ConfirmLen bytes of c to dst. A reader's
// hello is written with its fixed fields (flags V2|Reader, the rest zero)
// whatever else c holds.
func AppendConfirm(dst []byte, c Confirm) []byte {
	var r [ConfirmLen]byte
	copy(r[:4], ConfirmMagic)
	r[4] = c.Kind
	switch {
	case c.Kind == ConfirmHello && c.Reader:
		r[5] = ConfirmV2 | ConfirmReader
		return append(dst, r[:]...)
	case c.Fsynced && c.Kind != ConfirmEpoch:
		r[5] = ConfirmFsynced
	}
	if c.Kind == ConfirmHello {
		copy(r[6:12], c.Instance[:])
		if c.V2 {
			r[5] |= ConfirmV2
		}
	}
	binary.LittleEndian.PutUint64(r[12:], uint64(c.EventID))
	return append(dst, r[:]...)
}

// IsConfirmPrefix reports whether b (up to 4 bytes looked at) can start a
// confirmation record: the bytes seen so far match the magic.
func IsConfirmPrefix(b []byte) bool {
	n := min(len(b), len(ConfirmMagic))
	return string(b[:n]) == ConfirmMagic[:n]
}

// DecodeConfirm decodes one record of exactly ConfirmLen bytes. Every
// reserved bit and byte must be zero and the eventId non-negative.
func DecodeConfirm(b []byte) (Confirm, error) {
	if len(b) != ConfirmLen {
		return Confirm{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadConfirm, len(b), ConfirmLen)
	}
	if string(b[:4]) != ConfirmMagic {
		return Confirm{}, fmt.Errorf("%w: magic % x", ErrBadConfirm, b[:4])
	}
	c := Confirm{Kind: b[4], Fsynced: b[5]&ConfirmFsynced != 0}
	allowed := ConfirmFsynced
	switch c.Kind {
	case ConfirmHello:
		if b[5]&ConfirmReader != 0 {
			// A reader has no instance, no position and nothing fsynced:
			// its hello is exactly the magic, kind 1 and flags V2|Reader.
			if b[5] != ConfirmV2|ConfirmReader || !allZero(b[6:]) {
				return Confirm{}, fmt.Errorf("%w: a reader's hello with flags %#02x and bytes 6..19 % x, want flags 0x06 and zeros", ErrBadConfirm, b[5], b[6:])
			}
			return Confirm{Kind: ConfirmHello, V2: true, Reader: true}, nil
		}
		copy(c.Instance[:], b[6:12])
		c.V2 = b[5]&ConfirmV2 != 0
		allowed |= ConfirmV2
	case ConfirmConfirm, ConfirmEpoch:
		if !allZero(b[6:12]) {
			return Confirm{}, fmt.Errorf("%w: reserved bytes 6..11 of kind %d are % x, want zeros", ErrBadConfirm, c.Kind, b[6:12])
		}
		if c.Kind == ConfirmEpoch {
			allowed = 0
		}
	default:
		return Confirm{}, fmt.Errorf("%w: kind %d", ErrBadConfirm, c.Kind)
	}
	if b[5]&^allowed != 0 {
		return Confirm{}, fmt.Errorf("%w: unknown flags %#02x for kind %d", ErrBadConfirm, b[5], c.Kind)
	}
	c.EventID = int64(binary.LittleEndian.Uint64(b[12:]))
	if c.EventID < 0 {
		return Confirm{}, fmt.Errorf("%w: negative eventId %d", ErrBadConfirm, c.EventID)
	}
	return c, nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
