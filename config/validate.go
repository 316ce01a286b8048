package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/smssmq/smss/protocol"
)

// Upper bounds that keep the Duration conversions (and lumberjack's own
// arithmetic) from overflowing int64 nanoseconds.
const (
	maxMs      = math.MaxInt64 / int64(time.Millisecond)
	maxSeconds = math.MaxInt64 / int64(time.Second)
	maxDaysCap = 36500   // 100 years, far below 24h*days overflow
	maxLogMB   = 1 << 20 // 1 TiB per log file
)

// MaxAliveMs is the largest timeout.server.alive accepted: the Go client
// gives up on a stream after 35 s without a frame (docs/protocol.md §2.6).
const MaxAliveMs = 34999

// Validate reports every invalid value, one line per key, each naming the
// key, e.g. "config: store.folderCount must be >= 1 (got 0)".
func (c *Config) Validate() error {
	var v validator
	v.between("port", int64(c.Port), 0, 65535, "0 picks a free port")
	if c.Host == "" {
		v.add("host must not be empty (127.0.0.1 for local clients, 0.0.0.0 for all interfaces)")
	}

	if c.Log.Path == "" {
		v.add(`log.path must not be empty ("stdout", "stderr" or a directory)`)
	}
	v.atLeast("log.sample", int64(c.Log.Sample), 0, "0 never logs sampled events")
	if c.Log.ToConsole() {
		v.between("log.rotate.maxSize", int64(c.Log.Rotate.MaxSize), 0, maxLogMB, "MB")
	} else {
		v.between("log.rotate.maxSize", int64(c.Log.Rotate.MaxSize), 1, maxLogMB, "MB; log.path is a directory")
	}
	v.atLeast("log.rotate.maxBackups", int64(c.Log.Rotate.MaxBackups), 0, "0 keeps all")
	v.between("log.rotate.maxAge", int64(c.Log.Rotate.MaxAge), 0, maxDaysCap, "days; 0 keeps all")

	if c.Store.Path == "" {
		v.add("store.path must not be empty")
	}
	v.atLeast("store.maxLogSize", c.Store.MaxLogSize, 1024, "bytes")
	v.between("store.flushLevel", int64(c.Store.FlushLevel), 0, 2, "0 none, 1 about every second, 2 every write")
	v.between("store.maxDays", int64(c.Store.MaxDays), 1, maxDaysCap, "days")
	v.between("store.clearInterval", int64(c.Store.ClearInterval), 1, maxSeconds, "seconds")
	v.between("store.waitDelLockTimeoutMs", c.Store.WaitDelLockTimeoutMs, 1, maxMs, "ms")
	v.between("store.folderCount", int64(c.Store.FolderCount), 1, 10000, "")
	v.between("store.maxOpenTopics", int64(c.Store.MaxOpenTopics), 0, 1<<20, "0 sizes it from the file limit (ulimit -n / 4)")
	v.between("store.minFreeMB", c.Store.MinFreeMB, 0, 1<<30, "MiB; 0 turns the disk watermark off")
	v.between("store.maxSlaveKeepFiles", int64(c.Store.MaxSlaveKeepFiles), 0, 1<<20, "0 keeps none for slaves")

	v.atLeast("worker.buffSize", int64(c.Worker.BuffSize), 1, "")
	v.between("worker.waitMsgTimeout", c.Worker.WaitMsgTimeout, 1, maxMs, "ms")
	v.atLeast("worker.waitMsgTimeoutLogSample", int64(c.Worker.WaitMsgTimeoutLogSample), 0, "0 never logs idle wake-ups")
	v.atLeast("worker.maxGroup", int64(c.Worker.MaxGroup), 1, "")
	v.atLeast("worker.maxGroupBytes", int64(c.Worker.MaxGroupBytes), 65536, "bytes")
	v.between("worker.groupWaitUs", c.Worker.GroupWaitUs, 0, 100000, "µs; 0 never waits")
	v.between("worker.inlineDeliveries", int64(c.Worker.InlineDeliveries), 0, 1024, "0 turns inline delivery off")

	v.between("timeout.net.write", c.Timeout.Net.Write, 1, maxMs, "ms")
	v.between("timeout.net.read", c.Timeout.Net.Read, 1, maxMs, "ms")
	v.between("timeout.net.idle", c.Timeout.Net.Idle, 1, maxMs, "ms")
	v.between("timeout.net.reply", c.Timeout.Net.Reply, 1, maxMs, "ms")
	v.between("timeout.net.request", c.Timeout.Net.Request, c.Timeout.Net.Read, maxMs, "ms")
	v.between("timeout.server.alive", c.Timeout.Server.Alive, 1, MaxAliveMs,
		"ms; the Go client drops a stream after 35 s without a frame")
	v.between("timeout.sub.maxAck", c.Timeout.Sub.MaxAck, 1, maxMs, "ms")
	v.between("timeout.sub.defaultAck", c.Timeout.Sub.DefaultAck, 1, maxMs, "ms")
	if c.Timeout.Sub.DefaultAck > c.Timeout.Sub.MaxAck && c.Timeout.Sub.MaxAck >= 1 {
		v.add(fmt.Sprintf("timeout.sub.defaultAck must be <= timeout.sub.maxAck (%d) (got %d)",
			c.Timeout.Sub.MaxAck, c.Timeout.Sub.DefaultAck))
	}

	v.between("background.defaultScanSecond", int64(c.Background.DefaultScanSecond), 1, maxSeconds, "seconds")
	v.atMost("background.firstExecSecond", int64(c.Background.FirstExecSecond), maxSeconds, "seconds; <= 0 means 5")

	v.between("limit.maxPayload", int64(c.Limit.MaxPayload), 1, protocol.MaxPayloadCap,
		"bytes; a subscription frame carries one message of this size")
	v.atLeast("limit.maxWho", int64(c.Limit.MaxWho), 1, "bytes")
	v.atLeast("limit.maxRecords", int64(c.Limit.MaxRecords), 1, "")
	v.atLeast("limit.maxConns", int64(c.Limit.MaxConns), 1, "")
	v.between("limit.maxFrameBytes", int64(c.Limit.MaxFrameBytes), 1024, protocol.MaxPayloadCap,
		"bytes of messages in one subscription frame")
	v.between("limit.maxDiscard", c.Limit.MaxDiscard, 0, 1<<40, "bytes; 0 closes at once")

	v.between("delay.maxDelay", c.Delay.MaxDelay, protocol.MinDelayMs, protocol.MaxDelayMs,
		"ms; a delay request may ask at most 100 years")
	v.between("dedupe.window", c.Dedupe.Window, 0, maxMs, "ms; 0 turns dedupe off")
	v.between("dedupe.maxIds", int64(c.Dedupe.MaxIDs), 1, 1<<30, "ids")

	c.validateAdmin(&v)
	c.validateCursor(&v)
	c.validateQueue(&v)
	c.validateServer(&v)
	c.validateSecurity(&v)
	c.validateCluster(&v)
	return errors.Join(v.errs...)
}

// MinAdminTokenLen is the shortest admin.token accepted.
const MinAdminTokenLen = 16

func (c *Config) validateAdmin(v *validator) {
	if l := c.Admin.Listen; l != "" {
		host, port, err := net.SplitHostPort(l)
		p, perr := strconv.Atoi(port)
		switch {
		case err != nil:
			v.add(fmt.Sprintf("admin.listen must be host:port, e.g. 127.0.0.1:12380 (got %q)", l))
		case perr != nil || p < 0 || p > 65535:
			v.add(fmt.Sprintf("admin.listen must have a port between 0 and 65535 (got %q)", l))
		case p != 0 && p == c.Port && (host == c.Host || host == "" || c.Host == "0.0.0.0" || c.Host == "::"):
			v.add(fmt.Sprintf("admin.listen must not use the client port %d (got %q)", c.Port, l))
		}
	}
	// The value is never printed: error messages end up in logs.
	if tok := c.Admin.Token; tok != "" {
		if n := len([]rune(tok)); n < MinAdminTokenLen {
			v.add(fmt.Sprintf("admin.token must be at least %d characters (got %d)", MinAdminTokenLen, n))
		}
		if strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			v.add("admin.token must not contain spaces or control characters (it travels in an HTTP header)")
		}
	}
}

type validator struct{ errs []error }

func (v *validator) add(msg string) { v.errs = append(v.errs, errors.New("config: "+msg)) }

func (v *validator) atLeast(key string, got, lo int64, note string) {
	if got < lo {
		v.add(fmt.Sprintf("%s must be >= %d (got %d)%s", key, lo, got, noteSuffix(note)))
	}
}

func (v *validator) between(key string, got, lo, hi int64, note string) {
	if got < lo || got > hi {
		v.add(fmt.Sprintf("%s must be between %d and %d (got %d)%s", key, lo, hi, got, noteSuffix(note)))
	}
}

func (v *validator) atMost(key string, got, hi int64, note string) {
	if got > hi {
		v.add(fmt.Sprintf("%s must be <= %d (got %d)%s", key, hi, got, noteSuffix(note)))
	}
}

func noteSuffix(note string) string {
	if note == "" {
		return ""
	}
	return " [" + note + "]"
}

// Redacted stands for a secret's value in Summary.
const Redacted = "<redacted>"

// Summary lists every key with its value in effect, as slog attributes
// ("store.folderCount"=10, ...), plus the source, for the start-up log:
// logger.Info("config in effect", cfg.Summary()...). Secrets (admin.token)
// show as Redacted when set and "" when not.
func (c *Config) Summary() []any {
	attrs := []any{slog.String("config.source", c.Source)}
	return appendLeaves(attrs, reflect.ValueOf(c).Elem(), "")
}

func appendLeaves(attrs []any, v reflect.Value, prefix string) []any {
	t := v.Type()
	for i := range t.NumField() {
		name, ok := yamlName(t.Field(i))
		if !ok {
			continue
		}
		key, f := join(prefix, name), v.Field(i)
		if f.Kind() == reflect.Struct {
			attrs = appendLeaves(attrs, f, key)
			continue
		}
		if t.Field(i).Tag.Get("secret") == "true" {
			if !f.IsZero() {
				attrs = append(attrs, slog.String(key, Redacted))
			} else {
				attrs = append(attrs, slog.String(key, ""))
			}
			continue
		}
		attrs = append(attrs, slog.Any(key, f.Interface()))
	}
	return attrs
}
