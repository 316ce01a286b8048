// Package testserver starts real smss and redis-server processes for the
// client's tests, on the shared test kit internal/smsstest. The smss binary
// is built once per test process from the module's cmd/smss; every process
// is ended in t.Cleanup. Conditions are
// awaited with deadlines, never with fixed sleeps.
//
// Test packages using it must call Main from their TestMain so the built
// binary is removed at the end.
package testserver
