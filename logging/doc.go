// Package logging builds the server's *slog.Logger from the log.* config
// keys and provides Sampler, the 1-in-N gate for hot-path log lines.
//
// Output: log.path "stdout"/"stderr" writes slog text lines to the console;
// any other value is a directory (created if missing) whose file out.log is
// rotated by lumberjack with log.rotate.maxSize (MB), maxBackups and maxAge
// (days). Rotated copies are named out-<local time>.log.
//
// log.withGid is accepted for compatibility with the original's config files
// and has no effect: Go deliberately exposes no goroutine id, and parsing
// runtime.Stack for it on every line would be slow and fragile. The
// convention instead is that code serving one connection logs through
// logger.With("conn", id), which ties its lines together as the goroutine id
// did.
package logging
