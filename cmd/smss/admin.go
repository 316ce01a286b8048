package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smssmq/smss/admin"
	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/queue"
	"github.com/smssmq/smss/replication"
)

// version is the server version; release builds set it with
// -ldflags "-X main.version=v1.2.3". Without it the module version or VCS
// revision of the build is reported.
var version = ""

func serverVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	rev = rev[:min(len(rev), 12)]
	if dirty {
		rev += "-dirty"
	}
	return "devel+" + rev
}

// adminShutdownTimeout bounds the admin server's drain at exit.
const adminShutdownTimeout = 3 * time.Second

// adminEndpoint is the operator side of the process: the metrics every
// component records into and the admin HTTP server that serves them. A nil
// *adminEndpoint (admin.listen "") records nothing and serves nothing.
type adminEndpoint struct {
	m   *metrics.Metrics
	src *adminSource
	srv *admin.Server
	log *slog.Logger
}

// startAdmin starts the admin endpoint when admin.listen is set. It runs
// before the data directory is recovered, so /healthz answers and /readyz
// says "recovering" during a long recovery; the broker, the listen address
// and a slave's replication are attached as they come up.
func startAdmin(cfg *config.Config, role string, logger *slog.Logger) (*adminEndpoint, error) {
	if cfg.Admin.Listen == "" {
		return nil, nil
	}
	a := &adminEndpoint{m: metrics.New(), log: logger}
	a.src = newAdminSource(cfg, role, a.m)
	registerDiskMetrics(a.m.Registry(), a.src)
	srv, err := admin.New(admin.Options{
		Listen:         cfg.Admin.Listen,
		Token:          cfg.Admin.Token,
		Metrics:        a.m,
		Source:         a.src,
		Ready:          a.src.ready,
		Logger:         logger,
		MaxConns:       cfg.Admin.MaxConns,
		RequestTimeout: cfg.AdminRequestTimeout(),
		MaxBodyBytes:   cfg.Admin.MaxBodyBytes,
		SessionTTL:     cfg.AdminSessionTTL(),
		// Wrong tokens are throttled like failed logins.
		Throttle: auth.NewLimiter(auth.LimiterOptions{Free: cfg.Auth.MaxFailures, BaseDelay: cfg.Lockout(),
			MaxDelay: cfg.MaxLockout()}),
		ClientAuth: cfg.Auth.Enabled,
	})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	a.srv = srv
	return a, nil
}

// metrics is what the broker and the server record into (nil: nothing).
func (a *adminEndpoint) metrics() *metrics.Metrics {
	if a == nil {
		return nil
	}
	return a.m
}

func (a *adminEndpoint) setBroker(b *broker.Broker) {
	if a != nil {
		a.src.b.Store(b)
	}
}

// setCluster attaches the cluster node (-role auto): /api/cluster and
// the cluster metrics.
func (a *adminEndpoint) setCluster(an *autoNode) {
	if a != nil {
		a.src.cluster.Store(an)
	}
}

func (a *adminEndpoint) setListen(addr string) {
	if a != nil {
		a.src.listen.Store(&addr)
	}
}

func (a *adminEndpoint) setSync(t *replication.SyncTracker) {
	if a != nil {
		a.src.sync.Store(t)
	}
}

func (a *adminEndpoint) setQueues(m *queue.Manager) {
	if a != nil {
		a.src.queues.Store(m)
	}
}

func (a *adminEndpoint) setReplication(r *replicaRunner) {
	if a == nil {
		return
	}
	// A runner started by follow counts its sessions from zero.
	a.src.mu.Lock()
	a.src.reconnects, a.src.stopSeen = 0, false
	a.src.repl.Store(r)
	a.src.mu.Unlock()
}

// setListenerTLS attaches the TLS listener's material (nil: none), whose
// certificate the metrics report.
func (a *adminEndpoint) setListenerTLS(st *auth.ServerTLS) {
	if a != nil {
		a.src.listenerTLS.Store(st)
	}
}

// shutdown stops the admin server; call it before closing the broker, whose
// state the server reads. It may be called more than once.
func (a *adminEndpoint) shutdown() {
	if a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminShutdownTimeout)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		a.log.Warn("admin server shutdown incomplete", "err", err)
	}
	a.src.b.Store(nil)
}

// errRecovering answers Topics while the broker is not open yet.
var errRecovering = errors.New("the data directory is being recovered")

// adminSource is the metrics.Source of the process: the broker's views
// plus what only the process knows (version, listen address, start time,
// configuration, a slave's link to its master).
type adminSource struct {
	m       *metrics.Metrics
	role    string
	version string
	started int64
	config  map[string]any
	// quietAfter is replication.promoteQuietMs (a slave's caughtUp).
	quietAfter time.Duration

	b      atomic.Pointer[broker.Broker]
	listen atomic.Pointer[string]
	repl   atomic.Pointer[replicaRunner]
	sync   atomic.Pointer[replication.SyncTracker]
	queues atomic.Pointer[queue.Manager]
	// cluster is the cluster node (-role auto), nil otherwise.
	cluster atomic.Pointer[autoNode]
	// listenerTLS is the TLS listener's material, read at every scrape so
	// a reloaded certificate shows.
	listenerTLS atomic.Pointer[auth.ServerTLS]

	mu         sync.Mutex
	reconnects int  // replication sessions already counted as errors
	stopSeen   bool // replication's final stop already counted
}

func newAdminSource(cfg *config.Config, role string, m *metrics.Metrics) *adminSource {
	s := &adminSource{m: m, role: role, version: serverVersion(), started: time.Now().UnixMilli(), config: map[string]any{},
		quietAfter: time.Duration(cfg.Replication.PromoteQuietMs) * time.Millisecond}
	// Summary redacts secrets.
	for _, a := range cfg.Summary() {
		if attr, ok := a.(slog.Attr); ok {
			s.config[attr.Key] = attr.Value.Any()
		}
	}
	return s
}

// currentRole is the broker's role once it is open (a slave may have been
// promoted), the start-up role before.
func (s *adminSource) currentRole() string {
	b := s.b.Load()
	if b == nil {
		return s.role
	}
	if b.IsSlave() {
		return roleSlave
	}
	return roleMaster
}

// ready is admin's readiness: recovery finished, the client listener is
// serving, the writer has not stopped, and on a slave the replica stream is
// open.
func (s *adminSource) ready() (bool, string) {
	b := s.b.Load()
	if b == nil {
		return false, "recovering the data directory"
	}
	if err := b.FatalError(); err != nil {
		return false, "writer stopped on a fatal storage error: " + err.Error()
	}
	if err := b.ReadOnly(); err != nil {
		// The public /readyz shows the text before ": " only.
		return false, "started read-only on a full disk, not ready for writes (free space, then restart): " + err.Error()
	}
	if d := b.Disk(); d.Low {
		return false, fmt.Sprintf("disk almost full: %d MiB free, store.minFreeMB %d; pub, delay and create are refused",
			d.FreeBytes>>20, d.MinFreeBytes>>20)
	}
	if s.listen.Load() == nil {
		return false, "client listener not started"
	}
	if s.currentRole() != roleSlave {
		return true, ""
	}
	r := s.repl.Load()
	if r == nil {
		return false, "replication not started"
	}
	st := r.Status()
	if st.State == replication.StateStreaming {
		return true, ""
	}
	why := "replication " + string(st.State)
	if st.LastError != "" {
		why += ": " + st.LastError
	}
	return false, why
}

// Topics implements metrics.Source.
func (s *adminSource) Topics() ([]protocol.TopicInfo, error) {
	b := s.b.Load()
	if b == nil {
		return nil, errRecovering
	}
	ts, err := b.Topics()
	if err != nil {
		return nil, err
	}
	// The stored positions' system topic is the server's own, as in list
	// (100); /api/cursors and the cursor gauges show what it holds.
	out := ts[:0]
	for _, t := range ts {
		if !broker.IsSystemTopic(t.Name) {
			out = append(out, t)
		}
	}
	return out, nil
}

// Queues implements metrics.QueueSource: the queue groups this master
// serves (none on a slave or with queue.enabled false).
func (s *adminSource) Queues() []protocol.QueueInfo {
	m := s.queues.Load()
	if m == nil {
		return nil
	}
	qs, err := m.Info("", "")
	if err != nil {
		return nil
	}
	return qs
}

// Cursors implements metrics.CursorSource: the stored consumer positions.
func (s *adminSource) Cursors() []metrics.CursorInfo {
	b := s.b.Load()
	if b == nil {
		return nil
	}
	return b.CursorList("")
}

// TopicStats implements metrics.Source.
func (s *adminSource) TopicStats(name string) (metrics.TopicStats, bool) {
	b := s.b.Load()
	if b == nil {
		return metrics.TopicStats{}, false
	}
	return b.TopicStats(name)
}

// Subscribers implements metrics.Source.
func (s *adminSource) Subscribers() []metrics.SubscriberInfo {
	b := s.b.Load()
	if b == nil {
		return nil
	}
	return b.Subscribers()
}

// Delays implements metrics.Source.
func (s *adminSource) Delays() metrics.DelayStats {
	b := s.b.Load()
	if b == nil {
		return metrics.NewDelayStats()
	}
	return b.Delays()
}

var _ metrics.ClusterSource = (*adminSource)(nil)

// Cluster implements metrics.ClusterSource.
func (s *adminSource) Cluster() (metrics.ClusterInfo, bool) {
	an := s.cluster.Load()
	if an == nil {
		return metrics.ClusterInfo{}, false
	}
	return an.metrics(), true
}

// ClusterReport implements metrics.ClusterSource: it asks every node.
func (s *adminSource) ClusterReport(ctx context.Context) (metrics.ClusterReportInfo, bool) {
	an := s.cluster.Load()
	if an == nil {
		return metrics.ClusterReportInfo{}, false
	}
	return metrics.ClusterReportInfo{Node: an.self, LeaseValid: an.cn.LeaseValid(), ClusterReport: an.report(ctx)}, true
}

// ServerInfo implements metrics.Source.
func (s *adminSource) ServerInfo() metrics.ServerInfo {
	var in metrics.ServerInfo
	if b := s.b.Load(); b != nil {
		in = b.ServerInfo()
	}
	in.Version, in.Role, in.StartTime, in.Config = s.version, s.currentRole(), s.started, s.config
	if a := s.listen.Load(); a != nil {
		in.ListenAddr = *a
	}
	in.Certificates = s.certificates()
	return in
}

// certificates are the certificates in force: the TLS listener's and a
// slave's client certificate for its master.
func (s *adminSource) certificates() []metrics.CertificateInfo {
	var out []metrics.CertificateInfo
	add := func(key string, leaf *x509.Certificate) {
		if leaf != nil {
			out = append(out, metrics.CertificateInfo{Key: key, Subject: leaf.Subject.String(), NotAfter: leaf.NotAfter.UnixMilli()})
		}
	}
	if st := s.listenerTLS.Load(); st != nil {
		add(listenerKeys.cert, st.Leaf())
	}
	if r := s.repl.Load(); r != nil && r.link != nil && r.link.tls != nil {
		add(masterKeys.cert, r.link.tls.Leaf())
	}
	return out
}

// Replication implements metrics.Source: the broker's view (a master's
// slaves) plus, on a slave, the link to the master.
func (s *adminSource) Replication() metrics.ReplicationInfo {
	role := s.currentRole()
	r := metrics.ReplicationInfo{Role: role, Slaves: []metrics.SlaveInfo{}}
	b := s.b.Load()
	if b != nil {
		r = b.Replication()
		r.Role = role
		if !b.IsSlave() {
			s.sync.Load().Annotate(&r)
		}
	}
	if role != roleSlave {
		return r
	}
	rr := s.repl.Load()
	if rr == nil {
		return r
	}
	st := rr.Status()
	s.countSessionErrors(st)
	link := &metrics.MasterLink{Addr: st.MasterAddr, State: linkState(st), Position: st.LastEventID,
		LagEvents: -1, LastError: st.LastError}
	if !st.LastFrameAt.IsZero() {
		link.LastContact = st.LastFrameAt.UnixMilli()
	}
	v := slaveStream(st, s.quietAfter, time.Now())
	link.LastBlockAt, link.QuietMs, link.CaughtUp = v.LastBlockAt, v.QuietMs, v.CaughtUp
	if b != nil {
		link.LagSeconds = rr.lagSeconds(b, st)
	}
	r.Master = link
	return r
}

// countSessionErrors turns the sessions that ended since the last look
// into replication errors: the replication package keeps a count rather
// than calling back. Replication() runs at least once a second while the
// admin endpoint is up (its sampler), and metrics exist only then.
func (s *adminSource) countSessionErrors(st replication.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ; s.reconnects < st.Reconnects; s.reconnects++ {
		s.m.Error(metrics.KindReplication)
	}
	if st.State == replication.StateStopped && st.LastError != "" && !s.stopSeen {
		s.stopSeen = true
		s.m.Error(metrics.KindReplication)
	}
}

func linkState(st replication.Status) string {
	switch st.State {
	case replication.StateStreaming:
		return metrics.LinkStreaming
	case replication.StateStopped:
		return metrics.LinkStopped
	case replication.StateConnecting:
		if st.LastError != "" && time.Now().Before(st.NextRetry) {
			return metrics.LinkRetrying
		}
	}
	return metrics.LinkConnecting
}

// aliveAfterApply is how much later than the last apply the last frame must
// have arrived to have been an alive: a data frame's time is taken right
// after its apply, an alive comes only after a whole alive interval of
// silence.
const aliveAfterApply = 50 * time.Millisecond

// lagSeconds is how far behind the master the last applied block was when
// it was applied (its write time is the master's), or 0 when the master
// has since said it has nothing newer (an alive). Measuring at apply time
// keeps an idle, caught-up slave from looking more and more behind until
// the next alive.
func (r *replicaRunner) lagSeconds(b *broker.Broker, st replication.Status) float64 {
	id, at := r.applied.Load(), r.appliedAt.Load()
	if at == 0 || st.LastFrameAt.Sub(time.Unix(0, at)) > aliveAfterApply {
		return 0
	}
	wt, last, ok := lastBinlogBlock(b)
	if !ok || last != id {
		return 0
	}
	return max(float64(time.Unix(0, at).UnixMilli()-wt)/1000, 0)
}

// lastBinlogBlock returns the write time and last eventId of the newest
// block in b's binlog.
func lastBinlogBlock(b *broker.Broker) (writeTime, last int64, ok bool) {
	blk, ok, err := b.NewestBinlogBlock()
	if err != nil || !ok {
		return 0, 0, false
	}
	if last, err = blk.LastEventID(); err != nil {
		return 0, 0, false
	}
	return blk.WriteTime, last, true
}

var _ metrics.Source = (*adminSource)(nil)

// registerDiskMetrics exports the disk guard's last reading (no syscall per
// scrape): smss_disk_free_bytes, smss_disk_min_free_bytes
// (store.minFreeMB) and smss_disk_writes_refused (1 while pub, delay and
// create are refused for lack of space).
func registerDiskMetrics(reg *prometheus.Registry, src *adminSource) {
	read := func(f func(broker.DiskState) float64) func() float64 {
		return func() float64 {
			b := src.b.Load()
			if b == nil {
				return 0
			}
			return f(b.Disk())
		}
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "smss_disk_free_bytes",
			Help: "Free space of the data directory's filesystem at the last reading (every second; 0 when store.minFreeMB is 0)."},
			read(func(d broker.DiskState) float64 { return float64(d.FreeBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "smss_disk_min_free_bytes",
			Help: "store.minFreeMB in bytes: below it pub, delay and create are refused; 0 when off."},
			read(func(d broker.DiskState) float64 { return float64(d.MinFreeBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "smss_disk_writes_refused",
			Help: "1 while pub, delay and create are refused because the disk is below store.minFreeMB, or every write after a read-only start."},
			read(func(d broker.DiskState) float64 {
				if d.Low || d.ReadOnly {
					return 1
				}
				return 0
			})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "smss_read_only",
			Help: "1 when the server started read-only on a full disk: every write is refused until a restart (free space, then restart to resume writes)."},
			read(func(d broker.DiskState) float64 {
				if d.ReadOnly {
					return 1
				}
				return 0
			})),
	)
}
