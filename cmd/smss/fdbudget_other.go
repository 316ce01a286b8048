//go:build !unix

package main

import (
	"log/slog"

	"github.com/smssmq/smss/config"
)

func warnFDBudget(*config.Config, *slog.Logger) {}
