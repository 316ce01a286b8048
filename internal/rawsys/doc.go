// Package rawsys makes the read and write system calls of the message path
// without telling Go's scheduler about them (syscall.RawSyscall), where
// that is safe.
//
// Why: a process that went idle parks the runtime's monitor thread
// (sysmon), and the next system call that enters the runtime's syscall
// path (entersyscall, which every os, net and syscall read or write
// takes) wakes it, resetting its poll to every 20 µs until all Ps are idle
// again. At a low message rate that is every message: at 1,000 msg/s
// publish→delivery the server spent about 20 % of its CPU in sysmon's
// wake-ups and sleeps, and taking the calls of the message path around
// the scheduler cut the server's CPU per message by 0.78×
// (BENCHMARKS.md, the publish→delivery row); on replica streams it cut
// the master's CPU per message at 1,000 msg/s by about 0.8× and gave
// semi-synchronous publishing 1.11× the throughput. A raw call does not release
// its P while it runs, so it is only for calls that return at once:
//
//   - sockets in non-blocking mode (every socket Go's poller holds, and
//     the epoll loop's): Conn's Read, Write and WriteBuffers (writev) make
//     the raw call and wait for readiness through the poller when it would
//     block, with the connection's deadlines, as net.Conn does. The server
//     reads requests and writes replies and frames with them, the master
//     writes replica streams and reads confirmations, the slave reads the
//     stream and writes its confirmations;
//   - epoll_wait with a zero timeout and the eventfd (the epoll loop's;
//     linux only, in package server);
//   - reads and writes of a regular file, which the page cache answers at
//     once (File): a call that took longer than SlowCall (a stalling
//     device, the kernel throttling dirty pages) sends the following calls
//     on that file through the runtime, until one of them is fast again,
//     as segment's raw fdatasync does.
//
// Never a call that may block by design (a blocking socket, fsync without
// that guard, epoll_wait with a timeout).
//
// Invariant: on linux every call here is raw; elsewhere (Enabled false)
// the same functions make the ordinary calls, so callers need no second
// path. Errors are what the ordinary calls return: Conn's methods return
// net.OpError values as net.Conn does (Timeout and errors.Is with
// os.ErrDeadlineExceeded, net.ErrClosed and syscall errnos all hold), and
// Conn.Read returns io.EOF at the end of the stream.
package rawsys
