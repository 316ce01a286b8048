// Package protocol holds the smss wire units shared by the server and the Go
// client: the request header and bodies, message records, replies and
// subscription/replication frames (docs/protocol.md §1, §2). It does no I/O policy of its
// own beyond reading exactly the bytes a unit declares.
//
// Framing invariants:
//
//   - Every integer is little-endian.
//   - A request is a 20-byte header (command u8, topic length u16, a 16-byte
//     command-specific area, traceId length u8), then the topic, the traceId
//     and a body whose length is fully determined by the command and by fields
//     read before it (§1.3, §1.5). Unknown commands have no known body length.
//   - ReadRequest consumes exactly one request's bytes or reports that it could
//     not (RequestError.Close, or an I/O error). It never reads ahead, so the
//     caller may hand it a bufio.Reader shared with later requests.
//   - No length read from the wire is used to allocate before it has been
//     checked against Limits; the only uncapped lengths are the topic (u16)
//     and traceId (u8), which are bounded by their width.
//   - Every server→client unit starts with a 10-byte header whose first two
//     bytes are the status code; the meaning of bytes 2..9 depends on the code
//     and on the command that was sent (§2.1). Client-side readers take a cap
//     for every length they are told by the peer.
//   - Parsers (ParseRecord, ParseSubMessages) return errors on any
//     inconsistency between counts and sizes; they never panic.
//
// Authentication handshake (an extension of §1.3, auth.go): two commands
// carry SCRAM-SHA-256 (RFC 5802/7677) messages, framed like pub — header
// bytes 3..6 are the uint32 LE body length, at most MaxAuthMessage, so any
// reader knows where the request ends.
//
//   - 32 auth start: topic field = mechanism ("SCRAM-SHA-256"), body =
//     client-first-message. Reply: 200 with the JSON layout (uint32 length at
//     bytes 2..5) carrying the server-first-message, or a 400.
//   - 33 auth continue: no topic, body = client-final-message. Reply: 200
//     (same layout) carrying the server-final-message, or a 400.
//
// Failures are 400s with texts such as ErrAuthFailed; the connection stays
// usable. A server without authentication answers ErrAuthDisabled, an
// original server ErrNotSupported.
package protocol
