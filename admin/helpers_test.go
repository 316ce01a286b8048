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
	"github.com/smssmq/smss/protocol"
)

const testToken = "s3cret-admin-token-for-tests"

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fixture is a fake master with two live topics, an expired and a deleted
// one, two subscribers, one slave and three delayed messages.
func fixture() metricstest.State {
	now := time.Now().UnixMilli()
	d := metrics.NewDelayStats()
	d.Add(now, now+1000)
	d.Add(now, now+5*60_000)
	d.Add(now, now+30*24*3600_000)
	return metricstest.State{
		Topics: []protocol.TopicInfo{
			{Name: "audit", CreateTime: now - 5000, CreateEventID: 2, TopicRoot: "3/7/audit"},
			{Name: "orders", CreateTime: now - 9000, CreateEventID: 1, TopicRoot: "1/2/orders"},
			{Name: "tmp", CreateTime: now - 1000, ExpireAt: now - 10, CreateEventID: 3},
			{Name: "old", State: protocol.TopicStateDeleted, StateChangeTime: now - 100},
		},
		Stats: map[string]metrics.TopicStats{
			"orders": {Bytes: 10 << 20, Files: 2, Messages: 5000, FirstEventID: 10, LastEventID: 6000},
			"audit":  {Bytes: 4096, Files: 1, Messages: 3, FirstEventID: 20, LastEventID: 22},
			"tmp":    {Bytes: 0, Files: 0, Messages: 0},
		},
		Subscribers: []metrics.SubscriberInfo{
			{Topic: "orders", Who: "billing", RemoteAddr: "10.0.0.9:5000", Position: 5990, Delivered: 5995, Lag: 10},
			{Topic: "orders", Who: "shipping", RemoteAddr: "10.0.0.8:5000", Position: 5000, Delivered: 5100, Lag: 1000},
			{Topic: "audit", Who: "archiver", RemoteAddr: "10.0.0.7:5000", Position: 22},
		},
		Replication: metrics.ReplicationInfo{Role: metrics.RoleMaster, LastEventID: 6000,
			Slaves: []metrics.SlaveInfo{{RemoteAddr: "10.0.0.2:41000", Since: now - 60_000, Position: 5900, LagEvents: 100}}},
		Delays: d,
		Info: metrics.ServerInfo{Version: "1.0.0", Role: metrics.RoleMaster, ListenAddr: "127.0.0.1:12301", DataDir: "data",
			StartTime: now - 3_600_000, LastEventID: 6000, BinlogBytes: 1 << 30, BinlogFiles: 1,
			Config: map[string]any{"store.flushLevel": 1, "admin.token": "<redacted>"}},
	}
}

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
