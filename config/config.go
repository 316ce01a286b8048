package config

import (
	"net"
	"strconv"
	"time"
)

// Config mirrors config.yaml: one nested struct per dotted prefix. The yaml
// tags are the key names; Load rejects any key without a field here.
type Config struct {
	// Host is the listen address (new key; the original bound all interfaces).
	Host string `yaml:"host"`
	// Port is the TCP listen port; 0 picks a free port (useful for tests, the
	// real address is logged at start-up).
	Port       int        `yaml:"port"`
	Log        Log        `yaml:"log"`
	Store      Store      `yaml:"store"`
	Worker     Worker     `yaml:"worker"`
	Timeout    Timeout    `yaml:"timeout"`
	Background Background `yaml:"background"`
	Limit      Limit      `yaml:"limit"`
	Delay      Delay      `yaml:"delay"`
	Admin      Admin      `yaml:"admin"`
	// Dedupe is the message id window of exactly-once publishing.
	Dedupe Dedupe `yaml:"dedupe"`
	// Cursor: stored consumer positions (cursor.go).
	Cursor Cursor `yaml:"cursor"`
	// Queue: work-queue groups (queue.go).
	Queue Queue `yaml:"queue"`
	// Security (security.go): authentication, the TLS listener, and how a
	// slave connects to its master.
	Auth        Auth              `yaml:"auth"`
	TLS         TLS               `yaml:"tls"`
	Replication ReplicationClient `yaml:"replication"`
	// Server: the client listener's serving shape (epoll.go).
	Server ServerSection `yaml:"server"`
	// Cluster: automatic failover (cluster.go); absent means none.
	Cluster Cluster `yaml:"cluster"`

	// Source says where the values came from (a file path or
	// SourceEmbedded); set by Load, never read from YAML.
	Source string `yaml:"-"`
}

// SourceEmbedded is Config.Source when no file was found and the embedded
// sample supplied the values.
const SourceEmbedded = "embedded defaults"

// Log is the log.* section.
type Log struct {
	// Path is "stdout", "stderr" or a directory holding out.log.
	Path string `yaml:"path"`
	// Sample logs 1 of N hot-path events; 0 never logs them.
	Sample int `yaml:"sample"`
	// WithGid is accepted for compatibility with the original's config files
	// and has no effect: Go exposes no goroutine id (see package logging).
	WithGid bool   `yaml:"withGid"`
	Rotate  Rotate `yaml:"rotate"`
}

// ToConsole reports whether logs go to the process's stdout/stderr rather
// than to a directory.
func (l Log) ToConsole() bool { return l.Path == "stdout" || l.Path == "stderr" }

// Rotate is log.rotate.*: lumberjack settings, used only when log.path is a
// directory. 0 for MaxBackups/MaxAge means unlimited.
type Rotate struct {
	MaxSize    int `yaml:"maxSize"`    // MB per file
	MaxBackups int `yaml:"maxBackups"` // rotated files kept
	MaxAge     int `yaml:"maxAge"`     // days rotated files kept
}

// Store is the store.* section.
type Store struct {
	Path string `yaml:"path"`
	// GroupReadable creates data files 0640 and directories 0750 instead
	// of 0600 and 0700, for a group that must read them (backups).
	GroupReadable        bool  `yaml:"groupReadable"`
	MaxLogSize           int64 `yaml:"maxLogSize"` // bytes
	FlushLevel           int   `yaml:"flushLevel"` // 0, 1 or 2 (docs/protocol.md §6.4)
	MaxDays              int   `yaml:"maxDays"`
	ClearInterval        int   `yaml:"clearInterval"` // seconds
	WaitDelLockTimeoutMs int64 `yaml:"waitDelLockTimeoutMs"`
	NoCache              bool  `yaml:"noCache"`
	FolderCount          int   `yaml:"folderCount"`
	// MaxSlaveKeepFiles caps the binlog files past maxDays that retention
	// keeps because a connected slave still reads them (new key).
	MaxSlaveKeepFiles int `yaml:"maxSlaveKeepFiles"`
	// MinFreeMB is the disk watermark (new key): below this many MiB free
	// on the data directory's filesystem, pub, delay and create are
	// refused and a slave pauses replication; 0 turns it off.
	MinFreeMB int64 `yaml:"minFreeMB"`
	// MaxOpenTopics bounds the topics whose current file stays open (new
	// key); 0 sizes it from the process's file limit.
	MaxOpenTopics int `yaml:"maxOpenTopics"`
}

// Worker is the worker.* section (the single writer, docs/protocol.md §6.1).
type Worker struct {
	BuffSize                int   `yaml:"buffSize"`
	WaitMsgTimeout          int64 `yaml:"waitMsgTimeout"` // ms
	WaitMsgTimeoutLogSample int   `yaml:"waitMsgTimeoutLogSample"`
	// MaxGroup and MaxGroupBytes bound one group commit (new keys).
	MaxGroup      int `yaml:"maxGroup"`
	MaxGroupBytes int `yaml:"maxGroupBytes"`
	// GroupWaitUs is how long, in microseconds, a flushLevel 2 group may
	// wait for the requests the writer expects next (new key).
	GroupWaitUs int64 `yaml:"groupWaitUs"`
	// InlineDeliveries is how many idle subscribers of a topic the
	// goroutine that committed to it serves itself (new key); 0 turns
	// inline delivery off.
	InlineDeliveries int `yaml:"inlineDeliveries"`
}

// Timeout is the timeout.* section; every value is in milliseconds.
type Timeout struct {
	Net    NetTimeout    `yaml:"net"`
	Server ServerTimeout `yaml:"server"`
	Sub    SubTimeout    `yaml:"sub"`
}

// NetTimeout is timeout.net.*.
type NetTimeout struct {
	Write int64 `yaml:"write"` // deadline of the reply to alive (17), as in the original
	Read  int64 `yaml:"read"`  // deadline of each body read
	Idle  int64 `yaml:"idle"`  // close a connection idle this long between requests
	Reply int64 `yaml:"reply"` // deadline of every other reply write
	// Request bounds reading one whole request, however slowly its bytes
	// trickle in (each read alone is bounded by Read).
	Request int64 `yaml:"request"`
}

// ServerTimeout is timeout.server.*.
type ServerTimeout struct {
	Alive int64 `yaml:"alive"` // idle time before a 201 on a stream
}

// SubTimeout is timeout.sub.*.
type SubTimeout struct {
	MaxAck     int64 `yaml:"maxAck"`     // cap on the ack timeout a subscriber asks for
	DefaultAck int64 `yaml:"defaultAck"` // ack timeout when the subscriber sends none
}

// Background is the background.* section (lifecycle and delay jobs).
type Background struct {
	DefaultScanSecond int `yaml:"defaultScanSecond"`
	FirstExecSecond   int `yaml:"firstExecSecond"` // <= 0 means 5 s (docs/protocol.md §9.1)
}

// Limit is the limit.* section (docs/protocol.md §11 "size caps").
type Limit struct {
	MaxPayload int `yaml:"maxPayload"` // bytes of records in one pub/delay request
	MaxWho     int `yaml:"maxWho"`     // bytes of a sub's who
	MaxRecords int `yaml:"maxRecords"` // records in one request
	MaxConns   int `yaml:"maxConns"`   // concurrent client connections
	// MaxConnsPerIP caps the connections of one address (IPv6: one /64);
	// further ones are refused at accept (security.go sets the default).
	MaxConnsPerIP int `yaml:"maxConnsPerIP"`
	// MaxFrameBytes bounds the messages of one subscription frame (new
	// key); a single larger message still goes alone.
	MaxFrameBytes int `yaml:"maxFrameBytes"`
	// MaxDiscard: bytes of a pub/delay body over maxPayload that are read
	// and discarded before the 400, so that a client still writing its
	// body reads the reason; larger bodies close the connection. 0: close
	// at once.
	MaxDiscard int64 `yaml:"maxDiscard"`
}

// Delay is the delay.* section.
type Delay struct {
	MaxDelay int64 `yaml:"maxDelay"` // ms
}

// Dedupe is the dedupe.* section (new): the window of message ids
// (record header smss-msg-id) within which a retried pub or delay is
// answered with the original's eventId instead of being stored again.
type Dedupe struct {
	Window int64 `yaml:"window"` // ms; 0 turns dedupe off
	MaxIDs int   `yaml:"maxIds"` // ids held over all topics
}

// Admin is the admin.* section: the operator HTTP endpoint (package admin).
type Admin struct {
	// Listen is host:port; "" turns the endpoint off.
	Listen string `yaml:"listen"`
	// Token protects every endpoint but /healthz, /readyz and the
	// dashboard's page (admin/server.go routes); "" leaves them open.
	// Tagged secret: Summary never shows it.
	Token string `yaml:"token" secret:"true"`
	// Limits of the admin HTTP server (security.go sets the defaults):
	// open connections, request header and body reading, body size, and
	// the dashboard session's lifetime.
	MaxConns         int   `yaml:"maxConns"`
	RequestTimeoutMs int64 `yaml:"requestTimeoutMs"`
	MaxBodyBytes     int64 `yaml:"maxBodyBytes"`
	SessionTtlMs     int64 `yaml:"sessionTtlMs"`
}

// Default returns the shipped values of docs/protocol.md §9.1 plus the defaults of the
// keys this implementation adds. config.yaml must parse to exactly this.
func Default() *Config {
	c := &Config{
		Host: "127.0.0.1",
		Port: 12301,
		Log: Log{
			Path:    "stdout",
			Sample:  10000,
			WithGid: true,
			Rotate:  Rotate{MaxSize: 500, MaxBackups: 10, MaxAge: 14},
		},
		Store: Store{
			Path:                 "data",
			MaxLogSize:           1073741824,
			FlushLevel:           1,
			MaxDays:              7,
			ClearInterval:        7200,
			WaitDelLockTimeoutMs: 3000,
			NoCache:              false,
			FolderCount:          10,
			MaxSlaveKeepFiles:    64,
			MinFreeMB:            256,
		},
		Worker: Worker{
			BuffSize:                1000,
			WaitMsgTimeout:          1000,
			WaitMsgTimeoutLogSample: 30,
			MaxGroup:                512,
			MaxGroupBytes:           4194304,
			GroupWaitUs:             500,
			InlineDeliveries:        4,
		},
		Timeout: Timeout{
			Net:    NetTimeout{Write: 1000, Read: 5000, Idle: 1800000, Reply: 5000, Request: 60000},
			Server: ServerTimeout{Alive: 30000},
			Sub:    SubTimeout{MaxAck: 600000, DefaultAck: 3000},
		},
		Background: Background{DefaultScanSecond: 7200, FirstExecSecond: 1},
		Limit: Limit{MaxPayload: 8388608, MaxWho: 1024, MaxRecords: 10000, MaxConns: 10000, MaxFrameBytes: 16777216,
			MaxDiscard: 67108864},
		Delay:       Delay{MaxDelay: 2592000000},
		Dedupe:      Dedupe{Window: 120000, MaxIDs: 1000000},
		Cursor:      defaultCursor(),
		Queue:       defaultQueue(),
		Auth:        defaultAuth(),
		Replication: ReplicationClient{LingerMs: 5, SyncTimeoutMs: 2000, OnSyncTimeout: SyncFail, ReadCommitted: true, RejoinMaxProbes: 64, PromoteQuietMs: 2000},
		Server:      ServerSection{Epoll: true, EpollMinConns: 8},
		Cluster:     defaultCluster(),
	}
	setSecurityDefaults(c)
	return c
}

// ListenAddr is host:port for net.Listen.
func (c *Config) ListenAddr() string {
	return net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

func sec(v int) time.Duration { return time.Duration(v) * time.Second }

// IdleWake is worker.waitMsgTimeout: the idle wake-up period of the writer.
func (c *Config) IdleWake() time.Duration { return ms(c.Worker.WaitMsgTimeout) }

// AliveInterval is timeout.server.alive.
func (c *Config) AliveInterval() time.Duration { return ms(c.Timeout.Server.Alive) }

// AliveWriteTimeout is timeout.net.write: the deadline of the reply to alive.
func (c *Config) AliveWriteTimeout() time.Duration { return ms(c.Timeout.Net.Write) }

// ReadTimeout is timeout.net.read: the deadline of each body read.
func (c *Config) ReadTimeout() time.Duration { return ms(c.Timeout.Net.Read) }

// RequestTimeout is timeout.net.request: the deadline of reading one whole
// request from its first byte.
func (c *Config) RequestTimeout() time.Duration { return ms(c.Timeout.Net.Request) }

// ReplyTimeout is timeout.net.reply: the deadline of reply writes.
func (c *Config) ReplyTimeout() time.Duration { return ms(c.Timeout.Net.Reply) }

// IdleTimeout is timeout.net.idle: an idle connection is closed after it.
func (c *Config) IdleTimeout() time.Duration { return ms(c.Timeout.Net.Idle) }

// MaxAckTimeout is timeout.sub.maxAck.
func (c *Config) MaxAckTimeout() time.Duration { return ms(c.Timeout.Sub.MaxAck) }

// DefaultAckTimeout is timeout.sub.defaultAck.
func (c *Config) DefaultAckTimeout() time.Duration { return ms(c.Timeout.Sub.DefaultAck) }

// DedupeWindow is dedupe.window as broker.Options.DedupeWindow wants it:
// a negative duration when dedupe is off (0 there means the default).
func (c *Config) DedupeWindow() time.Duration {
	if c.Dedupe.Window == 0 {
		return -1
	}
	return ms(c.Dedupe.Window)
}

// MaxDelay is delay.maxDelay: the longest accepted delay of a delay pub.
func (c *Config) MaxDelay() time.Duration { return ms(c.Delay.MaxDelay) }

// ClearInterval is store.clearInterval: the period of retention runs.
func (c *Config) ClearInterval() time.Duration { return sec(c.Store.ClearInterval) }

// WaitDelLockTimeout is store.waitDelLockTimeoutMs.
func (c *Config) WaitDelLockTimeout() time.Duration { return ms(c.Store.WaitDelLockTimeoutMs) }

// DefaultScan is background.defaultScanSecond.
func (c *Config) DefaultScan() time.Duration { return sec(c.Background.DefaultScanSecond) }

// FirstExec is the delay before the first lifecycle/delay job run:
// background.firstExecSecond, or 5 s when that is <= 0 (docs/protocol.md §9.1).
func (c *Config) FirstExec() time.Duration {
	if c.Background.FirstExecSecond <= 0 {
		return 5 * time.Second
	}
	return sec(c.Background.FirstExecSecond)
}
