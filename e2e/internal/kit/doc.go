// Package kit is the shared harness of the end-to-end tests of e2e: it
// starts the real smss binary (through internal/smsstest, which builds it
// and owns processes, ports and waiting) on loopback with its own data
// directory, speaks the raw protocol to it, reads a data directory straight
// from its files, and carries the helpers more than one e2e package needs:
// replication and cluster setups, the admin API, the load generators and
// subscribers the crash, failover and chaos tests verify. Helpers only one
// package uses stay in that package's test files. Only tests import it
// (internal/layering checks that).
//
// Main is the TestMain of the end-to-end tests.
package kit
