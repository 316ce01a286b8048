package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
)

// Backend is what the server needs from the broker. The Backend checks
// topic names, the slave role, a create's lifetime and delay.maxDelay, and
// refuses in the order of docs/protocol.md §1.5; the server does not check
// them again.
// Errors that are a *protocol.BizError are sent to the client verbatim; any
// other error's text is sent too, and the connection stays usable either
// way.
type Backend interface {
	// Publish appends count records (already validated) to topic and returns
	// the eventId of the first one.
	Publish(ctx context.Context, topic, records []byte, count int) (firstEventID int64, err error)
	CreateTopic(ctx context.Context, topic []byte, expireAt int64) (eventID int64, err error)
	DeleteTopic(ctx context.Context, topic []byte) (eventID int64, err error)
	// Topic returns one meta entry with TopicRoot filled, or
	// protocol.ErrTopicNotExist.
	Topic(name []byte) (protocol.TopicInfo, error)
	// Topics returns every meta entry sorted by name (list, §1.5.10).
	Topics() ([]protocol.TopicInfo, error)
	// ValidTopics answers a valid list (§1.5.9, expired topics excluded §11).
	ValidTopics(eventID int64) ([]protocol.TopicInfo, error)
	IsSlave() bool
	// Subscribe registers who on topic and positions it after eventId
	// `after` (docs/protocol.md §3, §11). The (topic, who) slot is held until the
	// Subscription is closed.
	Subscribe(topic, who []byte, after int64) (Subscription, error)
	// PublishDelay stores records (already validated, count of them) to be
	// published on topic delayMs from now, and returns the delay command's
	// eventId.
	PublishDelay(ctx context.Context, topic, records []byte, count int, delayMs int64) (eventID int64, err error)
}

// BatchPublisher is implemented by a Backend that takes several publishes
// in one call (the broker's leader/follower writer): the epoll loop
// submits every publish of a turn that way. Without it the loop calls
// Publish once per publish.
type BatchPublisher interface {
	// PublishBatch publishes each ps[i] as Publish would, in order, and
	// fills in its EventID or Err; it returns when all are done.
	PublishBatch(ctx context.Context, ps []Pub)
}

// Pub is one publish of a batch: Topic, Records and Count in, EventID
// (the first record's) or Err out.
type Pub struct {
	Topic, Records []byte
	Count          int
	EventID        int64
	Err            error
}

// Subscription is one registered subscriber of a topic.
type Subscription interface {
	// Next appends up to max §2.4 message units to dst and returns how many.
	// With nothing to deliver it blocks until there is (never polling),
	// until wait passes (0 messages, nil error), or until the topic is
	// deleted (protocol.ErrTopicDeleted) or ctx ends (ctx.Err()). Other
	// errors (a *protocol.BizError among them) end the subscription with a
	// 400 carrying their text.
	Next(ctx context.Context, dst []byte, max int, wait time.Duration) ([]byte, int, error)
	// Close frees the (topic, who) slot; it must be called however the
	// subscription ends.
	Close()
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
	RequestTimeout    time.Duration // reading one whole request from its first byte (60 s, at least ReadTimeout)
	WriteTimeout      time.Duration // per reply write (5 s)
	IdleTimeout       time.Duration // waiting for a request's first byte (30 min)
	AliveWriteTimeout time.Duration // reply to alive, timeout.net.write (1 s)
	MaxConns          int           // open connections beyond this are closed at accept (10000)
	// MaxConnsPerIP caps the open connections of one remote address (an
	// IPv6 client's /64); beyond it they are closed at accept, so one
	// address cannot take the slots of the others (limit.maxConnsPerIP,
	// 1000; at most MaxConns).
	MaxConnsPerIP int

	AliveInterval     time.Duration // idle time before a 201 on a subscription, timeout.server.alive (30 s)
	DefaultAckTimeout time.Duration // ack timeout of a sub that asks for none, timeout.sub.defaultAck (3 s, at most MaxAckTimeout)
	MaxAckTimeout     time.Duration // cap on a sub's ack timeout, timeout.sub.maxAck (10 min)
	// Replication serves replica requests (64) on a master; nil refuses them.
	Replication replication.Source
	// Sync makes pub, delay, create and delete replies wait for the
	// confirmations of replication.syncSlaves slaves, and counts the
	// confirmations arriving on replica streams; nil (or 0 slaves)
	// answers at once.
	Sync *replication.SyncTracker
	// ReplicaEpoch is the promotion epoch a master sends in commit frames
	// to version 2 slaves; OnSlaveEpoch receives the epoch such a slave
	// says it knows (docs/protocol.md §4.6). nil: 0, and ignored.
	ReplicaEpoch func() uint64
	OnSlaveEpoch func(uint64)
	// ReplicaLinger is replication.MasterOptions.Linger: how long a busy
	// replica stream gathers commits into one write, replication.lingerMs
	// (0: the replication package's default; negative: off).
	ReplicaLinger time.Duration
	// Metrics receives request latencies, connection counts, deliveries and
	// errors; nil records nothing.
	Metrics *metrics.Metrics
	// Control reports the role, promotion epoch and followed master for
	// the status command (34); nil derives the role and last eventId from
	// Backend and reports epoch 0.
	Control Control
	// Failover serves promote (35) and follow (36); nil refuses them with
	// a 400 (the connection stays usable).
	Failover Failover
	// Cursors serves stored consumer positions: sub from eventId -1 and
	// commands 37..39 (cursor.go); nil passes -1 to Backend.Subscribe and
	// refuses 37..39 with a 400.
	Cursors Cursors
	// Queues serves the work-queue groups (commands 41..44); nil refuses
	// them (the request is read exactly; the connection stays usable).
	Queues Queues
	// Security turns on authentication, permissions and the TLS listener
	// (auth.go, tls.go); the zero value leaves them off.
	Security Security
	// Epoll serves plain connections on one epoll loop while they publish
	// (server.epoll; epoll_linux.go). Not used (logged at Info) off Linux,
	// with Security.Auth and with semi-synchronous replication (Sync
	// waiting for slaves).
	Epoll bool
	// EpollGroupWait is flushLevel 2's group wait (worker.groupWaitUs) as
	// the epoll loop applies it: after a batch, the loop waits up to this
	// long, and at most half the batch's own time, for the connections it
	// just answered to send again, so that they share the next fsync
	// instead of alternating in two halves (epoll_linux.go gatherExpected).
	// Zero (the default, and at flushLevel 0 and 1) never waits.
	EpollGroupWait time.Duration
	// EpollMinConns: with Epoll, the loop takes a connection over only
	// while at least this many open connections have published
	// (conn.run; subscribers and other connections do not count); 0
	// from the first. Below it the loop costs more per request than a
	// goroutine (an epoll_wait and a park against one read).
	EpollMinConns int
	// EpollTurnBytes bounds the bytes of publishes one loop turn reads
	// (worker.maxGroupBytes); zero is 4 MiB.
	EpollTurnBytes int
}

// Defaults applied by New.
const (
	DefaultHost              = "127.0.0.1"
	DefaultReadTimeout       = 5 * time.Second
	DefaultRequestTimeout    = 60 * time.Second
	DefaultWriteTimeout      = 5 * time.Second
	DefaultIdleTimeout       = 30 * time.Minute
	DefaultAliveWriteTimeout = time.Second
	DefaultMaxConns          = 10000
	DefaultMaxConnsPerIP     = 1000
	DefaultAliveInterval     = 30 * time.Second
	DefaultSubAckTimeout     = 3 * time.Second
	DefaultMaxAckTimeout     = 10 * time.Minute
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
	if o.MaxConnsPerIP < 0 {
		return fmt.Errorf("server options: MaxConnsPerIP %d is negative", o.MaxConnsPerIP)
	}
	if o.Security.LoginTimeout < 0 {
		return fmt.Errorf("server options: Security.LoginTimeout %v is negative", o.Security.LoginTimeout)
	}
	for name, d := range map[string]time.Duration{"ReadTimeout": o.ReadTimeout, "RequestTimeout": o.RequestTimeout, "WriteTimeout": o.WriteTimeout,
		"IdleTimeout": o.IdleTimeout, "AliveWriteTimeout": o.AliveWriteTimeout, "AliveInterval": o.AliveInterval,
		"DefaultAckTimeout": o.DefaultAckTimeout, "MaxAckTimeout": o.MaxAckTimeout} {
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
	setDefault(&o.RequestTimeout, DefaultRequestTimeout)
	if o.RequestTimeout < o.ReadTimeout {
		o.RequestTimeout = o.ReadTimeout
	}
	setDefault(&o.WriteTimeout, DefaultWriteTimeout)
	setDefault(&o.IdleTimeout, DefaultIdleTimeout)
	setDefault(&o.AliveWriteTimeout, DefaultAliveWriteTimeout)
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxConnsPerIP == 0 {
		o.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	o.MaxConnsPerIP = min(o.MaxConnsPerIP, o.MaxConns)
	setDefault(&o.Security.LoginTimeout, DefaultLoginTimeout)
	setDefault(&o.AliveInterval, DefaultAliveInterval)
	setDefault(&o.MaxAckTimeout, DefaultMaxAckTimeout)
	// A cap below the default ack timeout lowers the default with it.
	setDefault(&o.DefaultAckTimeout, min(DefaultSubAckTimeout, o.MaxAckTimeout))
	if o.DefaultAckTimeout > o.MaxAckTimeout {
		return fmt.Errorf("server options: DefaultAckTimeout %v exceeds MaxAckTimeout %v", o.DefaultAckTimeout, o.MaxAckTimeout)
	}
	return nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}
