// Package admin holds end-to-end tests of the admin HTTP API and dashboard
// against a running smss (also in a real browser, where one is installed),
// of its replication views, of the server under GOMAXPROCS limits and of
// the epoll loop under kills, and the process-level benchmarks (publish,
// consume, delivery latency, the admin metrics' overhead).
package admin
