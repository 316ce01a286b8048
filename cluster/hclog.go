package cluster

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// slogAdapter is the hclog.Logger raft wants, writing to the node's slog
// logger: raft's messages land in the same log, with the same levels, under
// "component"="raft".
type slogAdapter struct {
	l     *slog.Logger
	name  string
	args  []any
	level hclog.Level
}

func newRaftLogger(l *slog.Logger) hclog.Logger {
	return &slogAdapter{l: l.With("component", "raft"), name: "raft", level: hclog.Info}
}

func (a *slogAdapter) slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (a *slogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level < a.level {
		return
	}
	lv := a.slogLevel(level)
	if !a.l.Enabled(context.Background(), lv) {
		return
	}
	all := append(append([]any{"logger", a.name}, a.args...), args...)
	a.l.Log(context.Background(), lv, msg, all...)
}

func (a *slogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *slogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *slogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *slogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *slogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }
func (a *slogAdapter) IsTrace() bool                 { return a.level <= hclog.Trace }
func (a *slogAdapter) IsDebug() bool                 { return a.level <= hclog.Debug }
func (a *slogAdapter) IsInfo() bool                  { return a.level <= hclog.Info }
func (a *slogAdapter) IsWarn() bool                  { return a.level <= hclog.Warn }
func (a *slogAdapter) IsError() bool                 { return a.level <= hclog.Error }
func (a *slogAdapter) ImpliedArgs() []any            { return a.args }
func (a *slogAdapter) Name() string                  { return a.name }
func (a *slogAdapter) SetLevel(l hclog.Level)        { a.level = l }
func (a *slogAdapter) GetLevel() hclog.Level         { return a.level }

func (a *slogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.args = append(append([]any(nil), a.args...), args...)
	return &c
}

func (a *slogAdapter) Named(name string) hclog.Logger {
	c := *a
	c.name = a.name + "." + name
	return &c
}

func (a *slogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

func (a *slogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *slogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		a.Info(strings.TrimRight(string(p), "\n"))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
