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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/smssmq/smss/admin/adminapi"
	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/metrics"
)

// DefaultListen is the address the sample config suggests for admin.listen.
// The listener itself is off unless configured (Options.Listen "").
const DefaultListen = adminapi.DefaultListen

// Defaults of Options.
const (
	DefaultSampleInterval = time.Second
	DefaultHistory        = 300
	DefaultMaxStreams     = 64
	// Hardening defaults (admin.maxConns, admin.requestTimeoutMs,
	// admin.maxBodyBytes, admin.sessionTtlMs).
	DefaultMaxConns       = 64
	DefaultRequestTimeout = 30 * time.Second
	DefaultMaxBodyBytes   = 64 << 10
	DefaultSessionTTL     = 12 * time.Hour
	// DefaultWriteTimeout bounds writing a response (event streams and
	// profiles set their own deadlines).
	DefaultWriteTimeout = 60 * time.Second
	// maxHeaderBytes bounds a request's header.
	maxHeaderBytes = 64 << 10
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

	// MaxConns caps open connections; further ones are closed at accept,
	// so a flood of this port cannot take the process's file descriptors
	// (DefaultMaxConns).
	MaxConns int
	// RequestTimeout bounds reading a request's header and body: no
	// request holds a connection longer before its response starts
	// (DefaultRequestTimeout; the header alone gets at most 10 s).
	RequestTimeout time.Duration
	// MaxBodyBytes bounds a request body (DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// SessionTTL is how long a dashboard sign-in lasts (DefaultSessionTTL).
	SessionTTL time.Duration
	// Throttle limits wrong tokens per remote address (Check, Failure and
	// Success by auth.Key); nil means auth.NewLimiter's defaults.
	Throttle *auth.Limiter
	// ClientAuth reports that the message port requires logins: Start then
	// warns when Token is empty, since the endpoint shows every topic name
	// the filtered list hides.
	ClientAuth bool
}

// Server is the admin HTTP server.
type Server struct {
	opts     Options
	log      *slog.Logger
	m        *metrics.Metrics
	src      metrics.Source
	sessions *sessions // dashboard sign-ins (auth.go)
	handler  http.Handler
	sampler  *sampler
	started  time.Time

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
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.Throttle == nil {
		opts.Throttle = auth.NewLimiter(auth.LimiterOptions{})
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
	s.sessions = newSessions(opts.SessionTTL)
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
	// Public like /healthz: probes (a load balancer, a kubelet) carry no
	// token. It answers the state's kind only; the details (error texts,
	// the master's address) stay behind the token in /api/info.
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("POST /api/login", s.login)
	mux.HandleFunc("POST /api/logout", s.logout)
	mux.Handle("GET /{$}", staticFile(web, "index.html"))
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles(web)))

	protected := http.NewServeMux()
	protected.Handle("GET /metrics", promhttp.HandlerFor(s.m.Registry(), promhttp.HandlerOpts{
		ErrorLog:      slogPrinter{s.log},
		ErrorHandling: promhttp.ContinueOnError,
	}))
	protected.HandleFunc("GET /api/info", s.apiInfo)
	protected.HandleFunc("GET /api/topics", s.apiTopics)
	protected.HandleFunc("GET /api/subscribers", s.apiSubscribers)
	protected.HandleFunc("GET /api/replication", s.apiReplication)
	protected.HandleFunc("GET /api/cluster", s.apiCluster)
	protected.HandleFunc("GET /api/cursors", s.apiCursors)
	protected.HandleFunc("GET /api/queues", s.apiQueues)
	protected.HandleFunc("GET /api/delays", s.apiDelays)
	protected.HandleFunc("GET /api/snapshot", s.apiSnapshot)
	protected.HandleFunc("GET /api/events", s.apiEvents)
	protected.HandleFunc("/debug/pprof/", pprof.Index)
	protected.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	protected.HandleFunc("/debug/pprof/profile", pprof.Profile)
	protected.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	protected.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", s.requireAuth(protected))
	return securityHeaders(s.loopbackHostOnly(s.deadlines(http.MaxBytesHandler(mux, s.opts.MaxBodyBytes))))
}

// longRunning reports requests that set their own deadlines: event streams
// and profiles, which last longer than a response write may. They carry no
// body.
func longRunning(r *http.Request) bool {
	switch r.URL.Path {
	case "/api/events", "/debug/pprof/profile", "/debug/pprof/trace":
		return true
	}
	return false
}

// deadlines gives a request whose header and body have been read the
// write deadline of a response. The read deadline of the server's
// RequestTimeout still runs; long-running requests lift it (an expired
// read deadline would cancel them) once their request is read: they have
// no body to read.
func (s *Server) deadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		// Only without a body: one trickling in would otherwise be read (or
		// drained after the response) with no deadline at all.
		if longRunning(r) && r.ContentLength == 0 {
			_ = rc.SetReadDeadline(time.Time{})
			// Profiles run for ?seconds= (30 by default) before they write.
			secs, _ := strconv.Atoi(r.URL.Query().Get("seconds"))
			secs = min(max(secs, 30), 3600)
			_ = rc.SetWriteDeadline(time.Now().Add(time.Duration(secs)*time.Second + DefaultWriteTimeout))
		} else {
			_ = rc.SetWriteDeadline(time.Now().Add(DefaultWriteTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHostOnly refuses, when no token protects the endpoint, requests
// whose Host is not a loopback name: a web page on another site could
// otherwise read the endpoint through DNS rebinding (its own name resolving
// to 127.0.0.1). /healthz and /readyz, which tell nothing a probe from
// another host should not know, stay open.
func (s *Server) loopbackHostOnly(next http.Handler) http.Handler {
	if s.opts.Token != "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && !loopbackHost(r.Host) {
			writeError(w, http.StatusMisdirectedRequest,
				"this admin endpoint has no admin.token: it answers only requests for localhost, 127.0.0.1 or [::1]")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether host (a Host header: name or address,
// optional port) names the local machine.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
	inner, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("admin: listen on %s: %w", s.opts.Listen, err)
	}
	ln := newCapListener(inner, s.opts.MaxConns, s.log)
	s.ln = ln
	s.srv = &http.Server{
		Handler: s.handler,
		// Every request's header and body are read within RequestTimeout
		// (a body trickling in cannot hold the connection); event streams
		// and profiles lift the read deadline once they start (deadlines),
		// as an expired one would cancel them. Writes: see deadlines.
		ReadHeaderTimeout: min(10*time.Second, s.opts.RequestTimeout),
		ReadTimeout:       s.opts.RequestTimeout,
		IdleTimeout:       max(2*s.opts.RequestTimeout, 10*time.Second),
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
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
	if s.opts.Token == "" && s.opts.ClientAuth {
		s.log.Warn("auth.enabled is true but admin.token is empty: the admin endpoint shows every topic name, subscriber and profile to anyone who can reach it; set admin.token", "addr", addr)
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
