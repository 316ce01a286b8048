// Command smss-bridge follows an smss master's binlog as a replica reader
// and mirrors topics into NATS JetStream or Kafka, exactly once and
// resumable without a state file of its own (docs/bridge.md). Run it with --help for the flags; the yaml file
// (config/bridge.yaml) has the rest.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/bridge"
	"github.com/smssmq/smss/client"
)

const usage = `smss-bridge: mirror smss topics into NATS JetStream or Kafka.

It connects to an smss master (or, after a failover, the promoted slave) as a
replica reader - with the same replication user, TLS and login options as a
slave, but it never confirms writes, so it never counts for semi-synchronous
acks - and follows the binlog. Every message of a mirrored topic is published
once, in eventId order per topic, with its smss headers and these added:
smss-event-id, smss-timestamp, smss-topic, smss-block, smss-safe (and
smss-delay-event-id for delayed messages, mirrored when they are applied).
On start and after every reconnect it reads from the target how far it got,
so a kill -9 of the bridge, the master or the target loses and repeats
nothing. It never gives up on an unreachable master or target (backoff) and
stops with exit status 1 on a binlog block it cannot decode or a master whose
history differs from what the target holds.

usage:
  smss-bridge --master HOST:PORT[,HOST:PORT...] --nats URL [flags]
  smss-bridge --master HOST:PORT --kafka BROKER[,BROKER...] [flags]
  smss-bridge --config bridge.yaml

Flags override the keys of the yaml file they name (see config/bridge.yaml
for every key and its default).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("smss-bridge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		cfgPath, master, topics, exclude, natsURL, stream, prefix, kafka, mode, kprefix, ktopic string
		identity, metricsAddr, logLevel, from                                                   string
		mirrorCreate                                                                            bool
	)
	fs.StringVar(&cfgPath, "config", "", "yaml `file` with the settings (flags override it)")
	fs.StringVar(&master, "master", "", "smss server(s) to follow, `host:port[,host:port...]`: tried in turn (key master)")
	fs.StringVar(&topics, "topics", "", "topics to mirror, comma-separated `patterns`: a name, * or prefix* such as order.* (key topics; default *)")
	fs.StringVar(&exclude, "exclude", "", "topics not to mirror, comma-separated `patterns` (key exclude)")
	fs.StringVar(&natsURL, "nats", "", "NATS `URL` of the JetStream target (key nats.url)")
	fs.StringVar(&stream, "stream", "", "JetStream stream `name` (key nats.stream; default SMSS)")
	fs.StringVar(&prefix, "subject-prefix", "", "subject `prefix`: topic t goes to <prefix>.t (key nats.subjectPrefix; default smss)")
	fs.StringVar(&kafka, "kafka", "", "Kafka `brokers` host:port[,host:port...] of the Kafka target (key kafka.brokers)")
	fs.StringVar(&mode, "kafka-topic-mode", "", "per-topic (Kafka topic <prefix><topic>) or single (one topic, smss topic as key) (key kafka.topicMode)")
	fs.StringVar(&kprefix, "kafka-topic-prefix", "", "Kafka topic `prefix` in per-topic mode (key kafka.topicPrefix; default smss.)")
	fs.StringVar(&ktopic, "kafka-topic", "", "Kafka `topic` in single mode (key kafka.topic; default smss)")
	fs.StringVar(&identity, "identity", "", "`name` of the master/slave group, part of Nats-Msg-Id; keep it across failovers (key identity; default smss)")
	fs.StringVar(&from, "from", "", "`eventId` to start after when the target holds no mirrored message (key from; default 0: the oldest retained)")
	fs.BoolVar(&mirrorCreate, "mirror-create", false, "create the Kafka topic when smss creates a topic (key mirrorCreate)")
	fs.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on http://`host:port`/metrics (key metrics.addr)")
	fs.StringVar(&logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	help := func() {
		fmt.Fprint(stdout, usage)
		fmt.Fprintln(stdout, "\nflags:")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help()
			return 0
		}
		fmt.Fprintf(stderr, "smss-bridge: %v (see --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "smss-bridge: unexpected argument %q (see --help)\n", fs.Arg(0))
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		fmt.Fprintf(stderr, "smss-bridge: --log-level: %v\n", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	cfg := bridge.DefaultConfig()
	if cfgPath != "" {
		var err error
		if cfg, err = bridge.LoadConfig(cfgPath); err != nil {
			fmt.Fprintf(stderr, "smss-bridge: %v\n", err)
			return 2
		}
	}
	split := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	set := func(v string, dst *string) {
		if v != "" {
			*dst = v
		}
	}
	if master != "" {
		cfg.Master = split(master)
	}
	if topics != "" {
		cfg.Topics = split(topics)
	}
	if exclude != "" {
		cfg.Exclude = split(exclude)
	}
	set(natsURL, &cfg.NATS.URL)
	set(stream, &cfg.NATS.Stream)
	set(prefix, &cfg.NATS.SubjectPrefix)
	if kafka != "" {
		cfg.Kafka.Brokers = split(kafka)
	}
	set(mode, &cfg.Kafka.TopicMode)
	set(kprefix, &cfg.Kafka.TopicPrefix)
	set(ktopic, &cfg.Kafka.Topic)
	set(identity, &cfg.Identity)
	set(metricsAddr, &cfg.Metrics.Addr)
	if from != "" {
		n, err := strconv.ParseInt(from, 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "smss-bridge: --from: %v\n", err)
			return 2
		}
		cfg.From = n
	}
	if mirrorCreate {
		cfg.MirrorCreate = true
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "smss-bridge: %v\n", err)
		return 2
	}
	dial, err := sourceDialer(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "smss-bridge: %v\n", err)
		return 2
	}
	var target bridge.Target
	if cfg.NATS.URL != "" {
		target = bridge.NewNATSTarget(cfg.NATS, cfg.Identity)
	} else {
		target = bridge.NewKafkaTarget(cfg.Kafka)
	}
	b, err := bridge.New(cfg, target, bridge.Options{Logger: logger, Dial: dial})
	if err != nil {
		fmt.Fprintf(stderr, "smss-bridge: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := b.Run(ctx); err != nil {
		return 1
	}
	return 0
}

// sourceDialer builds the TLS and login of the connection to smss from the
// source.* keys, as a slave's replication.* keys.
func sourceDialer(cfg bridge.Config) (client.DialFunc, error) {
	s := cfg.Source
	var creds *client.Credentials
	if s.User != "" {
		pw, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("source.passwordFile: %w", err)
		}
		creds = &client.Credentials{User: s.User, Password: strings.TrimRight(string(pw), "\r\n")}
	}
	var tlsConf *tls.Config
	if s.UseTLS {
		c, err := auth.ClientTLSConfig(s.CA, s.ServerName, s.Cert, s.Key)
		if err != nil {
			return nil, fmt.Errorf("source.ca/cert/key: %w", err)
		}
		tlsConf = c
	}
	dial, err := client.SecureDialer(nil, tlsConf, creds)
	if err != nil {
		return nil, fmt.Errorf("source.user/passwordFile: %w", err)
	}
	return dial, nil
}
