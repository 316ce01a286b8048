// Command smss is the smss message-queue server (docs/protocol.md §9).
//
// Start-up: load and validate the configuration (-config, else
// ./config/config.yaml, else the embedded defaults), set up logging, open the
// broker (which recovers the data directory), listen and serve. SIGINT or
// SIGTERM shuts down gracefully: the server stops accepting and drains its
// connections (10 s at most; a second signal cuts that short): requests
// being served, received but not yet read (server.DrainGrace) or pipelined
// in a read buffer get their reply; subscriptions end with a 400. Then the
// broker finishes its in-flight group, fsyncs and closes.
//
// SIGHUP (reload.go) re-reads the users file (auth.enabled), the TLS
// listener's certificate, key and client CAs (tls.listen), and a slave's
// TLS material (replication.useTLS) and password file (replication.user)
// for its next connection to the master; a file that fails to load leaves
// the previous state in force. With none of these configured it logs that
// there is nothing to reload. SIGHUP never ends the process.
//
// With admin.listen set (admin.go), the admin HTTP endpoint starts before
// recovery, so /healthz answers and /readyz says why it is not ready while
// a large data directory is recovered; it stops before the broker closes.
// Without it, no metrics are recorded at all.
//
// Exit status: 0 after a clean shutdown; 2 for bad flags or configuration
// (the message names the flag or key); 1 for any other failure, including
// a fatal broker error (e.g. a failed fsync), after which the process must
// not keep accepting writes, and a slave whose binlog has diverged from its
// master's (replication.go; -rejoin moves the divergent tail aside instead).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/logging"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
	"github.com/smssmq/smss/server"
)

// shutdownTimeout bounds the graceful drain of client connections.
const shutdownTimeout = 10 * time.Second

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	// SIGHUP's default action ends the process: catch it for the whole run
	// so that a logrotate-style "kill -HUP" during start-up or shutdown is
	// dropped; while serving, reloadOnHUP also receives it and reloads.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, sig))
}

// run is the whole program minus process plumbing, so tests can drive it:
// it returns the exit status and stops when sig delivers a value.
func run(args []string, stdout, stderr io.Writer, sig <-chan os.Signal) int {
	fl, code := parseFlags(args, stderr)
	if code >= 0 {
		return code
	}
	cfg, err := config.Load(fl.configPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	logger, logCloser, err := logging.NewTo(cfg.Log, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
	}
	defer logCloser.Close()

	role := fl.resolveRole(logger)
	var auto *autoNode
	switch {
	case role == roleAuto && !cfg.Cluster.Enabled():
		fmt.Fprintln(stderr, "smss: -role auto needs the config's cluster section (cluster.node and cluster.peers); see config/config.yaml")
		return exitUsage
	case role != roleAuto && cfg.Cluster.Enabled():
		logger.Warn("the config has a cluster section but -role is not auto: this node runs outside the cluster", "role", role)
	}
	logger.Info("config in effect", cfg.Summary()...)
	logMaxProcs(cfg.Server.MaxProcs, logger)
	warnFDBudget(cfg, logger)

	adm, err := startAdmin(cfg, role, logger)
	if err != nil {
		logger.Error("cannot start the admin endpoint", "key", "admin.listen", "err", err)
		return exitFailure
	}
	defer adm.shutdown()

	if err := secureDataDir(cfg, logger); err != nil {
		logger.Error("cannot prepare the data directory", "key", "store.path", "err", err)
		return exitFailure
	}
	// A node changes role in place (a cluster's master that steps down
	// comes back as a slave of the new one, through -rejoin's path): the
	// broker, the server and the node are built anew, the process and its
	// admin endpoint stay.
	if role == roleAuto {
		var err error
		if auto, err = startAuto(cfg, logger); err != nil {
			logger.Error("cannot start the cluster node", "err", err)
			if isConfigError(err) {
				return exitUsage
			}
			return exitFailure
		}
		defer auto.close()
		adm.setCluster(auto)
		defer adm.setCluster(nil) // before the consensus closes
		// Every node of a cluster starts as a slave following nobody; the
		// agent promotes it or points it at the master (cluster.go).
		role = roleSlave
	}
	for {
		code, next := runNode(cfg, fl, role, adm, auto, logger, sig)
		if next == nil {
			logger.Info("smss stopped", "exit", code)
			return code
		}
		logger.Warn("restarting in place with a new role", "role", next.role, "master", next.master(), "rejoin", next.rejoin, "why", next.why)
		nf := *fl
		nf.masterHost, nf.masterPort, nf.rejoin = next.masterHost, next.masterPort, next.rejoin
		fl, role = &nf, next.role
	}
}

// restartAs asks runNode's caller to run the node again with another role
// (serve returns it).
type restartAs struct {
	role       string
	masterHost string
	masterPort int
	rejoin     bool
	why        string
}

func (r *restartAs) master() string {
	if r.masterHost == "" {
		return ""
	}
	return net.JoinHostPort(r.masterHost, fmt.Sprint(r.masterPort))
}

// runNode opens the data directory, serves with role until a signal, a
// failure or a role change, and closes it. It returns the exit status, or
// the role to run again with.
func runNode(cfg *config.Config, fl *flags, role string, adm *adminEndpoint, auto *autoNode, logger *slog.Logger, sig <-chan os.Signal) (int, *restartAs) {
	code := exitOK
	bopts := broker.Options{
		Dir:           cfg.Store.Path,
		MaxLogSize:    cfg.Store.MaxLogSize,
		FlushLevel:    cfg.Store.FlushLevel,
		FolderCount:   cfg.Store.FolderCount,
		NoCache:       cfg.Store.NoCache,
		BuffSize:      cfg.Worker.BuffSize,
		MaxGroup:      cfg.Worker.MaxGroup,
		GroupWait:     time.Duration(cfg.Worker.GroupWaitUs) * time.Microsecond,
		MaxGroupBytes: cfg.Worker.MaxGroupBytes,
		IdleWake:      cfg.IdleWake(),
		IdleLogSample: cfg.Worker.WaitMsgTimeoutLogSample,
		MaxFrameBytes: cfg.Limit.MaxFrameBytes,
		MinFreeBytes:  cfg.Store.MinFreeMB << 20,
		MaxOpenTopics: cfg.Store.MaxOpenTopics,
		Slave:         role == roleSlave,
		MinLifetime:   protocol.MinLifetimeMs * time.Millisecond,
		MaxDelay:      cfg.MaxDelay(),
		Logger:        logger,
		LogSample:     cfg.Log.Sample,
		Metrics:       adm.metrics(),
		DedupeWindow:  cfg.DedupeWindow(),
		DedupeMaxIDs:  cfg.Dedupe.MaxIDs,

		CursorsOff:             !cfg.Cursor.Enabled,
		CursorFlushInterval:    cfg.CursorFlushInterval(),
		CursorSegmentBytes:     cfg.Cursor.SegmentBytes,
		CursorSnapshotInterval: cfg.CursorSnapshotInterval(),
		CursorRetention:        cfg.CursorRetention(),
		ReadCommitted:          cfg.Replication.ReadCommittedOn(),
		ReplicateBeforeSync:    cfg.ReplicateBeforeSync(),
	}
	bopts.InlineDeliveries = inlineDeliveries(cfg.Worker.InlineDeliveries)
	b, err := broker.Open(bopts)
	if err != nil {
		logger.Error("cannot open the data directory", "dir", cfg.Store.Path, "err", err)
		return exitFailure, nil
	}
	if role == roleSlave && b.ReadOnly() != nil {
		// The divergence check may move a tail aside (-rejoin): a write.
		logger.Warn("started read-only: skipping the check against the master's binlog", "cause", b.ReadOnly())
	} else if role == roleSlave && fl.masterHost != "" {
		if b, code = checkDivergence(cfg, fl, b, bopts, logger, sig); code >= 0 {
			return code, nil
		}
	} else if fl.rejoin {
		logger.Warn("-rejoin applies to -role slave only; ignored")
	}
	adm.setBroker(b)
	bg, err := startBackground(cfg, b, logger)
	if err != nil {
		logger.Error("cannot start the background jobs", "err", err)
		adm.shutdown()
		b.Close()
		return exitFailure, nil
	}
	n := &node{cfg: cfg, b: b, bg: bg, adm: adm, log: logger, event: fl.event, diverged: make(chan error, 1),
		restart: make(chan *restartAs, 1), auto: auto}
	code, next := serve(cfg, role, fl, n, adm, logger, sig)
	bg.stop() // background jobs write through the broker: stop them first
	if next == nil {
		adm.shutdown() // it reads the broker's state
	} else {
		adm.setBroker(nil) // until the next run opens it again
	}
	if err := b.Close(); err != nil {
		logger.Error("closing the broker failed; the last writes may not be durable", "err", err)
		code = exitFailure
	}
	return code, next
}

// serve runs the network server until a signal, a fatal broker error or a
// server failure, then shuts the server down. The caller closes the broker.
func serve(cfg *config.Config, role string, fl *flags, n *node, adm *adminEndpoint, logger *slog.Logger, sig <-chan os.Signal) (int, *restartAs) {
	b := n.b
	var next *restartAs // set when the node leaves serve to run again with another role
	sec, listenerTLS, err := setupSecurity(cfg, logger)
	if err != nil {
		logger.Error("cannot set up authentication or TLS", "err", err)
		return exitUsage, nil
	}
	// Replication is always the broker's source: the server serves replica
	// requests while the broker is a master, which it asks at each request,
	// so a promoted slave serves its slaves. n answers status, promote and
	// follow.
	//
	// The tracker exists on a slave too: a promoted slave answers writes
	// as a master started with the same configuration would.
	syncTracker, err := replication.NewSyncTracker(replication.SyncOptions{
		Slaves:      cfg.Replication.SyncSlaves,
		Timeout:     cfg.SyncTimeout(),
		Degrade:     cfg.Replication.OnSyncTimeout == config.SyncDegrade,
		LastEventID: b.LastEventID,
		Logger:      logger,
		LogSample:   cfg.Log.Sample,
		OnCommit:    b.SetCommitPoint, // read-committed delivery; a no-op when off
		InSync:      n.auto != nil,
		Fence:       n.fence(),
		DurableGate: cfg.ReplicateBeforeSync(),
	})
	if err != nil {
		logger.Error("cannot set up semi-synchronous replication", "err", err)
		return exitUsage, nil
	}
	if cfg.ReplicateBeforeSync() {
		// Slaves get each group before the master's fsync: the commit
		// point follows the master's synced copy too.
		b.SetDurableHook(syncTracker.Durable)
		defer b.SetDurableHook(nil)
	}
	adm.setSync(syncTracker)
	n.sync = syncTracker
	var queues server.Queues
	if qm := newQueues(cfg, b, syncTracker, logger); qm != nil {
		n.bg.setQueues(qm)
		adm.setQueues(qm)
		queues = queueService{qm}
	}
	srv, err := server.New(server.Options{
		Host:      cfg.Host,
		Port:      cfg.Port,
		Backend:   backend{b},
		Logger:    logger,
		LogSample: cfg.Log.Sample,
		Limits: protocol.Limits{
			MaxPayload: cfg.Limit.MaxPayload,
			MaxWho:     cfg.Limit.MaxWho,
			MaxRecords: cfg.Limit.MaxRecords,
			MaxDiscard: discardLimit(cfg.Limit.MaxDiscard),
		},
		ReadTimeout:       cfg.ReadTimeout(),
		RequestTimeout:    cfg.RequestTimeout(),
		WriteTimeout:      cfg.ReplyTimeout(),
		IdleTimeout:       cfg.IdleTimeout(),
		AliveWriteTimeout: cfg.AliveWriteTimeout(),
		MaxConns:          cfg.Limit.MaxConns,
		MaxConnsPerIP:     cfg.Limit.MaxConnsPerIP,
		AliveInterval:     cfg.AliveInterval(),
		DefaultAckTimeout: cfg.DefaultAckTimeout(),
		MaxAckTimeout:     cfg.MaxAckTimeout(),
		Replication:       replication.SourceOf(b.ReplicaStream),
		ReplicaLinger:     cfg.ReplicaLinger(),
		Sync:              syncTracker,
		ReplicaEpoch:      b.Epoch,
		OnSlaveEpoch:      n.slaveEpoch,
		Metrics:           adm.metrics(),
		Security:          sec,
		Control:           n,
		Failover:          n,
		Cursors:           backend{b},
		Queues:            queues,
		Epoll:             cfg.Server.Epoll,
		EpollGroupWait:    epollGroupWait(cfg),
		EpollMinConns:     cfg.Server.EpollMinConns,
		EpollTurnBytes:    cfg.Worker.MaxGroupBytes,
	})
	if err != nil {
		logger.Error("cannot create the server", "err", err)
		return exitFailure, nil
	}
	if err := srv.Listen(); err != nil {
		logger.Error("cannot listen", "addr", cfg.ListenAddr(), "err", err)
		return exitFailure, nil
	}
	addr := srv.Addr()
	adm.setListenerTLS(listenerTLS)
	warnExposure(logger, srv, sec.Auth != nil)
	hup := &reloader{log: logger, listener: listenerTLS}
	if n.auto != nil {
		hup.raft = n.auto.raftTLS
	}
	if sec.Auth != nil {
		hup.users = srv.ReloadUsers
	}
	// Replication stops (after its in-flight block) when serve returns;
	// promote and follow are refused from then on.
	defer n.stop()
	if role == roleSlave && b.ReadOnly() != nil {
		// A slave that cannot write cannot apply a block: it would fail
		// each one. It serves what it holds until a restart with space.
		logger.Error("REPLICATION PAUSED: this slave started read-only on a full disk and cannot apply replicated blocks; free some space and restart it to resume replication",
			"master", net.JoinHostPort(fl.masterHost, fmt.Sprint(fl.masterPort)), "cause", b.ReadOnly())
	} else if role == roleSlave && n.auto != nil && fl.masterHost == "" {
		logger.Info("cluster node: following no master until the cluster names one", "node", n.auto.self)
	} else if role == roleSlave {
		if err := n.startFollowing(fl.masterHost, fl.masterPort); err != nil {
			logger.Error("cannot start replication", "err", err)
			srv.Shutdown(context.Background())
			return exitUsage, nil
		}
		hup.master = n.link()
		// follow replaces the link: SIGHUP reloads the one in use.
		hup.masterNow = n.link
	}
	// Before "smss listening", which tells scripts they may send SIGHUP.
	defer reloadOnHUP(hup)()
	logger.Info("smss listening", "addr", addr.String(), "role", role, "data", cfg.Store.Path)
	adm.setListen(addr.String())

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }()
	if n.auto != nil {
		n.auto.attach(n)
		defer n.auto.detach()
	}

	code := exitOK
	select {
	case s := <-sig:
		logger.Info("shutting down", "signal", s.String())
	case err := <-b.Fatal():
		logger.Error("the writer stopped on a fatal error; shutting down", "err", err)
		code = exitFailure
	case next = <-n.restart:
		logger.Warn("leaving this role: the server stops and the node runs again", "role", next.role, "why", next.why)
	case err := <-n.diverged:
		if r := n.runner.Load(); n.auto != nil && r != nil {
			host, port, _ := net.SplitHostPort(r.addr)
			p, _ := strconv.Atoi(port)
			next = &restartAs{role: roleSlave, masterHost: host, masterPort: p, rejoin: true,
				why: "this node's binlog diverged from the master's: the divergent tail goes aside (-rejoin)"}
			logger.Warn("leaving this role: the server stops and the node rejoins", "master", r.addr, "err", err)
			break
		}
		logger.Error("STOPPING: this node's binlog is not a prefix of its master's; restart it with -rejoin to move the divergent tail aside and follow", "err", err)
		code = exitFailure
	case err := <-serveErr:
		logger.Error("the server stopped unexpectedly; shutting down", "err", err)
		serveErr = nil
		code = exitFailure
	}

	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	go func() {
		select {
		case s := <-sig:
			logger.Warn("second signal: abandoning the graceful drain", "signal", s.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := srv.Shutdown(ctx); err != nil {
		logger.Warn("server shutdown incomplete", "err", err)
	}
	if serveErr != nil {
		select {
		case err := <-serveErr:
			if !errors.Is(err, server.ErrServerClosed) {
				logger.Warn("server stopped with an error", "err", err)
			}
		case <-ctx.Done():
			logger.Warn("server did not stop within the shutdown timeout", "timeout", shutdownTimeout)
		}
	}
	return code, next
}

// backend is the broker as the server sees it: only Subscribe's result
// type differs.
type backend struct{ *broker.Broker }

func (b backend) Subscribe(topic, who []byte, after int64) (server.Subscription, error) {
	s, err := b.Broker.Subscribe(topic, who, after)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return s, nil
}

// brokerPubs recycles PublishBatch's lists.
var brokerPubs = sync.Pool{New: func() any { s := make([]broker.Pub, 0, 64); return &s }}

// PublishBatch serves the epoll loop's publishes (server.BatchPublisher).
func (b backend) PublishBatch(ctx context.Context, ps []server.Pub) {
	sp := brokerPubs.Get().(*[]broker.Pub)
	bs := (*sp)[:0]
	for _, p := range ps {
		bs = append(bs, broker.Pub{Topic: p.Topic, Records: p.Records, Count: p.Count})
	}
	b.Broker.PublishBatch(ctx, bs)
	for i := range ps {
		ps[i].EventID, ps[i].Err = bs[i].EventID, bs[i].Err
	}
	clear(bs)
	*sp = bs[:0]
	brokerPubs.Put(sp)
}

// SubscribeResume serves a sub from eventId -1 (server.Cursors).
func (b backend) SubscribeResume(topic, who []byte, whenNone int64) (server.Subscription, error) {
	s, err := b.Broker.SubscribeResume(topic, who, whenNone)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// exposure returns a warning when the listener is reachable from other
// hosts: there is no authentication (docs/protocol.md §10 item 24).
func exposure(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return ""
	}
	switch {
	case tcp.IP.IsLoopback():
		return ""
	case tcp.IP.IsUnspecified():
		return "listening on all interfaces: remote clients can connect without authentication (auth.enabled is false); set host: 127.0.0.1 to restrict"
	default:
		return "listening on a non-loopback address: remote clients can connect without authentication (auth.enabled is false)"
	}
}

// discardLimit maps limit.maxDiscard (0: close at once) to
// protocol.Limits.MaxDiscard (negative: close at once).
func discardLimit(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// inlineDeliveries maps worker.inlineDeliveries to broker.Options: 0 (off)
// is negative there, where zero takes the default.
func inlineDeliveries(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// epollGroupWait is worker.groupWaitUs for the epoll loop: flushLevel 2's
// group wait, which the broker applies at that level only.
func epollGroupWait(cfg *config.Config) time.Duration {
	if cfg.Store.FlushLevel < 2 {
		return 0
	}
	return time.Duration(cfg.Worker.GroupWaitUs) * time.Microsecond
}
