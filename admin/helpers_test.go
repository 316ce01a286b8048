package admin

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/metrics/metricstest"
)

const testToken = "s3cret-admin-token-for-tests"

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fixture is metricstest.Master, shared with adminclient's tests.
func fixture() metricstest.State { return metricstest.Master() }

type testEnv struct {
	srv  *Server
	m    *metrics.Metrics
	fake *metricstest.Fake
	base string // http://host:port when started
}

// newEnv builds a Server over the fixture; with start it listens on a free
// loopback port and is shut down at cleanup.
func newEnv(t *testing.T, token string, start bool, tweak func(*Options)) *testEnv {
	t.Helper()
	e := &testEnv{m: metrics.NewWithOptions(metrics.Options{NoRuntime: true}), fake: metricstest.NewFake(fixture())}
	opts := Options{Token: token, Metrics: e.m, Source: e.fake, Logger: quietLogger(), SampleInterval: 40 * time.Millisecond}
	if start {
		opts.Listen = "127.0.0.1:0"
	}
	if tweak != nil {
		tweak(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = srv
	if start {
		if err := srv.Start(); err != nil {
			t.Fatalf("Start: %v", err)
		}
		e.base = "http://" + srv.Addr()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return e
}

// do runs one request through the handler (no listener needed).
func (e *testEnv) do(method, path, auth string, body io.Reader, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, body)
	// As a browser on this machine sends it (see loopbackHostOnly); a
	// "Host" in hdr replaces it.
	req.Host = "127.0.0.1:12380"
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(w, req)
	return w
}

// login signs in with testToken and returns the session cookie's value.
func (e *testEnv) login(t *testing.T) string {
	t.Helper()
	w := e.do(http.MethodPost, "/api/login", "", strings.NewReader(`{"token":"`+testToken+`"}`), "Content-Type", "application/json")
	for _, c := range w.Result().Cookies() {
		if c.Name == SessionCookie && w.Code == http.StatusNoContent {
			return c.Value
		}
	}
	t.Fatalf("login: %d %v", w.Code, w.Result().Cookies())
	return ""
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name, data string
}

// readEvents reads n events from an event stream, failing the test after
// the deadline.
func readEvents(t *testing.T, body io.Reader, n int, deadline time.Duration) []sseEvent {
	t.Helper()
	out := make(chan []sseEvent, 1)
	errc := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var evs []sseEvent
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.name != "" || cur.data != "" {
					evs = append(evs, cur)
					cur = sseEvent{}
					if len(evs) == n {
						out <- evs
						return
					}
				}
			case strings.HasPrefix(line, "event: "):
				cur.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				cur.data += strings.TrimPrefix(line, "data: ")
			}
		}
		errc <- sc.Err()
	}()
	select {
	case evs := <-out:
		return evs
	case err := <-errc:
		t.Fatalf("event stream ended early: %v", err)
	case <-time.After(deadline):
		t.Fatalf("no %d events within %v", n, deadline)
	}
	return nil
}

func get(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp
}
