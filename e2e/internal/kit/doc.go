// Package kit is the shared harness of the end-to-end tests under e2e/: it
// starts the real smss binary (through internal/smsstest, which builds it
// and owns processes, ports and waiting) on loopback with its own data
// directory, speaks the raw protocol to it, reads a data directory straight
// from its files, and carries the helpers more than one e2e package needs:
// replication and cluster setups, the admin API, the load generators and
// subscribers the crash, failover and chaos tests verify. Helpers only one
// package uses stay in that package's test files. Only tests import it
// (internal/layering checks that).
//
// The tests are split by concern so that go test runs them as separate
// packages, side by side: e2e/admin, e2e/bridge, e2e/clientapi,
// e2e/cluster, e2e/crash, e2e/replication and e2e/security. Each package's
// TestMain is Main.
package kit
