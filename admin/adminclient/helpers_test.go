package adminclient

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/smssmq/smss/admin"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/metrics/metricstest"
)

const testToken = "s3cret-admin-token-for-tests"

// testEnv is a real admin server on a free loopback port over a fake master
// (metricstest.Master): the client is tested against what the server writes.
type testEnv struct {
	srv  *admin.Server
	fake *metricstest.Fake
	base string // http://host:port
}

func newEnv(t *testing.T, token string) *testEnv {
	t.Helper()
	e := &testEnv{fake: metricstest.NewFake(metricstest.Master())}
	srv, err := admin.New(admin.Options{Token: token, Metrics: metrics.NewWithOptions(metrics.Options{NoRuntime: true}),
		Source: e.fake, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SampleInterval: 40 * time.Millisecond,
		Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("admin.New: %v", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	e.srv, e.base = srv, "http://"+srv.Addr()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return e
}
