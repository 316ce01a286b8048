package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/client/internal/testserver"
	"github.com/smssmq/smss/protocol"
)

func TestReplicaStreamFake(t *testing.T) {
	create := binlog.AppendBlock(nil, &binlog.Block{WriteTime: 10, Cmd: binlog.CmdCreate, EventID: 1, Timestamp: 9,
		Topic: []byte("order"), Payload: make([]byte, 8)})
	rec, _ := protocol.AppendRecord(nil, protocol.Record{Body: []byte("hello")})
	pub := binlog.AppendBlock(nil, &binlog.Block{WriteTime: 11, Cmd: binlog.CmdPub, EventID: 2, Timestamp: 11,
		Topic: []byte("order"), Payload: append(rec, rec...)})
	from := make(chan int64, 1)
	f := startFake(t, func(c net.Conn, r *bufio.Reader) {
		req, err := readReq(r)
		if err != nil {
			return
		}
		from <- req.EventID
		out, _ := protocol.AppendReplicaFrame(nil, create)
		out = protocol.AppendReplyAlive(out)
		out, _ = protocol.AppendReplicaFrame(out, pub)
		out, _ = protocol.AppendReplicaFrame(out, []byte{1, 2, 3}) // not a block
		c.Write(out)
		r.ReadByte()
	})
	c := dialT(t, f.addr(), Options{})
	ctx := ctxT(t, 10*time.Second)
	rs, err := c.OpenReplica(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if got := <-from; got != 7 {
		t.Errorf("replica request from %d", got)
	}
	b, err := rs.Next(ctx)
	if err != nil || b.Cmd != binlog.CmdCreate || b.EventID != 1 || string(b.Topic) != "order" || !bytes.Equal(b.Raw, create) {
		t.Fatalf("first block %+v %v", b, err)
	}
	b, err = rs.Next(ctx)
	if err != nil || b.Cmd != binlog.CmdPub || b.EventID != 2 {
		t.Fatalf("second block %+v %v", b, err)
	}
	if last, _ := b.LastEventID(); last != 3 {
		t.Errorf("pub of 2 records ends at %d", last)
	}
	if _, err := rs.Next(ctx); !errors.Is(err, ErrProtocol) {
		t.Fatalf("garbage block: %v", err)
	}
	if _, err := rs.Next(ctx); !errors.Is(err, ErrProtocol) {
		t.Fatalf("stream must stay failed: %v", err)
	}
}

func TestReplicaStreamCancel(t *testing.T) {
	f := startFake(t, func(c net.Conn, r *bufio.Reader) {
		readReq(r)
		r.ReadByte()
	})
	c := dialT(t, f.addr(), Options{})
	rs, err := c.OpenReplica(ctxT(t, 5*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	if _, err := rs.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v", err)
	}
}

func TestReplicaStreamServer(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	c := dialT(t, srv.Addr, Options{})
	ctx := ctxT(t, 30*time.Second)
	if err := c.CreateTopic(ctx, "order"); err != nil {
		t.Fatal(err)
	}
	if err := c.PublishBatch(ctx, "order", []*Message{NewMessage([]byte("a")), NewMessage([]byte("b"))}); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, "order", NewMessage([]byte("c"))); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteTopic(ctx, "order"); err != nil {
		t.Fatal(err)
	}
	rs, err := c.OpenReplica(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	want := []struct {
		cmd uint8
		id  int64
	}{{binlog.CmdCreate, 1}, {binlog.CmdPub, 2}, {binlog.CmdPub, 4}, {binlog.CmdDelete, 5}}
	for i, w := range want {
		b, err := rs.Next(ctx)
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if b.Cmd != w.cmd || b.EventID != w.id || string(b.Topic) != "order" {
			t.Errorf("block %d: cmd %d id %d topic %q, want cmd %d id %d", i, b.Cmd, b.EventID, b.Topic, w.cmd, w.id)
		}
	}
	// Resuming after the 2-message block (its last id is 3).
	rs2, err := c.OpenReplica(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer rs2.Close()
	if b, err := rs2.Next(ctx); err != nil || b.EventID != 4 {
		t.Fatalf("resume after 3: %+v %v", b.Block, err)
	}
	if _, err := rs2.Next(ctx); err != nil {
		t.Fatalf("next after resume: %v", err)
	}
	// Keep-alives (every 200ms) are skipped while waiting for more: only
	// the caller's deadline ends the wait. The short deadline starts once
	// the stream is caught up, so a slow delivery above cannot use it up.
	short, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	if _, err := rs2.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle stream: %v, want the caller's deadline (alives skipped)", err)
	}
	bad, err := c.OpenReplica(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Next(ctx); !errors.Is(err, ErrEventIDUnavailable) {
		t.Errorf("replica from beyond the end: %v", err)
	}
}
