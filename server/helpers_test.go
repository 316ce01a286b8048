package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

const testDeadline = 10 * time.Second

// epollMode runs every test server with Options.Epoll (SMSS_SERVER_EPOLL=1;
// TestSuiteWithEpoll sets it for a re-run of this package's tests).
var epollMode = os.Getenv("SMSS_SERVER_EPOLL") == "1"

type testServer struct {
	*Server
	backend  *fakeBackend
	logs     *smsstest.SyncBuffer
	serveErr chan error
}

// startServer runs a server on a free loopback port; cleanup shuts it down
// and checks Serve's result.
func startServer(t *testing.T, be *fakeBackend, tweak func(*Options)) *testServer {
	t.Helper()
	logs := &smsstest.SyncBuffer{}
	opts := Options{
		Backend:   be,
		Logger:    slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		LogSample: 1,
		Epoll:     epollMode,
	}
	if tweak != nil {
		tweak(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, backend: be, logs: logs, serveErr: make(chan error, 1)}
	go func() { ts.serveErr <- s.Serve() }()
	if opts.Epoll && opts.Security.Auth == nil && !opts.Sync.Enabled() {
		waitServing(t, s)
		if s.ep == nil {
			t.Fatal("Options.Epoll but the epoll loop did not start")
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-ts.serveErr; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return ts
}

func (ts *testServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", ts.Addr().String(), testDeadline)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetDeadline(time.Now().Add(testDeadline)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// expect reads exactly len(want) bytes and compares them.
func expect(t *testing.T, c net.Conn, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if n, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading %d-byte reply: got %d bytes (% x): %v", len(want), n, got[:n], err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("reply\n got % x (%q)\nwant % x (%q)", got, got, want, want)
	}
}

// expectClosed checks that the server closes the connection without sending
// anything more.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	var b [64]byte
	n, err := c.Read(b[:])
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("want the connection closed, got %d bytes (% x), err %v", n, b[:n], err)
	}
}

func enc(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func okReply() []byte            { return protocol.AppendReplyOK(nil) }
func aliveReply() []byte         { return protocol.AppendReplyAlive(nil) }
func errReply(msg string) []byte { return protocol.AppendReplyError(nil, msg) }
func jsonReply(body string) []byte {
	return enc(protocol.AppendReplyJSON(nil, []byte(body)))
}

func record(body string) []byte {
	return enc(protocol.AppendRecord(nil, protocol.Record{Headers: []protocol.KV{{Key: "traceId", Value: "x1"}}, Body: []byte(body)}))
}

func pubReq(topic string, records ...[]byte) []byte {
	return enc(protocol.AppendPub(nil, []byte(topic), []byte("tid"), bytes.Join(records, nil)))
}

func createReq(topic string, expireAt int64) []byte {
	return enc(protocol.AppendCreate(nil, []byte(topic), nil, expireAt))
}

func aliveReq() []byte { return enc(protocol.AppendAlive(nil, []byte("ping"))) }

func topicJSON(name string, id, expireAt int64) string {
	return `{"name":"` + name + `","createTimeStamp":1795950274737,"expireAt":` + strconv.FormatInt(expireAt, 10) +
		`,"createEventId":` + strconv.FormatInt(id, 10) + `,"stateChangeTime":1795950274737,"stateChangeEventId":` +
		strconv.FormatInt(id, 10) + `,"state":0,"topicRoot":"/3/3/` + name + `"}`
}

// waitServing waits until Serve has started (and with it the epoll loop).
func waitServing(t *testing.T, s *Server) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for {
		s.mu.Lock()
		serving := s.serving
		s.mu.Unlock()
		if serving {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("Serve did not start")
		}
		time.Sleep(time.Millisecond)
	}
}
