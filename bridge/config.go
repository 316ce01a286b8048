package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the bridge's yaml file (config/bridge.yaml documents every key).
// Flags of cmd/smss-bridge override the keys they name.
type Config struct {
	// Master lists the smss servers to read the binlog from ("host:port"),
	// tried in turn: the master, and after a failover the promoted slave.
	Master []string `yaml:"master"`
	// Identity names the master/slave group in Nats-Msg-Id
	// ("<identity>:<eventId>"). It must stay the same across failovers.
	Identity string `yaml:"identity"`
	// Topics and Exclude are the topic patterns (see Filter).
	Topics  []string `yaml:"topics"`
	Exclude []string `yaml:"exclude"`
	// From is the eventId to start after when the target holds no
	// mirrored message yet (0: the oldest block the master retains).
	From int64 `yaml:"from"`
	// MirrorCreate creates the Kafka topic when smss creates a topic
	// (per-topic mode); creates and deletes are always logged.
	MirrorCreate bool `yaml:"mirrorCreate"`

	Source  SourceConfig  `yaml:"source"`
	NATS    NATSConfig    `yaml:"nats"`
	Kafka   KafkaConfig   `yaml:"kafka"`
	Metrics MetricsConfig `yaml:"metrics"`
}

// SourceConfig is how the bridge connects to smss: like a slave.
type SourceConfig struct {
	UseTLS       bool   `yaml:"useTLS"`
	CA           string `yaml:"ca"`
	Cert         string `yaml:"cert"`
	Key          string `yaml:"key"`
	ServerName   string `yaml:"serverName"`
	User         string `yaml:"user"`
	PasswordFile string `yaml:"passwordFile"`
	// ConnectTimeoutMs bounds a connect, TLS handshake and login.
	ConnectTimeoutMs int `yaml:"connectTimeoutMs"`
	// SilenceMs: reconnect when the master sends nothing (not even an
	// alive) for this long; above the master's timeout.server.alive.
	SilenceMs int `yaml:"silenceMs"`
	// MaxBlock caps one binlog block (bytes).
	MaxBlock int `yaml:"maxBlock"`
	// MinBackoffMs and MaxBackoffMs bound the wait before a retry after a
	// failure of the master or the target; it doubles per failure.
	MinBackoffMs int `yaml:"minBackoffMs"`
	MaxBackoffMs int `yaml:"maxBackoffMs"`
	// StatusIntervalMs is how often the master's last eventId is asked
	// (status, command 34) for the lag metrics; 0 = never (the lag is then
	// measured against the last block received).
	StatusIntervalMs int `yaml:"statusIntervalMs"`
	// MaxHeldBytes bounds the binlog blocks a session holds above the
	// master's commit point (read-committed delivery, a version 3
	// master): past it the session reads on for commit frames but keeps no
	// more blocks, and once the point passes what it kept it ends and
	// resumes, reading the rest again.
	MaxHeldBytes int `yaml:"maxHeldBytes"`
}

// NATSConfig is the JetStream target.
type NATSConfig struct {
	URL           string `yaml:"url"`
	CredsFile     string `yaml:"credsFile"`
	Stream        string `yaml:"stream"`
	SubjectPrefix string `yaml:"subjectPrefix"`
	// CreateStream creates the stream (subjects "<subjectPrefix>.>") when
	// it does not exist, with the settings below.
	CreateStream     bool  `yaml:"createStream"`
	Replicas         int   `yaml:"replicas"`
	MaxAgeSec        int64 `yaml:"maxAgeSec"`
	MaxBytes         int64 `yaml:"maxBytes"`
	DuplicateWindowS int   `yaml:"duplicateWindowSec"`
	FileStorage      bool  `yaml:"fileStorage"`
	// MaxInFlight bounds the publishes waiting for JetStream's ack.
	MaxInFlight  int `yaml:"maxInFlight"`
	AckTimeoutMs int `yaml:"ackTimeoutMs"`
}

// KafkaConfig is the Kafka target.
type KafkaConfig struct {
	Brokers []string `yaml:"brokers"`
	// TopicMode is "per-topic" (Kafka topic <topicPrefix><smss topic>) or
	// "single" (every message into Topic).
	TopicMode   string `yaml:"topicMode"`
	TopicPrefix string `yaml:"topicPrefix"`
	Topic       string `yaml:"topic"`
	// KeyHeader, when set, takes the record key from this smss header
	// (messages without it use the topic name): order then holds per key,
	// and one smss topic can spread over several partitions.
	KeyHeader string `yaml:"keyHeader"`
	// CreateTopics creates missing Kafka topics with Partitions and
	// ReplicationFactor (-1: the broker's default).
	CreateTopics      bool  `yaml:"createTopics"`
	Partitions        int32 `yaml:"partitions"`
	ReplicationFactor int16 `yaml:"replicationFactor"`
	MaxInFlight       int   `yaml:"maxInFlight"`
	AckTimeoutMs      int   `yaml:"ackTimeoutMs"`
}

// MetricsConfig is the bridge's observability.
type MetricsConfig struct {
	// Addr serves Prometheus metrics on http://Addr/metrics ("" = off).
	Addr string `yaml:"addr"`
	// LogIntervalSec is the period of the progress log line (0 = off).
	LogIntervalSec int `yaml:"logIntervalSec"`
}

// Kafka topic modes.
const (
	TopicModePerTopic = "per-topic"
	TopicModeSingle   = "single"
)

// DefaultConfig returns the defaults of every key.
func DefaultConfig() Config {
	return Config{
		Identity: "smss",
		Topics:   []string{"*"},
		Source: SourceConfig{
			ConnectTimeoutMs: 3000,
			SilenceMs:        65000,
			MaxBlock:         64 << 20,
			MinBackoffMs:     500,
			MaxBackoffMs:     30000,
			StatusIntervalMs: 2000,
			MaxHeldBytes:     64 << 20,
		},
		NATS: NATSConfig{
			Stream:           "SMSS",
			SubjectPrefix:    "smss",
			CreateStream:     true,
			Replicas:         1,
			MaxBytes:         -1,
			DuplicateWindowS: 120,
			FileStorage:      true,
			MaxInFlight:      1024,
			AckTimeoutMs:     10000,
		},
		Kafka: KafkaConfig{
			TopicMode:         TopicModePerTopic,
			TopicPrefix:       "smss.",
			Topic:             "smss",
			CreateTopics:      true,
			Partitions:        1,
			ReplicationFactor: -1,
			MaxInFlight:       4096,
			AckTimeoutMs:      30000,
		},
		Metrics: MetricsConfig{LogIntervalSec: 30},
	}
}

// LoadConfig reads a yaml file over the defaults; unknown keys are errors.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("bridge config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("bridge config %s: %w", path, err)
	}
	return cfg, nil
}

// Validate checks cfg; the error names the offending key.
func (c *Config) Validate() error {
	var errs []string
	add := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }
	if len(c.Master) == 0 {
		add("master: at least one smss address (host:port) is required")
	}
	for _, m := range c.Master {
		if !strings.Contains(m, ":") {
			add("master: %q is not host:port", m)
		}
	}
	if c.Identity == "" || strings.ContainsAny(c.Identity, " \t\r\n") {
		add("identity: must be non-empty without blanks")
	}
	if c.From < 0 {
		add("from: %d is negative", c.From)
	}
	if _, err := NewFilter(c.Topics, c.Exclude); err != nil {
		add("%v", err)
	}
	s := c.Source
	if s.ConnectTimeoutMs < 100 {
		add("source.connectTimeoutMs: %d, want at least 100", s.ConnectTimeoutMs)
	}
	if s.SilenceMs < 1000 {
		add("source.silenceMs: %d, want at least 1000", s.SilenceMs)
	}
	if s.MaxBlock < 1024 {
		add("source.maxBlock: %d, want at least 1024", s.MaxBlock)
	}
	if s.MinBackoffMs < 1 || s.MaxBackoffMs < s.MinBackoffMs {
		add("source.minBackoffMs/maxBackoffMs: want 1 <= min <= max, got %d and %d", s.MinBackoffMs, s.MaxBackoffMs)
	}
	if s.MaxHeldBytes < s.MaxBlock {
		add("source.maxHeldBytes: %d, want at least source.maxBlock (%d): a block above the commit point must fit", s.MaxHeldBytes, s.MaxBlock)
	}
	if s.StatusIntervalMs != 0 && s.StatusIntervalMs < 100 {
		add("source.statusIntervalMs: %d, want 0 (off) or at least 100", s.StatusIntervalMs)
	}
	if (s.User == "") != (s.PasswordFile == "") {
		add("source.user and source.passwordFile must be set together")
	}
	if (s.Cert == "") != (s.Key == "") {
		add("source.cert and source.key must be set together")
	}
	if !s.UseTLS && (s.CA != "" || s.Cert != "" || s.ServerName != "") {
		add("source.ca, source.cert and source.serverName need source.useTLS: true")
	}
	switch {
	case c.NATS.URL == "" && len(c.Kafka.Brokers) == 0:
		add("nats.url or kafka.brokers: one target is required")
	case c.NATS.URL != "" && len(c.Kafka.Brokers) > 0:
		add("nats.url and kafka.brokers: one target per bridge (run two bridges to feed both)")
	}
	if c.NATS.URL != "" {
		n := c.NATS
		if n.Stream == "" || strings.ContainsAny(n.Stream, " .*>\t\r\n") {
			add("nats.stream: %q is not a stream name", n.Stream)
		}
		if n.SubjectPrefix == "" || strings.ContainsAny(n.SubjectPrefix, " *>\t\r\n") ||
			strings.HasPrefix(n.SubjectPrefix, ".") || strings.HasSuffix(n.SubjectPrefix, ".") {
			add("nats.subjectPrefix: %q is not a subject prefix", n.SubjectPrefix)
		}
		if n.Replicas < 1 || n.Replicas > 5 {
			add("nats.replicas: %d, want 1..5", n.Replicas)
		}
		if n.DuplicateWindowS < 1 {
			add("nats.duplicateWindowSec: %d, want at least 1", n.DuplicateWindowS)
		}
		if n.MaxInFlight < 1 || n.MaxInFlight > 65536 {
			add("nats.maxInFlight: %d, want 1..65536", n.MaxInFlight)
		}
		if n.AckTimeoutMs < 100 {
			add("nats.ackTimeoutMs: %d, want at least 100", n.AckTimeoutMs)
		}
	}
	if len(c.Kafka.Brokers) > 0 {
		k := c.Kafka
		switch k.TopicMode {
		case TopicModePerTopic:
			if len(k.TopicPrefix) > 100 || !kafkaNameOK(k.TopicPrefix) {
				add("kafka.topicPrefix: %q, want up to 100 of [a-zA-Z0-9._-]", k.TopicPrefix)
			}
		case TopicModeSingle:
			if k.Topic == "" || len(k.Topic) > 249 || !kafkaNameOK(k.Topic) {
				add("kafka.topic: %q is not a Kafka topic name", k.Topic)
			}
		default:
			add("kafka.topicMode: %q, want %q or %q", k.TopicMode, TopicModePerTopic, TopicModeSingle)
		}
		if k.Partitions < 1 {
			add("kafka.partitions: %d, want at least 1", k.Partitions)
		}
		if k.ReplicationFactor == 0 || k.ReplicationFactor < -1 {
			add("kafka.replicationFactor: %d, want -1 (broker default) or at least 1", k.ReplicationFactor)
		}
		if k.MaxInFlight < 1 || k.MaxInFlight > 1<<20 {
			add("kafka.maxInFlight: %d, want 1..1048576", k.MaxInFlight)
		}
		if k.AckTimeoutMs < 100 {
			add("kafka.ackTimeoutMs: %d, want at least 100", k.AckTimeoutMs)
		}
	}
	if c.Metrics.LogIntervalSec < 0 {
		add("metrics.logIntervalSec: %d is negative", c.Metrics.LogIntervalSec)
	}
	if len(errs) > 0 {
		return fmt.Errorf("bridge config: %s", strings.Join(errs, "; "))
	}
	return nil
}

func kafkaNameOK(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }
