// Package client is the Go client of smss: a connection pool for request/
// reply calls (publish, delayed publish, topic management, alive), a
// reconnecting Subscriber, a Worker consuming a work queue group as one of
// its competing consumers (queue.go, worker.go), and a replication stream
// reader for tools.
//
// Every wire unit is encoded and decoded by package protocol; this package
// adds connection management and the policies below.
//
// Connections and the pool:
//
//   - A Client holds at most Options.MaxConns open connections (borrowed plus
//     idle). A call that finds none free waits up to Options.WaitTimeout (or
//     its context deadline, if sooner) and then fails with ErrPoolTimeout.
//   - Each request is written with one Write and its reply read completely
//     before the connection is reused. A connection that saw any error other
//     than a server 400 reply (timeout, cancellation, I/O error, malformed
//     reply) is closed, never returned to the pool, because its stream may
//     be out of step (docs/protocol.md §10.27).
//   - Calls add no round trips of their own. Before an idle connection is
//     handed out, a non-blocking peek at the socket (one syscall) discards
//     connections the server has closed, e.g. after a restart. A background
//     goroutine pings (alive, cmd 17) connections idle for
//     Options.HealthCheckInterval and closes those older than
//     Options.MaxLifetime.
//   - Every call takes a context: its deadline bounds the whole call (pool
//     wait, write and read) and cancellation interrupts the I/O. Without a
//     deadline Options.RequestTimeout applies.
//
// Several servers (cluster.go): with Options.Addrs the client finds the
// master of a master/slave group or cluster by asking every node's status
// (command 34) in parallel, each within Options.ProbeTimeout: a cluster
// master that proves it is current is taken as soon as it answers, else
// the master of the highest epoch once all answered, never one behind an
// epoch another node reports. For servers without status it sends the
// write and moves on after "just master can ...". It remembers the master
// and looks again after a call to it fails (also "write not confirmed" and
// "fenced: ..."). Subscribers given several addresses rank them the same
// way before each round: the master of the newest epoch, then slaves of
// that epoch, never a node of an older one.
//
// Message ids and retries (msgid.go): Publish, PublishBatch and
// PublishDelay put a random 128-bit id (header smss-msg-id, 32 lowercase
// hex characters) on the first message of each call unless the caller set
// one or Options.DisableMessageIDs is set, and resend the identical request
// after a lost connection, a timeout, "write not confirmed", "fenced: ..."
// or (with several addresses) a slave's refusal, within Options.MaxRetries. Against
// a server with dedupe a retry is stored at most once, so a nil error means
// exactly once; against one without (an original smss) a retry after a
// lost reply may store a second copy carrying the same id. Without an id
// only a request that certainly was not stored is resent. Other 400 replies
// are never retried, and the context ends a call at once, also while it
// waits to retry. An exhausted budget returns an error matching
// ErrRetriesExhausted and the last cause.
//
// Errors: a 400 reply becomes a *ServerError carrying the server's text
// verbatim. errors.Is matches it against the sentinels of this package
// (ErrTopicNotExist, ErrTopicExist, ErrSubscriberExists, ...) and against
// the protocol package's *BizError sentinels by text. Network and protocol
// errors are wrapped with the operation and address.
//
// Messages carry ordered headers and a body (docs/protocol.md §1.4). A message with no
// header and an empty body cannot be sent (ErrEmptyMessage). The traceId of
// a call is taken from the context (WithTraceID) or generated.
//
// Security (auth.go): Options.TLS makes every connection TLS and
// Options.Credentials logs it in (SCRAM-SHA-256) before it is pooled or
// used for a stream, so no call ever runs on an unauthenticated connection
// and the password never crosses the wire. A server that cannot prove it
// holds the user's credentials, or does not support authentication, is
// refused. Refusals by the server map to ErrAuthFailed and
// ErrPermissionDenied; the connection stays usable after the latter.
package client
