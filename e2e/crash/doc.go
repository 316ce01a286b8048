// Package crash holds end-to-end tests of what survives a crash of one
// node: SIGKILL and SIGTERM under load, the short and long torture runs,
// full and nearly full disks, retention of aged data, topic expiry, and the
// delay scheduler across kills and on time.
package crash
