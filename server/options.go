package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
)

// Backend is what the server needs from the broker. Errors that are a
// *protocol.BizError are sent to the client verbatim; any other error's text
// is sent too, and the connection stays usable either way.
type Backend interface {
	// Publish appends count records (already validated) to topic and returns
	// the eventId of the first one.
	Publish(ctx context.Context, topic, records []byte, count int) (firstEventID int64, err error)
	CreateTopic(ctx context.Context, topic []byte, expireAt int64) (eventID int64, err error)
	DeleteTopic(ctx context.Context, topic []byte) (eventID int64, err error)
	// Topic returns one meta entry with TopicRoot filled, or
	// protocol.ErrTopicNotExist.
	Topic(name []byte) (meta.Topic, error)
	// Topics returns every meta entry sorted by name (list, §1.5.10).
	Topics() ([]meta.Topic, error)
	// ValidTopics answers a valid list (§1.5.9, expired topics excluded §11).
	ValidTopics(eventID int64) ([]meta.Topic, error)
	IsSlave() bool
}

// Options configures a Server. Zero durations and counts take the defaults
// named on each field.
type Options struct {
	Host string // listen address; "" means 127.0.0.1 (§11 key host)
	Port int    // listen port; 0 picks a free one

	Backend Backend

	Logger *slog.Logger // nil means slog.Default()
	// LogSample logs 1 in LogSample events on hot paths (each request that
	// succeeds or fails with a business error); 0 never logs them.
	LogSample int

	Limits protocol.Limits // zero fields take protocol.DefaultLimits

	ReadTimeout       time.Duration // per read of a request after its first byte (5 s)
	WriteTimeout      time.Duration // per reply write (5 s)
	IdleTimeout       time.Duration // waiting for a request's first byte (30 min)
	AliveWriteTimeout time.Duration // reply to alive, timeout.net.write (1 s)
	MaxConns          int           // open connections beyond this are closed at accept (10000)
}

// Defaults applied by New.
const (
	DefaultHost              = "127.0.0.1"
	DefaultReadTimeout       = 5 * time.Second
	DefaultWriteTimeout      = 5 * time.Second
	DefaultIdleTimeout       = 30 * time.Minute
	DefaultAliveWriteTimeout = time.Second
	DefaultMaxConns          = 10000
)

func (o *Options) normalize() error {
	if o.Backend == nil {
		return errors.New("server options: Backend is required")
	}
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("server options: port %d out of range", o.Port)
	}
	if o.LogSample < 0 {
		return fmt.Errorf("server options: LogSample %d is negative", o.LogSample)
	}
	if o.MaxConns < 0 {
		return fmt.Errorf("server options: MaxConns %d is negative", o.MaxConns)
	}
	for name, d := range map[string]time.Duration{"ReadTimeout": o.ReadTimeout, "WriteTimeout": o.WriteTimeout,
		"IdleTimeout": o.IdleTimeout, "AliveWriteTimeout": o.AliveWriteTimeout} {
		if d < 0 {
			return fmt.Errorf("server options: %s %v is negative", name, d)
		}
	}
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	setDefault(&o.ReadTimeout, DefaultReadTimeout)
	setDefault(&o.WriteTimeout, DefaultWriteTimeout)
	setDefault(&o.IdleTimeout, DefaultIdleTimeout)
	setDefault(&o.AliveWriteTimeout, DefaultAliveWriteTimeout)
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	return nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}
