// Package server is the smss TCP front end: it accepts connections, reads
// requests with protocol.RequestReader and answers them from a Backend (the
// broker), with the replies and error texts of docs/protocol.md §1.5/§2 and the §11
// deviations. Topic names, the slave role, a create's lifetime and
// delay.maxDelay are the Backend's rules: the server sends its refusals
// verbatim (handlers.go).
//
// Invariants:
//
//   - One goroutine per connection; requests on a connection are served in
//     order and each gets exactly one reply before the next is read.
//   - The stream is never misparsed: a request is either consumed exactly
//     (reply, then the next request) or the connection is closed after the
//     400 (unknown command, a length over a cap, a read timeout or I/O error
//     part-way through a request). Partial bytes are never dropped.
//   - Waiting for the first byte of a request is bounded by IdleTimeout;
//     every later read of that request by ReadTimeout (re-armed per read).
//   - A panic while serving a connection is recovered and logged with its
//     stack; only that connection is closed.
//   - Shutdown stops accepting, closes subscription streams, lets a request
//     being served finish and be answered, and serves the requests already
//     received: in a connection's read buffer, or whose first byte arrives
//     within DrainGrace of the connection becoming idle; then it closes each
//     connection with a FIN. The caller's context bounds the whole drain.
//   - A subscription (sub, §2.4–2.7) holds its (topic, who) slot exactly as
//     long as its stream runs; the slot is released however the stream ends.
//     Until a poll first finds nothing, the connection's goroutine alone
//     reads and writes the socket (frame, then the 2-byte ack under the ack
//     timeout). From then on one watcher goroutine per stream does every
//     read of the socket through the same buffered reader, and the stream's
//     state is held by one goroutine at a time (subwatch.go). The watcher
//     never reads past an ack, stops after ack 1 or any error and is waited
//     for, so after ack 1, a 255 or a 400 the next request is read intact.
//     Bytes received while no frame awaits an ack close the connection.
//   - Security (auth.go, tls.go) is off unless Options.Security sets it.
//     With authentication on, a connection reads requests under tiny limits
//     and answers everything but alive and the handshake (32, 33) with
//     "authentication required" until a SCRAM-SHA-256 handshake succeeds;
//     then each command is checked against the user as of the current users
//     snapshot (a reload applies to the next command; a disabled user's
//     connection is refused and closed), and a refused command is answered
//     with a 400 naming the missing permission after its body was consumed,
//     having changed nothing. TLS connections (a second listener) complete
//     their handshake within ReadTimeout before any request is read.
//   - Semi-synchronous replication (Options.Sync, replication.syncSlaves):
//     a pub, delay, create or delete that the broker committed waits, in
//     its own connection's goroutine, until enough slaves confirmed its
//     eventId or the timeout passed; the writer and other connections
//     never wait for it. On the epoll loop a pub's reply is held instead
//     (epoll_sync_linux.go), with the same outcome, and a connection's
//     replies stay in its request order. A refusal is a 400 "write not
//     confirmed ..." and the connection stays usable.
//   - Before login a connection holds a 1 KiB read buffer, a request whose
//     topic field is over 256 bytes is refused unread (connection closed),
//     and the whole connection is closed at Security.LoginTimeout after
//     accept. The lockout is checked and counted at auth continue, where
//     the proof is verified (auth.Limiter.Begin). A session is bound to its
//     account's identity, not its name. Options.MaxConnsPerIP refuses
//     connections at accept per address (IPv6: per /64).
package server
