// Package server is the smss TCP front end: it accepts connections, reads
// requests with protocol.RequestReader and answers them from a Backend (the
// broker), with the replies and error texts of spec §1.5/§2 and the §11
// deviations.
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
//   - Shutdown stops accepting, closes connections that are between
//     requests, and lets a request being served finish and be answered.
package server
