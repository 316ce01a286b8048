// Package clientapi holds end-to-end tests of what a client sees over TCP:
// the commands and their byte-exact files, subscriptions (stored and live
// data, acks, exclusivity, refusals, many subscribers), cursors and
// exactly-once delivery across kills and promotion, delay requests, and
// queue workers (built from testdata) through kills and failover.
package clientapi
