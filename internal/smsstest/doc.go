// Package smsstest is the test kit shared by the module's tests: a polling
// wait with a deadline, a goroutine-safe output buffer, a starter for smss
// (and other) subprocesses, reserved ports, a redis-server without
// persistence, and a TCP proxy that cuts, pauses or delays a link.
//
// Invariants:
//   - It imports nothing of this module, so any package's tests may use it
//     without an import cycle; only test code imports it (internal/layering
//     checks both).
//   - Conditions are awaited with deadlines, never with fixed sleeps; a
//     wait that times out fails the test with what it waited for.
//   - A port from FreePort is outside the kernel's ephemeral range and
//     reserved across processes (an flock on an empty file per port in
//     $TMPDIR/smsstest-ports, held until the process exits): no outgoing
//     connection and no other test binary takes it before its server binds.
//   - Every process and proxy it starts is ended in t.Cleanup; binaries it
//     builds are built once per test binary and removed by Main (or
//     RemoveBinaries) when the tests are done.
package smsstest
