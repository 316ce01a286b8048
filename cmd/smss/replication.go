package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/replication"
)

// replicaRunner is a slave's replication running in the background.
type replicaRunner struct {
	slave  *replication.Slave
	addr   string // the master's host:port
	cancel context.CancelFunc
	done   chan struct{}
	// link dials the master with the TLS material and password SIGHUP
	// reloads; nil for a plain connection without a login.
	link *masterLink

	// The last apply step: its last eventId and when (unix ns), for the
	// admin endpoint's lag.
	applied, appliedAt atomic.Int64

	// The master's promotion epoch, asked at each session (epoch.go).
	epochs epochProbe
}

// startReplication starts a slave's replication from the master at
// masterHost:masterPort (the -host/-port flags; event is -event). It
// returns at once: the listener is already serving reads, and an
// unreachable master is retried in the background forever. Call Stop
// before closing the broker.
func startReplication(cfg *config.Config, masterHost string, masterPort int, event int64, b *broker.Broker, logger *slog.Logger) (*replicaRunner, error) {
	if masterHost == "" {
		return nil, errors.New("smss: -role slave needs -host (the master's address)")
	}
	link, err := masterDialer(cfg, masterHost, logger)
	if err != nil {
		return nil, err
	}
	return runReplication(cfg, link, net.JoinHostPort(masterHost, strconv.Itoa(masterPort)), event, b, logger)
}

// runReplication starts replication from addr through link (nil: a plain
// connection without a login). The slave's position is read from b's
// binlog now, so a previous runner must have stopped.
func runReplication(cfg *config.Config, link *masterLink, addr string, event int64, b *broker.Broker, logger *slog.Logger) (*replicaRunner, error) {
	base := client.DialFunc((&net.Dialer{}).DialContext)
	if link != nil {
		base = link.DialContext
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replicaRunner{done: make(chan struct{}), link: link, addr: addr, cancel: cancel}
	r.epochs = epochProbe{ctx: ctx, dial: base, addr: addr, b: b, timeout: max(cfg.ReplyTimeout(), time.Second),
		log: logger.With("component", "replication", "master", addr)}
	s, err := replication.NewSlave(b, replication.SlaveOptions{
		// Every session's connection is followed by a short one that asks
		// the master's promotion epoch.
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			c, err := base(ctx, network, address)
			if err == nil {
				r.epochs.probe()
			}
			return c, err
		},
		MasterAddr:    addr,
		StartEvent:    event,
		AliveInterval: cfg.AliveInterval(),
		// A master may accept larger requests than this slave's config
		// says; the cap only guards against absurd lengths.
		MaxBlock: max(replication.DefaultMaxBlock, cfg.Limit.MaxPayload+binlog.DelayPrefixLen+binlog.MaxLineLen+16),
		Logger:   logger.With("component", "replication"),
		// The broker fsyncs the binlog before a commit returns.
		Fsynced: cfg.Store.FlushLevel >= 2,
		OnApply: func(last int64) {
			r.applied.Store(last)
			r.appliedAt.Store(time.Now().UnixNano())
		},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	r.slave = s
	go func() {
		defer close(r.done)
		// Run logs a stop at error level itself; the slave keeps serving
		// reads so operators can inspect it.
		_ = s.Run(ctx)
	}()
	return r, nil
}

// Stop ends replication and waits for the block being applied.
func (r *replicaRunner) Stop() {
	r.cancel()
	<-r.done
	r.epochs.wait()
}

// Status is the replication state for operators.
func (r *replicaRunner) Status() replication.Status { return r.slave.Status() }
