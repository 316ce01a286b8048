package bridge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// TestKafkaSessionDrain: closing a session's connection half-closes it and
// keeps it until the broker has read everything the session wrote and
// closed its side; only then is the session drained (so the next session's
// reads come after the old produce requests). A blocked read of kgo's
// returns at once on Close, and a broker that resets ends the wait.
func TestKafkaSessionDrain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reset bool // the broker resets instead of reading and closing
	}{
		{"broker reads then closes", false},
		{"broker resets", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			sess := &kafkaSession{lost: make(chan struct{})}
			ctx := context.Background()
			nc, err := sess.dial(ctx, "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			srv, err := ln.Accept() // a frozen broker: reads nothing yet
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()

			readErr := make(chan error, 1)
			go func() { // kgo's reader, waiting for a response
				_, err := nc.Read(make([]byte, 16))
				readErr <- err
			}()
			const request = "produce request"
			if _, err := nc.Write([]byte(request)); err != nil {
				t.Fatal(err)
			}
			if err := nc.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-readErr:
				if err == nil {
					t.Fatal("a read blocked at Close returned no error")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a read blocked at Close did not return")
			}
			if _, err := nc.Write([]byte("more")); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("write after Close: %v, want net.ErrClosed", err)
			}

			// The broker has not closed its side: not drained. (The broker
			// here is this test; nothing can close it meanwhile.)
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			err = sess.drained(short, slog.Default())
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("drained while the broker still held the connection: %v", err)
			}

			if tc.reset {
				srv.(*net.TCPConn).SetLinger(0)
				srv.Close()
			} else {
				// The broker continues: it reads the request, then the FIN.
				got, err := io.ReadAll(srv)
				if err != nil || string(got) != request {
					t.Fatalf("the broker read %q, %v; want %q then EOF", got, err, request)
				}
				srv.Close()
			}
			long, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := sess.drained(long, slog.Default()); err != nil {
				t.Fatalf("not drained after the broker closed: %v", err)
			}
		})
	}
}
