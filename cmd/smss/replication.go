package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/protocol"
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

	// masterReplica is the replica stream version the master last said
	// it serves (protocol.ReplicaStreamV2: it tracks confirmations and
	// sends commit frames); kept when the master stops answering.
	// commitSeen: a commit frame came from such a master. Both feed the
	// check of a manual promotion (PromoteChecked).
	masterReplica atomic.Int64
	commitSeen    atomic.Bool
}

// startReplication starts a slave's replication from the master at
// masterHost:masterPort (the -host/-port flags; event is -event). It
// returns at once: the listener is already serving reads, and an
// unreachable master is retried in the background forever. Call Stop
// before closing the broker.
func startReplication(cfg *config.Config, masterHost string, masterPort int, event int64, b *broker.Broker, known func() uint64, logger *slog.Logger, diverged chan<- error) (*replicaRunner, error) {
	if masterHost == "" {
		return nil, errors.New("smss: -role slave needs -host (the master's address)")
	}
	link, err := masterDialer(cfg, masterHost, logger)
	if err != nil {
		return nil, err
	}
	return runReplication(cfg, link, net.JoinHostPort(masterHost, strconv.Itoa(masterPort)), event, b, known, logger, diverged)
}

// runReplication starts replication from addr through link (nil: a plain
// connection without a login). The slave's position is read from b's
// binlog now, so a previous runner must have stopped. When replication
// stops because the local binlog is not a prefix of the master's, the
// error is sent to diverged (if not nil and not full).
func runReplication(cfg *config.Config, link *masterLink, addr string, event int64, b *broker.Broker, known func() uint64, logger *slog.Logger, diverged chan<- error) (*replicaRunner, error) {
	base := client.DialFunc((&net.Dialer{}).DialContext)
	if link != nil {
		base = link.DialContext
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replicaRunner{done: make(chan struct{}), link: link, addr: addr, cancel: cancel}
	r.epochs = epochProbe{ctx: ctx, dial: base, addr: addr, b: b, timeout: max(cfg.ReplyTimeout(), time.Second),
		log: logger.With("component", "replication", "master", addr)}
	// Every session's connection is followed by a short one that asks the
	// master's promotion epoch.
	opts := slaveOptions(cfg, addr, event, func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := base(ctx, network, address)
		if err == nil {
			r.epochs.probe()
		}
		return c, err
	}, logger)
	opts.OnApply = func(last int64) {
		r.applied.Store(last)
		r.appliedAt.Store(time.Now().UnixNano())
	}
	// Before each session: the master's stream version (commit frames)
	// and epoch; a master below the epoch this node knows is not followed.
	opts.Probe = func(ctx context.Context) (int, uint64, error) {
		st, err := queryStatus(ctx, base, addr)
		if errors.Is(err, client.ErrNotSupported) {
			return 0, 0, nil // an original smss: no status, no epoch
		}
		if err != nil {
			return 0, 0, err
		}
		r.masterReplica.Store(int64(st.Replica))
		return st.Replica, st.Epoch, nil
	}
	opts.KnownEpoch = known
	opts.OnCommit = func(cp int64) {
		// From a version 2 master only commit frames call it (the
		// session's version comes from the same status answer).
		if r.masterReplica.Load() >= protocol.ReplicaStreamV2 {
			r.commitSeen.Store(true)
		}
		b.SetCommitPoint(cp)
	}
	// The hello's instance id is the data directory's, not this
	// process's: a slave restarted before the master noticed its old
	// connection is dead then replaces that connection instead of
	// counting twice toward replication.syncSlaves.
	id, err := b.InstanceID()
	switch {
	case err == nil:
	case id != [broker.InstanceIDLen]byte{}:
		// Not written: this process still replicates, with an id kept in
		// memory; a restart before the master notices may count twice.
		logger.Error("cannot keep the slave's instance id in the data directory; using it for this process only", "err", err)
	default:
		cancel()
		return nil, err
	}
	opts.InstanceID = id
	s, err := replication.NewSlave(b, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	r.slave = s
	go func() {
		defer close(r.done)
		// Run logs a stop at error level itself; the slave keeps serving
		// reads so operators can inspect it, unless its binlog diverged
		// from the master's: then the process ends (serve), so that it
		// does not serve a tail the master never had.
		if err := s.Run(ctx); errors.Is(err, replication.ErrDiverged) && diverged != nil {
			select {
			case diverged <- err:
			default: // one report ends the process; more add nothing
			}
		}
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

// slaveOptions are the replication options of a slave of addr; dial nil
// is a plain connection.
func slaveOptions(cfg *config.Config, addr string, event int64, dial client.DialFunc, logger *slog.Logger) replication.SlaveOptions {
	return replication.SlaveOptions{
		DialContext:   dial,
		MasterAddr:    addr,
		StartEvent:    event,
		AliveInterval: cfg.AliveInterval(),
		// A master may accept larger requests than this slave's config
		// says; the cap only guards against absurd lengths.
		MaxBlock:  max(replication.DefaultMaxBlock, cfg.Limit.MaxPayload+binlog.DelayPrefixLen+binlog.MaxLineLen+16),
		MaxProbes: int(cfg.Replication.RejoinMaxProbes),
		Logger:    logger.With("component", "replication"),
		// The broker fsyncs the binlog before a commit returns.
		Fsynced: cfg.Store.FlushLevel >= 2,
	}
}

// Divergence at start-up (issue 16). A slave checks before it listens that
// its binlog is a byte prefix of the master's. Without -rejoin a divergent
// node exits (status 1) with an error naming both positions; a master that
// cannot be reached now is left to the replication sessions, which check
// again on every connection (and end the process the same way). With
// -rejoin start-up waits for the master, and a divergent tail is moved
// aside (broker.Rewind) before the node listens and follows.

// rejoinRetryMax caps the wait between two attempts to reach the master
// while -rejoin holds start-up.
const rejoinRetryMax = 30 * time.Second

// checkDivergence runs the start-up check on the open broker b (opened with
// bopts), which it may close and reopen. It returns the broker to serve
// with and -1, or nil and an exit status.
func checkDivergence(cfg *config.Config, fl *flags, b *broker.Broker, bopts broker.Options,
	logger *slog.Logger, sig <-chan os.Signal) (*broker.Broker, int) {
	if fl.masterHost == "" {
		return b, -1 // startReplication reports it
	}
	link, err := masterDialer(cfg, fl.masterHost, logger)
	if err != nil {
		return b, -1 // startReplication reports it
	}
	var dial client.DialFunc
	if link != nil {
		dial = link.DialContext
	}
	opts := slaveOptions(cfg, net.JoinHostPort(fl.masterHost, strconv.Itoa(fl.masterPort)), fl.event, dial, logger)
	s, err := replication.NewSlave(b, opts)
	if err != nil {
		return b, -1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		select {
		case <-sig:
			cancel()
		case <-stopped:
		}
	}()
	defer close(stopped)
	wait := time.Second
	logger.Info("checking that this node's binlog is a prefix of the master's before serving", "master", opts.MasterAddr, "rejoin", fl.rejoin)
	for {
		err := s.Check(ctx)
		var d *replication.DivergenceError
		switch {
		case err == nil:
			return b, -1
		case errors.As(err, &d):
			if !fl.rejoin || !d.Found {
				logger.Error("REFUSING TO START: "+d.Error(), "localLastEventId", d.LocalLast, "firstDifferingEventId", d.FirstDiff,
					"commonLastEventId", d.CommonLast, "master", opts.MasterAddr)
				b.Close()
				return nil, exitFailure
			}
			return rejoin(cfg, d, b, bopts, logger)
		case ctx.Err() != nil:
			b.Close()
			return nil, exitOK
		case errors.Is(err, replication.ErrStopped):
			// The master refused without showing another history (it
			// serves no replication, or no longer has this position):
			// replication stops on it loudly as it always did.
			logger.Error("the master refused the check that this node's binlog is a prefix of its", "err", err)
			return b, -1
		case !fl.rejoin:
			logger.Warn("cannot reach the master to check that this node's binlog is a prefix of its; the replication sessions check it on connect", "err", err)
			return b, -1
		}
		logger.Warn("-rejoin: waiting for the master before serving", "master", opts.MasterAddr, "err", err, "retryIn", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			b.Close()
			return nil, exitOK
		case <-t.C:
		}
		wait = min(2*wait, rejoinRetryMax)
	}
}

// rejoin closes b, moves the divergent tail d aside and reopens the data
// directory.
func rejoin(cfg *config.Config, d *replication.DivergenceError, b *broker.Broker, bopts broker.Options, logger *slog.Logger) (*broker.Broker, int) {
	logger.Warn("-rejoin: the binlog diverged from the master's; moving the divergent tail aside", "err", d.Error())
	if err := b.Close(); err != nil {
		logger.Error("-rejoin: closing the broker failed", "err", err)
		return nil, exitFailure
	}
	man, dir, err := broker.Rewind(bopts, broker.RewindRequest{
		At: d.At, CommonLast: d.CommonLast, Master: d.Master, Reason: d.Error()})
	if err != nil {
		logger.Error("-rejoin: moving the divergent tail aside failed; the data directory is as recovery left it (re-run to retry)", "err", err)
		return nil, exitFailure
	}
	if man != nil {
		logger.Warn("-rejoin: done; following the master from the common prefix", "dir", dir, "commonLastEventId", man.CommonLastEventID,
			"movedEventIds", fmt.Sprintf("%d..%d", man.FirstEventID, man.LastEventID))
	}
	nb, err := broker.Open(bopts)
	if err != nil {
		logger.Error("cannot reopen the data directory after -rejoin", "dir", cfg.Store.Path, "err", err)
		return nil, exitFailure
	}
	return nb, -1
}
