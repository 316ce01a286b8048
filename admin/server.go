package admin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/smssmq/smss/metrics"
)

// DefaultListen is the address the sample config suggests for admin.listen.
// The listener itself is off unless configured (Options.Listen "").
const DefaultListen = "127.0.0.1:12380"

// Defaults of Options.
const (
	DefaultSampleInterval = time.Second
	DefaultHistory        = 300
	DefaultMaxStreams     = 64
)

// ErrClosed is returned by Start after Shutdown.
var ErrClosed = errors.New("admin: server closed")

// Options configures a Server.
type Options struct {
	// Listen is host:port; "" disables the listener (Start does nothing).
	Listen string
	// Token, when set, protects every endpoint but /healthz (see the
	// package doc).
	Token string
	// Metrics is served on /metrics and feeds the snapshots; nil means a
	// private metrics.New() (runtime and Source gauges only).
	Metrics *metrics.Metrics
	// Source answers the JSON API; New attaches it to Metrics too. Nil
	// makes the JSON endpoints answer 503.
	Source metrics.Source
	// Ready reports readiness and, when not ready, why; nil means always
	// ready.
	Ready func() (bool, string)
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	// SampleInterval is the snapshot period (DefaultSampleInterval).
	SampleInterval time.Duration
	// History is how many snapshots a new event stream receives first
	// (DefaultHistory).
	History int
	// MaxStreams caps concurrent /api/events streams (DefaultMaxStreams).
	MaxStreams int
}

// Server is the admin HTTP server.
type Server struct {
	opts    Options
	log     *slog.Logger
	m       *metrics.Metrics
	src     metrics.Source
	session string // cookie value that stands for the token
	handler http.Handler
	sampler *sampler
	started time.Time

	mu      sync.Mutex
	srv     *http.Server
	ln      net.Listener
	closed  bool
	stopped chan struct{} // closed by Shutdown; ends streams and the sampler
	wg      sync.WaitGroup
}

// New builds a Server; it does not listen until Start.
func New(opts Options) (*Server, error) {
	if opts.Listen != "" {
		if _, _, err := net.SplitHostPort(opts.Listen); err != nil {
			return nil, fmt.Errorf("admin: listen address %q: %w", opts.Listen, err)
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.SampleInterval <= 0 {
		opts.SampleInterval = DefaultSampleInterval
	}
	if opts.History <= 0 {
		opts.History = DefaultHistory
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.Source != nil {
		opts.Metrics.SetSource(opts.Source)
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger.With("component", "admin"),
		m:       opts.Metrics,
		src:     opts.Source,
		started: time.Now(),
		stopped: make(chan struct{}),
	}
	if opts.Token != "" {
		s.session = sessionValue(opts.Token)
	}
	root, err := webRoot()
	if err != nil {
		return nil, err
	}
	s.sampler = newSampler(s)
	s.handler = s.routes(root)
	return s, nil
}

func (s *Server) routes(web fs.FS) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("POST /api/login", s.login)
	mux.HandleFunc("POST /api/logout", s.logout)
	mux.Handle("GET /{$}", staticFile(web, "index.html"))
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles(web)))

	protected := http.NewServeMux()
	protected.HandleFunc("GET /readyz", s.readyz)
	protected.Handle("GET /metrics", promhttp.HandlerFor(s.m.Registry(), promhttp.HandlerOpts{
		ErrorLog:      slogPrinter{s.log},
		ErrorHandling: promhttp.ContinueOnError,
	}))
	protected.HandleFunc("GET /api/info", s.apiInfo)
	protected.HandleFunc("GET /api/topics", s.apiTopics)
	protected.HandleFunc("GET /api/subscribers", s.apiSubscribers)
	protected.HandleFunc("GET /api/replication", s.apiReplication)
	protected.HandleFunc("GET /api/delays", s.apiDelays)
	protected.HandleFunc("GET /api/snapshot", s.apiSnapshot)
	protected.HandleFunc("GET /api/events", s.apiEvents)
	protected.HandleFunc("/debug/pprof/", pprof.Index)
	protected.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	protected.HandleFunc("/debug/pprof/profile", pprof.Profile)
	protected.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	protected.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", s.requireAuth(protected))
	return securityHeaders(mux)
}

// Handler is the server's whole HTTP handler, for tests or for mounting it
// elsewhere. Snapshots (/api/snapshot, /api/events) need the sampler, which
// only runs between Start and Shutdown.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on Options.Listen and serves in the background. With an
// empty Listen it does nothing.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.opts.Listen == "" || s.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("admin: listen on %s: %w", s.opts.Listen, err)
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// No ReadTimeout or WriteTimeout: an expired read deadline cancels
		// the request context, which would end event streams and CPU
		// profiles. Bodies are capped by the handlers that read one and
		// streams bound each write themselves.
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.sampler.run(s.stopped)
	}()
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server stopped", "err", err)
		}
	}()
	addr := ln.Addr().String()
	s.log.Info("admin listening", "addr", addr, "auth", s.opts.Token != "")
	if s.opts.Token == "" && !isLoopback(ln.Addr()) {
		s.log.Warn("admin endpoint reachable from other hosts without admin.token: anyone who can connect can read metrics, topic names and profiles", "addr", addr)
	}
	return nil
}

// Addr is the address actually listened on ("" before Start or when
// disabled).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Shutdown stops the listener, ends event streams and the sampler, and waits
// for in-flight requests until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stopped)
	srv := s.srv
	s.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Shutdown(ctx)
		if err != nil {
			_ = srv.Close()
		}
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	return err
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// securityHeaders keeps the dashboard from being framed or loading anything
// from elsewhere.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'")
		next.ServeHTTP(w, r)
	})
}

// slogPrinter adapts slog to promhttp.Logger.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.l.Warn("metrics exposition", "err", fmt.Sprint(v...)) }
