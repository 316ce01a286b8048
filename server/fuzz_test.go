package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// fzBackend adapts the real broker to Backend, as cmd/smss does.
type fzBackend struct{ *broker.Broker }

func (b fzBackend) Subscribe(topic, who []byte, after int64) (Subscription, error) {
	s, err := b.Broker.Subscribe(topic, who, after)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// fzServer is one in-process server over a real broker, shared by the
// inputs a fuzzing process runs.
type fzServer struct {
	addr string
	dir  string
	s    *Server
	b    *broker.Broker
	logs *smsstest.SyncBuffer
}

var fzWho atomic.Int64

const fzTopic = "fz"

func fzStart() (*fzServer, error) {
	dir, err := os.MkdirTemp("", "smss-fuzz-sub-")
	if err != nil {
		return nil, err
	}
	logs := &smsstest.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := broker.Open(broker.Options{Dir: dir, MaxLogSize: 4096, Logger: logger})
	if err != nil {
		return nil, err
	}
	s, err := New(Options{Backend: fzBackend{b}, Logger: logger, ReadTimeout: 200 * time.Millisecond,
		AliveInterval: 20 * time.Millisecond, DefaultAckTimeout: 100 * time.Millisecond, MaxAckTimeout: 200 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	if err := s.Listen(); err != nil {
		return nil, err
	}
	go s.Serve()
	return &fzServer{addr: s.Addr().String(), dir: dir, s: s, b: b, logs: logs}, nil
}

func (f *fzServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.s.Shutdown(ctx)
	f.b.Close()
	os.RemoveAll(f.dir)
}

// ensureTopic recreates the topic when an input deleted it (a fuzzed
// stream can reach the command loop and send any request).
func (f *fzServer) ensureTopic(t *testing.T) {
	if _, err := f.b.Topic([]byte(fzTopic)); err == nil {
		return
	}
	ctx := context.Background()
	if _, err := f.b.CreateTopic(ctx, []byte(fzTopic), 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := f.b.Publish(ctx, []byte(fzTopic), record(fmt.Sprintf("message %d %s", i, strings.Repeat("x", i*7))), 1); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzSubAcks plays arbitrary bytes as the client side of a subscription
// against the real server and broker: a valid subscribe request (batch
// and start from the first input bytes), then the rest of the input as
// what the client sends while frames arrive (acks, garbage, requests
// after an ack 1), then the client hangs up. The server must never panic,
// must close or finish the connection once the client is gone, must free
// the subscriber's who slot, and must keep serving other clients.
func FuzzSubAcks(f *testing.F) {
	ack := func(codes ...uint16) []byte {
		var b []byte
		for _, c := range codes {
			b = binary.LittleEndian.AppendUint16(b, c)
		}
		return b
	}
	list := enc(protocol.AppendList(nil, nil))
	f.Add(byte(1), byte(0), ack(0, 0, 0, 1))
	f.Add(byte(5), byte(0), ack(0, 0, 0, 0, 0, 0, 0, 0, 0))
	f.Add(byte(255), byte(0), ack(0))
	f.Add(byte(3), byte(7), ack(1))
	f.Add(byte(2), byte(0), append(ack(1), list...))
	f.Add(byte(2), byte(0), append(ack(0, 1), enc(protocol.AppendSub(nil, []byte(fzTopic), nil, 0, 1, time.Second, []byte("again")))...))
	f.Add(byte(1), byte(0), ack(2))
	f.Add(byte(1), byte(0), ack(0xffff))
	f.Add(byte(1), byte(0), []byte{0})
	f.Add(byte(1), byte(0), []byte{})
	f.Add(byte(10), byte(39), ack(0, 0, 0))
	f.Add(byte(10), byte(200), ack(0))
	f.Add(byte(1), byte(0), append(ack(0), list...))
	srv, err := fzStart()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.close)
	f.Fuzz(func(t *testing.T, batch, start byte, client []byte) {
		srv.ensureTopic(t)
		who := fmt.Sprintf("fuzz-%d", fzWho.Add(1))
		c, err := net.DialTimeout("tcp", srv.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		req := enc(protocol.AppendSub(nil, []byte(fzTopic), nil, int64(start), batch, 100*time.Millisecond, []byte(who)))
		// Read everything the server sends while writing, so neither side
		// blocks the other; the server must end the connection by itself
		// once the client has hung up.
		drained := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, c)
			drained <- err
		}()
		if _, err := c.Write(append(req, client...)); err != nil {
			t.Fatalf("write: %v", err)
		}
		c.(*net.TCPConn).CloseWrite()
		select {
		case err := <-drained:
			if err != nil {
				t.Fatalf("the server neither finished nor closed the connection: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the server kept a hung-up client's connection open")
		}
		if logs := srv.logs.String(); strings.Contains(logs, "panic") {
			t.Fatalf("the server panicked:\n%s", logs)
		}
		// The who slot is free and the server still serves: a new
		// subscription under the same who gets data.
		fzResubscribe(t, srv.addr, who)
	})
}

func fzResubscribe(t *testing.T, addr, who string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(enc(protocol.AppendSub(nil, []byte(fzTopic), nil, 0, 1, time.Second, []byte(who)))); err != nil {
			t.Fatal(err)
		}
		fr, err := protocol.ReadSubFrame(c, 1<<20)
		c.Close()
		switch {
		case err == nil && fr.Code == protocol.StatusOK:
			return
		case err != nil && strings.Contains(err.Error(), "regiester exist") && time.Now().Before(deadline):
			// The server has not noticed the hang-up yet.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		t.Fatalf("subscribing again as %s: frame %d, %v", who, fr.Code, err)
	}
}
