//go:build unix

package testserver

import (
	"testing"

	"github.com/smssmq/smss/internal/smsstest"
)

// Redis is a redis-server process on a loopback port, without persistence
// (the kit's, which the module's other tests use too).
type Redis = smsstest.Redis

// StartRedis starts redis-server (smsstest.StartRedis).
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	return smsstest.StartRedis(t)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	return smsstest.FreePort(t)
}
