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
	cancel context.CancelFunc
	done   chan struct{}
	// link dials the master with the TLS material and password SIGHUP
	// reloads; nil for a plain connection without a login.
	link *masterLink

	// The last apply step: its last eventId and when (unix ns), for the
	// admin endpoint's lag.
	applied, appliedAt atomic.Int64
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
	var dial client.DialFunc
	if link != nil {
		dial = link.DialContext
	}
	r := &replicaRunner{done: make(chan struct{}), link: link}
	s, err := replication.NewSlave(b, replication.SlaveOptions{
		DialContext:   dial,
		MasterAddr:    net.JoinHostPort(masterHost, strconv.Itoa(masterPort)),
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
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.slave, r.cancel = s, cancel
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
}

// Status is the replication state for operators.
func (r *replicaRunner) Status() replication.Status { return r.slave.Status() }
