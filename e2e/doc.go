// Package e2e holds end-to-end tests: they build the real smss binary, run
// it as a subprocess on loopback with its own data directory and drive it
// over TCP with raw protocol requests, killing it with SIGKILL or SIGTERM
// where a test is about crashes. There is no library code here.
package e2e
