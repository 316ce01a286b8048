package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

func TestIdleConnectionClosed(t *testing.T) {
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.IdleTimeout = 200 * time.Millisecond })
	c := ts.dial(t)
	// The idle deadline is armed after the reply is written, so after this
	// point, however late this goroutine reads the reply.
	start := time.Now()
	send(t, c, aliveReq())
	expect(t, c, aliveReply())
	expectClosed(t, c)
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("closed after %v, before the idle timeout", d)
	}
}

// A request that stops part-way is never answered: the connection closes
// once no byte arrived for ReadTimeout, even though IdleTimeout is long.
func TestTimeoutMidRequestCloses(t *testing.T) {
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.ReadTimeout = 200 * time.Millisecond })
	for _, cut := range []int{1, 10, 20, 27, 35} { // header, header, topic, trace, payload
		c := ts.dial(t)
		send(t, c, pubReq("order", record("x"))[:cut])
		expectClosed(t, c)
	}
	if !strings.Contains(ts.logs.String(), "incomplete request") {
		t.Fatal("mid-request timeout not logged")
	}
}

func TestPanicInBackendIsContained(t *testing.T) {
	be := newFakeBackend()
	be.onPublish = func(topic string) error {
		if topic == "boom" {
			panic("backend exploded")
		}
		return nil
	}
	ts := startServer(t, be, nil)
	bystander := ts.dial(t)
	send(t, bystander, createReq("ok", 0))
	expect(t, bystander, okReply())

	c := ts.dial(t)
	send(t, c, pubReq("boom", record("x")))
	expectClosed(t, c)

	send(t, bystander, pubReq("ok", record("x")))
	expect(t, bystander, okReply())
	fresh := ts.dial(t)
	send(t, fresh, aliveReq())
	expect(t, fresh, aliveReply())

	logs := ts.logs.String()
	if !strings.Contains(logs, "backend exploded") || !strings.Contains(logs, "goroutine ") {
		t.Fatalf("panic not logged with its stack:\n%s", logs)
	}
}

func TestShutdownLetsInFlightRequestFinish(t *testing.T) {
	be := newFakeBackend()
	entered := make(chan struct{})
	release := make(chan struct{})
	be.onPublish = func(topic string) error {
		if topic == "slow" {
			close(entered)
			<-release
		}
		return nil
	}
	logs := &smsstest.SyncBuffer{}
	s, err := New(Options{Backend: be, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- s.Serve() }()
	addr := s.Addr().String()
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, testDeadline)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(testDeadline))
		t.Cleanup(func() { c.Close() })
		return c
	}
	busy, idle := dial(), dial()
	send(t, idle, createReq("slow", 0))
	expect(t, idle, okReply())

	send(t, busy, pubReq("slow", record("x")))
	<-entered
	shutdownErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		shutdownErr <- s.Shutdown(ctx)
	}()
	// The idle connection is closed by Shutdown, which by then has also
	// closed the listener.
	expectClosed(t, idle)
	if c, err := net.DialTimeout("tcp", addr, testDeadline); err == nil {
		c.Close()
		t.Fatal("listener still accepting after Shutdown began")
	}
	select {
	case err := <-shutdownErr:
		t.Fatalf("Shutdown returned %v while a request was in flight", err)
	default:
	}
	close(release)
	expect(t, busy, okReply())
	expectClosed(t, busy)
	if err := <-shutdownErr; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-serveErr; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	if err := s.Serve(); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
}

func TestShutdownGivesUpAtDeadline(t *testing.T) {
	be := newFakeBackend()
	entered := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	be.onPublish = func(string) error {
		close(entered)
		<-release // outlives the Shutdown deadline
		return nil
	}
	s, err := New(Options{Backend: be, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	c, err := net.DialTimeout("tcp", s.Addr().String(), testDeadline)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testDeadline))
	send(t, c, pubReq("stuck", record("x")))
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want deadline exceeded", err)
	}
	if s.ctx.Err() == nil {
		t.Fatal("backend context not cancelled after a forced shutdown")
	}
	// The stuck connection was closed from under its handler.
	expectClosed(t, c)
}

func TestMaxConns(t *testing.T) {
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.MaxConns = 1 })
	first := ts.dial(t)
	send(t, first, aliveReq())
	expect(t, first, aliveReply())
	second := ts.dial(t)
	expectClosed(t, second)
	send(t, first, aliveReq())
	expect(t, first, aliveReply())
}

func TestOptionsValidation(t *testing.T) {
	be := newFakeBackend()
	bad := []Options{
		{},
		{Backend: be, Port: -1},
		{Backend: be, Port: 70000},
		{Backend: be, LogSample: -1},
		{Backend: be, MaxConns: -1},
		{Backend: be, ReadTimeout: -time.Second},
		{Backend: be, IdleTimeout: -time.Second},
		{Backend: be, AliveInterval: -time.Second},
		{Backend: be, DefaultAckTimeout: time.Minute, MaxAckTimeout: time.Second},
	}
	for i, o := range bad {
		if _, err := New(o); err == nil {
			t.Errorf("%d: options %+v accepted", i, o)
		}
	}
	s, err := New(Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	o := s.opts
	if o.Host != "127.0.0.1" || o.ReadTimeout != 5*time.Second || o.WriteTimeout != 5*time.Second ||
		o.IdleTimeout != 30*time.Minute || o.AliveWriteTimeout != time.Second || o.MaxConns != 10000 || o.Logger == nil {
		t.Fatalf("defaults: %+v", o)
	}
	if o.AliveInterval != 30*time.Second || o.DefaultAckTimeout != 3*time.Second || o.MaxAckTimeout != 10*time.Minute {
		t.Fatalf("stream defaults: %+v", o)
	}
	// A cap below the default ack timeout lowers the default.
	s, err = New(Options{Backend: be, MaxAckTimeout: time.Second})
	if err != nil || s.opts.DefaultAckTimeout != time.Second {
		t.Fatalf("MaxAckTimeout 1s: default ack %v, err %v", s.opts.DefaultAckTimeout, err)
	}
	if err := s.Serve(); err == nil || errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve before Listen: %v", err)
	}
	if s.Addr() != nil {
		t.Fatal("Addr before Listen")
	}
}

func TestListenOnBusyPortFails(t *testing.T) {
	ts := startServer(t, newFakeBackend(), nil)
	port := ts.Addr().(*net.TCPAddr).Port
	s, err := New(Options{Backend: newFakeBackend(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err == nil {
		s.Shutdown(context.Background())
		t.Fatal("second listener on the same port")
	}
}

func TestLogSampling(t *testing.T) {
	for _, tt := range []struct {
		sample, requests, want int
	}{{0, 10, 0}, {1, 10, 10}, {4, 10, 3}} {
		ts := startServer(t, newFakeBackend(), func(o *Options) { o.LogSample = tt.sample })
		c := ts.dial(t)
		send(t, c, createReq("s", 0))
		expect(t, c, okReply())
		for i := 1; i < tt.requests; i++ {
			send(t, c, pubReq("s", record("x")))
			expect(t, c, okReply())
		}
		if got := strings.Count(ts.logs.String(), "request served"); got != tt.want {
			t.Errorf("LogSample %d: %d of %d requests logged, want %d", tt.sample, got, tt.requests, tt.want)
		}
		logs := ts.logs.String()
		if tt.want > 0 && (!strings.Contains(logs, "cmd=pub") || !strings.Contains(logs, "topic=s") || !strings.Contains(logs, "traceId=tid") || !strings.Contains(logs, "remote=127.0.0.1:")) {
			t.Errorf("log lines lack attributes:\n%s", logs)
		}
	}
}
