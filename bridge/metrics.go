package bridge

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Error kinds of smss_bridge_errors_total.
const (
	ErrKindMaster = "master" // the master was unreachable or the stream broke
	ErrKindTarget = "target" // the target was unreachable or refused a publish
)

// Stats is a snapshot of the bridge's progress.
type Stats struct {
	Mirrored    int64 // messages the target acknowledged (this process)
	Skipped     int64 // messages re-received after a resume that the target already held
	Bytes       int64 // body bytes acknowledged
	Received    int64 // last eventId received from the master
	MasterLast  int64 // the master's last eventId (status), 0 if unknown
	Safe        int64 // every mirrored message up to this eventId is in the target
	LagEvents   int64 // max(Received, MasterLast) - Safe
	LagSeconds  float64
	CommitPoint int64 // the last commit point a version 3 master sent this session, 0 if none
	HeldBlocks  int64 // blocks received above the commit point, not yet mirrored
	HeldBytes   int64
	Sessions    int64
	MasterErrs  int64
	TargetErrs  int64
	LastMasterE string
}

type metrics struct {
	reg *prometheus.Registry

	mirrored, skipped, bytes prometheus.Counter
	blocks                   *prometheus.CounterVec
	errs                     *prometheus.CounterVec
	sessions                 prometheus.Counter
	received, safe, head     prometheus.Gauge
	commit, held, heldBytes  prometheus.Gauge

	// Mirrors for Stats and the log line (prometheus counters are not
	// cheap to read).
	nMirrored, nSkipped, nBytes, nSessions atomic.Int64
	nMasterErr, nTargetErr                 atomic.Int64
	vReceived, vSafe, vHead                atomic.Int64
	vCommit, vHeld, vHeldBytes             atomic.Int64
	oldestUnacked                          atomic.Int64 // writeTime ms of the oldest block in flight, 0 = none
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	m.mirrored = f("smss_bridge_messages_total", "Messages the target acknowledged.")
	m.skipped = f("smss_bridge_skipped_total", "Messages received again after a resume and skipped because the target already held them.")
	m.bytes = f("smss_bridge_body_bytes_total", "Body bytes of acknowledged messages.")
	m.sessions = f("smss_bridge_sessions_total", "Sessions started (a connection to the master and the target).")
	m.blocks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "smss_bridge_blocks_total",
		Help: "Binlog blocks received, by command."}, []string{"cmd"})
	m.errs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "smss_bridge_errors_total",
		Help: "Failures that ended a session, by side (master, target)."}, []string{"kind"})
	m.received = prometheus.NewGauge(prometheus.GaugeOpts{Name: "smss_bridge_received_event_id",
		Help: "Last eventId received from the master."})
	m.safe = prometheus.NewGauge(prometheus.GaugeOpts{Name: "smss_bridge_mirrored_event_id",
		Help: "Every mirrored message up to this eventId is stored in the target."})
	m.head = prometheus.NewGauge(prometheus.GaugeOpts{Name: "smss_bridge_master_event_id",
		Help: "The master's last eventId, from its status (command 34); 0 when it does not answer it."})
	m.commit = prometheus.NewGauge(prometheus.GaugeOpts{Name: "smss_bridge_commit_point",
		Help: "The master's commit point, from the last commit frame (a version 3 master, read-committed delivery); 0 when it sends none."})
	m.held = prometheus.NewGauge(prometheus.GaugeOpts{Name: "smss_bridge_held_blocks",
		Help: "Binlog blocks received above the master's commit point and held, not mirrored, until it passes them."})
	m.heldBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "smss_bridge_held_bytes",
		Help: "Bytes of the held blocks (bounded by source.maxHeldBytes)."})
	m.reg.MustRegister(m.blocks, m.errs, m.received, m.safe, m.head, m.commit, m.held, m.heldBytes)
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "smss_bridge_lag_events",
		Help: "eventIds the master has (its status, or else what was received) that are not yet stored in the target."},
		func() float64 { return float64(m.lagEvents()) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "smss_bridge_lag_seconds",
		Help: "Age (by the master's write time) of the oldest block not yet stored in the target; 0 when none is in flight."},
		func() float64 { return m.lagSeconds() }))
	for _, k := range []string{ErrKindMaster, ErrKindTarget} {
		m.errs.WithLabelValues(k)
	}
	return m
}

func (m *metrics) lagEvents() int64 {
	return max(0, max(m.vReceived.Load(), m.vHead.Load())-m.vSafe.Load())
}

func (m *metrics) lagSeconds() float64 {
	wt := m.oldestUnacked.Load()
	if wt == 0 {
		return 0
	}
	return max(0, float64(time.Now().UnixMilli()-wt)/1000)
}

func (m *metrics) setReceived(id int64) { m.vReceived.Store(id); m.received.Set(float64(id)) }
func (m *metrics) setSafe(id int64)     { m.vSafe.Store(id); m.safe.Set(float64(id)) }
func (m *metrics) setHead(id int64)     { m.vHead.Store(id); m.head.Set(float64(id)) }
func (m *metrics) setCommit(id int64)   { m.vCommit.Store(id); m.commit.Set(float64(id)) }

func (m *metrics) setHeld(blocks, bytes int) {
	m.vHeld.Store(int64(blocks))
	m.held.Set(float64(blocks))
	m.vHeldBytes.Store(int64(bytes))
	m.heldBytes.Set(float64(bytes))
}

func (m *metrics) acked(n int, body int) {
	m.nMirrored.Add(int64(n))
	m.mirrored.Add(float64(n))
	m.nBytes.Add(int64(body))
	m.bytes.Add(float64(body))
}

func (m *metrics) skip() { m.nSkipped.Add(1); m.skipped.Inc() }

func (m *metrics) err(kind string) {
	m.errs.WithLabelValues(kind).Inc()
	if kind == ErrKindMaster {
		m.nMasterErr.Add(1)
	} else {
		m.nTargetErr.Add(1)
	}
}

func (m *metrics) stats() Stats {
	return Stats{
		Mirrored: m.nMirrored.Load(), Skipped: m.nSkipped.Load(), Bytes: m.nBytes.Load(),
		Received: m.vReceived.Load(), MasterLast: m.vHead.Load(), Safe: m.vSafe.Load(), LagEvents: m.lagEvents(), LagSeconds: m.lagSeconds(),
		CommitPoint: m.vCommit.Load(), HeldBlocks: m.vHeld.Load(), HeldBytes: m.vHeldBytes.Load(),
		Sessions: m.nSessions.Load(), MasterErrs: m.nMasterErr.Load(), TargetErrs: m.nTargetErr.Load(),
	}
}

// serveMetrics serves /metrics on addr until ctx ends. It returns the
// address it listens on.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { srv.Close() })
	return ln.Addr().String(), nil
}
