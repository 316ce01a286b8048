//go:build unix

package main

import (
	"log/slog"
	"syscall"

	"github.com/smssmq/smss/config"
)

// fdReserve is what the process needs besides connections: data and
// binlog files, the meta store, listeners, logs.
const fdReserve = 256

// warnFDBudget warns when limit.maxConns plus admin.maxConns do not fit in
// the process's file descriptor limit (Go has already raised the soft
// limit to the hard one): connections would then fail with "too many open
// files" before the caps refuse them.
func warnFDBudget(cfg *config.Config, logger *slog.Logger) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return
	}
	need := uint64(cfg.Limit.MaxConns) + fdReserve
	if cfg.Admin.Listen != "" {
		need += uint64(cfg.Admin.MaxConns)
	}
	if uint64(rl.Cur) < need { // int64 on some BSDs
		logger.Warn("the file descriptor limit is below limit.maxConns + admin.maxConns + a reserve: raise it (ulimit -n, LimitNOFILE=) or lower limit.maxConns",
			"nofile", rl.Cur, "need", need, "limit.maxConns", cfg.Limit.MaxConns, "admin.maxConns", cfg.Admin.MaxConns)
	}
}
