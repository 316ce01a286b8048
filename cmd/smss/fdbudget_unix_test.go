//go:build unix

package main

import (
	"bytes"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/smssmq/smss/config"
)

func TestFDBudgetWarning(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur >= 1<<30 {
		t.Skip("no usable descriptor limit", err)
	}
	for _, tc := range []struct {
		name     string
		maxConns uint64
		warn     bool
	}{
		{"over the limit", rl.Cur, true},
		{"well within", max(rl.Cur/4, 1), rl.Cur/4+fdReserve+config.DefaultAdminMaxConns > rl.Cur},
	} {
		cfg := config.Default()
		cfg.Limit.MaxConns = int(min(tc.maxConns, 1<<30))
		cfg.Admin.Listen = "127.0.0.1:0"
		var buf bytes.Buffer
		warnFDBudget(cfg, slog.New(slog.NewTextHandler(&buf, nil)))
		if got := strings.Contains(buf.String(), "file descriptor limit"); got != tc.warn {
			t.Errorf("%s: warned %v, want %v: %s", tc.name, got, tc.warn, buf.String())
		}
	}
}
