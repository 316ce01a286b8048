package client

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"time"
)

// Options configure a Client. Zero fields take the defaults named below.
type Options struct {
	// DialTimeout bounds one TCP connect. Default 5 s.
	DialTimeout time.Duration
	// RequestTimeout bounds a call whose context has no deadline. Default 30 s.
	RequestTimeout time.Duration
	// MaxConns caps the open connections, borrowed and idle. Default 16.
	MaxConns int
	// WaitTimeout is how long a call waits for a free connection when all
	// MaxConns are busy. Default 5 s; negative means do not wait.
	WaitTimeout time.Duration
	// MaxLifetime closes connections older than this when they are
	// returned or found idle. Default 30 min; negative means unlimited.
	MaxLifetime time.Duration
	// HealthCheckInterval is the period of the background check that pings
	// connections idle that long (keeping them open past the server's idle
	// timeout and weeding out dead ones). Default 15 s; negative disables.
	HealthCheckInterval time.Duration
	// MaxReplyBytes caps a JSON reply (topic info or list) and a
	// replicated binlog block. Default 64 MiB.
	MaxReplyBytes int
	// StreamIdleTimeout is how long a subscription or replication stream
	// may be silent before it is considered dead; the server sends an
	// alive every 30 s by default. Default 35 s.
	StreamIdleTimeout time.Duration
	// DialContext opens connections; nil uses a net.Dialer. The context
	// carries the call's deadline capped at DialTimeout.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives pool and subscriber events; nil means slog.Default().
	Logger *slog.Logger
	// TLS, when set, makes every connection TLS (see SecureDialer).
	TLS *tls.Config
	// Credentials, when set, log every connection in before it is used
	// (SCRAM-SHA-256; see SecureDialer). Subscribers made with
	// Client.NewSubscriber and replica streams inherit TLS and Credentials.
	Credentials *Credentials
}

const (
	defaultDialTimeout    = 5 * time.Second
	defaultRequestTimeout = 30 * time.Second
	defaultMaxConns       = 16
	defaultWaitTimeout    = 5 * time.Second
	defaultMaxLifetime    = 30 * time.Minute
	defaultHealthInterval = 15 * time.Second
	defaultMaxReplyBytes  = 64 << 20
	defaultStreamIdle     = 35 * time.Second
)

func (o Options) withDefaults() Options {
	if o.DialTimeout <= 0 {
		o.DialTimeout = defaultDialTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = defaultRequestTimeout
	}
	if o.MaxConns <= 0 {
		o.MaxConns = defaultMaxConns
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = defaultWaitTimeout
	}
	if o.MaxLifetime == 0 {
		o.MaxLifetime = defaultMaxLifetime
	}
	if o.HealthCheckInterval == 0 {
		o.HealthCheckInterval = defaultHealthInterval
	}
	if o.MaxReplyBytes <= 0 {
		o.MaxReplyBytes = defaultMaxReplyBytes
	}
	if o.StreamIdleTimeout <= 0 {
		o.StreamIdleTimeout = defaultStreamIdle
	}
	if o.DialContext == nil {
		o.DialContext = (&net.Dialer{}).DialContext
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}
