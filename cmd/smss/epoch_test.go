package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/protocol"
)

// fakeMaster answers every status request with reply (built per request);
// a nil reply says nothing until the client hangs up.
func fakeMaster(t *testing.T, reply func() []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := protocol.ReadRequest(bufio.NewReader(c), protocol.Limits{})
				if err != nil || req.Header.Cmd != protocol.CmdStatus {
					return
				}
				if r := reply(); r != nil {
					c.Write(r)
					return
				}
				io.Copy(io.Discard, c) // silent until the client hangs up
			}()
		}
	}()
	return ln.Addr().String()
}

func TestEpochProbe(t *testing.T) {
	dial := client.DialFunc((&net.Dialer{}).DialContext)
	for _, tc := range []struct {
		name  string
		reply func() []byte
		want  uint64 // the slave's epoch afterwards (it starts at 2)
		known int64
	}{
		{"higher epoch learned", func() []byte {
			b, _ := protocol.AppendReplyJSON(nil, []byte(`{"role":"master","epoch":7,"lastEventId":3}`))
			return b
		}, 7, 7},
		{"lower epoch ignored", func() []byte {
			b, _ := protocol.AppendReplyJSON(nil, []byte(`{"role":"master","epoch":1,"lastEventId":3}`))
			return b
		}, 2, 1},
		{"original master", func() []byte { return protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg) }, 2, -1},
		{"garbage", func() []byte {
			b, _ := protocol.AppendReplyJSON(nil, []byte(`{"role":"boss"}`))
			return b
		}, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := slog.New(slog.DiscardHandler)
			b, err := broker.Open(broker.Options{Dir: t.TempDir(), Logger: log, Slave: true})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, err := b.LearnEpoch(context.Background(), 2); err != nil {
				t.Fatal(err)
			}
			p := &epochProbe{ctx: context.Background(), dial: dial, addr: fakeMaster(t, tc.reply), b: b, timeout: 5 * time.Second, log: log}
			p.probe()
			p.wait()
			if b.Epoch() != tc.want || p.known.Load() != tc.known {
				t.Fatalf("epoch %d, known %d; want %d, %d", b.Epoch(), p.known.Load(), tc.want, tc.known)
			}
		})
	}
	// queryStatus tells an original master apart from a failure.
	addr := fakeMaster(t, func() []byte { return protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg) })
	if _, err := queryStatus(context.Background(), dial, addr); !errors.Is(err, client.ErrNotSupported) {
		t.Fatalf("original master: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	silent := fakeMaster(t, func() []byte { return nil })
	if _, err := queryStatus(ctx, dial, silent); err == nil || errors.Is(err, client.ErrNotSupported) {
		t.Fatalf("silent master: %v", err)
	}
}
