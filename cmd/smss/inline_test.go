package main

import (
	"testing"
	"time"

	"github.com/smssmq/smss/config"
)

// worker.inlineDeliveries 0 turns inline delivery off; the broker's zero
// would take its default instead, so 0 must reach it as negative.
func TestInlineDeliveriesMapping(t *testing.T) {
	for _, tc := range []struct{ key, want int }{{0, -1}, {1, 1}, {4, 4}, {1024, 1024}} {
		if got := inlineDeliveries(tc.key); got != tc.want {
			t.Errorf("inlineDeliveries(%d) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

// The epoll loop's group wait is worker.groupWaitUs at flushLevel 2 and
// nothing below it, as the broker's own.
func TestEpollGroupWaitMapping(t *testing.T) {
	for _, tc := range []struct {
		level, us int
		want      time.Duration
	}{{0, 500, 0}, {1, 500, 0}, {2, 500, 500 * time.Microsecond}, {2, 0, 0}, {2, 2000, 2 * time.Millisecond}} {
		cfg := &config.Config{}
		cfg.Store.FlushLevel, cfg.Worker.GroupWaitUs = tc.level, int64(tc.us)
		if got := epollGroupWait(cfg); got != tc.want {
			t.Errorf("flushLevel %d, groupWaitUs %d: %v, want %v", tc.level, tc.us, got, tc.want)
		}
	}
}
