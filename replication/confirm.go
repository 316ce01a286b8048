package replication

import "github.com/smssmq/smss/protocol"

// Confirmation records (protocol.Confirm, docs/protocol.md §12.3, §4.6):
// what a slave sends back on the replica connection. The codec lives in
// protocol so that a replica reader which is no server (smss-bridge)
// shares it; these names keep replication's callers and tests as they
// were.
//
// Our master counts a connection as confirming only when its first bytes
// are the magic and the hello is a slave's; anything else (an original
// slave's silence, 2-byte acks) leaves it non-confirming for good and its
// bytes are discarded as before. A reader's hello (protocol.ConfirmReader)
// gets commit frames and is never counted.
const (
	ConfirmLen   = protocol.ConfirmLen
	ConfirmMagic = protocol.ConfirmMagic

	ConfirmHello   = protocol.ConfirmHello
	ConfirmConfirm = protocol.ConfirmConfirm
	ConfirmEpoch   = protocol.ConfirmEpoch

	ConfirmFsynced = protocol.ConfirmFsynced
	ConfirmV2      = protocol.ConfirmV2
	ConfirmReader  = protocol.ConfirmReader

	InstanceIDLen = protocol.InstanceIDLen
)

// ErrBadConfirm is wrapped by every decoding failure of a record.
var ErrBadConfirm = protocol.ErrBadConfirm

// Confirm is one decoded confirmation record.
type Confirm = protocol.Confirm

// AppendConfirm appends the ConfirmLen bytes of c to dst.
func AppendConfirm(dst []byte, c Confirm) []byte { return protocol.AppendConfirm(dst, c) }

// IsConfirmPrefix reports whether b can start a confirmation record.
func IsConfirmPrefix(b []byte) bool { return protocol.IsConfirmPrefix(b) }

// DecodeConfirm decodes one record of exactly ConfirmLen bytes.
func DecodeConfirm(b []byte) (Confirm, error) { return protocol.DecodeConfirm(b) }
