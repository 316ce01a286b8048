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
	// Addrs are further servers ("host:port") of the same master/slave
	// group or cluster. The address given to Dial comes first, then Addrs
	// in order (duplicates and empty strings dropped); Dial(ctx, "", opts)
	// uses Addrs alone. With one address the client behaves as it always
	// did: no status round trip, every call goes there. With several it
	// finds the master among them (docs/client.md, "Clients that follow
	// the master"): it asks every server's status (command 34) in parallel, each
	// within ProbeTimeout, and takes a cluster master that proves it is
	// current (its cluster view names it master of its epoch, not fenced)
	// as soon as it answers, else, once every probe answered or ran out,
	// the master with the highest epoch; a master behind an epoch another
	// node reports is never taken. A server that does not know the command
	// (an original smss) is tried by sending the request, and one refusing
	// with "just master can ..." is skipped. The master found is remembered
	// until a call to it fails (lost connection, timeout, "write not
	// confirmed", "fenced: ..."), then found again. Writes and topic
	// management go to the master; topic info, list and alive to the
	// master if there is one, else to any reachable server. Subscribers
	// made with Client.NewSubscriber prefer the master or a slave of the
	// current epoch (SubscriberConfig.Addrs).
	Addrs []string
	// ProbeTimeout bounds one status probe of discovery (connect, login,
	// status round trip) with several addresses: a hung server costs a
	// discovery at most this long. Default 1 s.
	ProbeTimeout time.Duration
	// MaxRetries is how many times Publish, PublishBatch and PublishDelay
	// send their request again after a failure that allows it (see
	// DisableMessageIDs); moving to another server after a slave's refusal counts
	// as one. With several addresses the other calls use the same budget to
	// move to another server. Default 5; negative means never retry.
	MaxRetries int
	// RetryBackoff and MaxRetryBackoff bound the wait before a retry: it
	// starts at RetryBackoff, doubles per retry up to MaxRetryBackoff and is
	// jittered to between half and all of that (as the Subscriber's
	// reconnect). Defaults 100 ms and 2 s.
	RetryBackoff, MaxRetryBackoff time.Duration
	// AttemptTimeout bounds one attempt (connection wait, write, read) of
	// a call that may be retried (a publish, or any call with several
	// addresses); an attempt that runs out is a timeout and, for a publish
	// with a message id or a read, is retried. The whole call, retries and waits included,
	// stays bounded by its context (or RequestTimeout). Default 10 s;
	// negative means no bound per attempt.
	AttemptTimeout time.Duration
	// DisableMessageIDs stops Publish, PublishBatch and PublishDelay from
	// attaching a random smss-msg-id header to the first message of each
	// call (for example when the consumers of an original server must not
	// see the header). A caller-set smss-msg-id is still sent. Without an
	// id a publish is retried only when the request certainly was not
	// stored: the connection could not be opened, or (with several
	// addresses) a slave refused it. A timeout, a lost connection or a
	// "write not confirmed" refusal is then returned to the caller, since
	// a retry could store the message twice.
	DisableMessageIDs bool
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
	defaultMaxRetries     = 5
	defaultRetryBackoff   = 100 * time.Millisecond
	defaultMaxRetryWait   = 2 * time.Second
	defaultAttemptTimeout = 10 * time.Second
	defaultProbeTimeout   = time.Second
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
	if o.MaxRetries == 0 {
		o.MaxRetries = defaultMaxRetries
	} else if o.MaxRetries < 0 {
		o.MaxRetries = 0
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = defaultRetryBackoff
	}
	if o.MaxRetryBackoff <= 0 {
		o.MaxRetryBackoff = defaultMaxRetryWait
	}
	if o.MaxRetryBackoff < o.RetryBackoff {
		o.MaxRetryBackoff = o.RetryBackoff
	}
	if o.AttemptTimeout == 0 {
		o.AttemptTimeout = defaultAttemptTimeout
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = defaultProbeTimeout
	}
	if o.DialContext == nil {
		o.DialContext = (&net.Dialer{}).DialContext
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}
