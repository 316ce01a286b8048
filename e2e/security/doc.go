// Package security holds end-to-end tests of authentication, permissions
// and hardening (logins, rate limits, reload on SIGHUP, file modes,
// replication roles, promote with auth), hostile connections and requests,
// and the server's limits (descriptors, frame sizes, shutdown drain,
// publishing over a limit).
package security
