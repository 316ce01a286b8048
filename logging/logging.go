package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/smssmq/smss/config"
	"gopkg.in/natefinch/lumberjack.v2"
)

// FileName is the active log file inside a log.path directory.
const FileName = "out.log"

// New returns the logger described by cfg and the closer that flushes and
// closes its file (a no-op for the console). Call cfg's Validate first:
// New trusts the rotation values.
func New(cfg config.Log) (*slog.Logger, io.Closer, error) {
	return NewTo(cfg, os.Stdout, os.Stderr)
}

// NewTo is New with the console streams supplied, so that callers (and
// tests) can capture console output.
func NewTo(cfg config.Log, stdout, stderr io.Writer) (*slog.Logger, io.Closer, error) {
	switch cfg.Path {
	case "stdout":
		return newLogger(stdout), nopCloser{}, nil
	case "stderr":
		return newLogger(stderr), nopCloser{}, nil
	case "":
		return nil, nil, fmt.Errorf("logging: log.path is empty")
	}
	if err := os.MkdirAll(cfg.Path, 0o755); err != nil {
		return nil, nil, fmt.Errorf("logging: create log directory: %w", err)
	}
	name := filepath.Join(cfg.Path, FileName)
	// lumberjack opens lazily on the first write; opening here surfaces a
	// permission problem at start-up instead of losing every log line.
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("logging: open log file: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, nil, fmt.Errorf("logging: close log file %s: %w", name, err)
	}
	w := &lumberjack.Logger{
		Filename:   name,
		MaxSize:    cfg.Rotate.MaxSize,
		MaxBackups: cfg.Rotate.MaxBackups,
		MaxAge:     cfg.Rotate.MaxAge,
		LocalTime:  true,
	}
	return newLogger(w), w, nil
}

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
