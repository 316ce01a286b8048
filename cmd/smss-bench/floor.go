package main

// The floor server: the least a Go server must do to serve the e2e
// workload, to tell the latency and CPU that smss adds from what Go's
// runtime and this machine cost by themselves. It speaks just enough of
// the smss protocol for smss-bench (create, pub, sub and acks), keeps
// nothing, and has no hand-offs: the publisher's connection goroutine
// writes the subscription frame to the live subscriber's socket itself,
// then replies. Not a message queue: nothing is stored, acks are read and
// ignored, and a message published while no subscriber is live is lost.
//
//	smss-bench floor --listen 127.0.0.1:7000 &
//	smss-bench e2e --addr 127.0.0.1:7000 --pid $!

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/protocol"
)

// runFloor is `smss-bench floor`: it serves until ctx ends.
func runFloor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("smss-bench floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "smss-bench floor:", err)
		return 1
	}
	fmt.Fprintln(stdout, "floor server listening on", ln.Addr())
	fl := newFloor(ln)
	context.AfterFunc(ctx, func() { fl.close() })
	fl.serve()
	return 0
}

type floorServer struct {
	ln     net.Listener
	nextID atomic.Int64

	mu    sync.Mutex
	subs  map[string]*floorSub // topic → its live subscriber
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// floorSub is a live subscriber; mu serialises the frames written to it.
type floorSub struct {
	mu sync.Mutex
	c  net.Conn
}

func newFloor(ln net.Listener) *floorServer {
	return &floorServer{ln: ln, subs: map[string]*floorSub{}, conns: map[net.Conn]struct{}{}}
}

// serve accepts until the listener closes, then waits for its connections.
func (f *floorServer) serve() {
	defer f.wg.Wait()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.conn(c)
			f.mu.Lock()
			delete(f.conns, c)
			f.mu.Unlock()
			c.Close()
		}()
	}
}

// close stops accepting and closes every connection.
func (f *floorServer) close() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
	}
}

func (f *floorServer) conn(c net.Conn) {
	rr := protocol.NewRequestReader(bufio.NewReader(c), protocol.DefaultLimits())
	var req protocol.Request
	var out []byte
	for {
		err := rr.Read(&req)
		var re *protocol.RequestError
		switch {
		case errors.As(err, &re):
			if _, werr := c.Write(protocol.AppendReplyError(out[:0], re.Error())); werr != nil || re.Close {
				return
			}
			continue
		case err != nil:
			return
		}
		out = out[:0]
		switch req.Header.Cmd {
		case protocol.CmdSub:
			f.subscribe(c, string(req.Topic))
			return
		case protocol.CmdPub:
			f.deliver(string(req.Topic), req.Payload)
			out = protocol.AppendReplyOK(out)
		case protocol.CmdCreate, protocol.CmdAlive:
			out = protocol.AppendReplyOK(out)
		default:
			out = protocol.AppendReplyError(out, "floor server: command not supported")
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// subscribe makes c the topic's live subscriber and reads (and drops) its
// acks until it goes away.
func (f *floorServer) subscribe(c net.Conn, topic string) {
	s := &floorSub{c: c}
	f.mu.Lock()
	f.subs[topic] = s
	f.mu.Unlock()
	io.Copy(io.Discard, c)
	f.mu.Lock()
	if f.subs[topic] == s {
		delete(f.subs, topic)
	}
	f.mu.Unlock()
}

// deliver writes the records of one publish to the topic's subscriber as
// frames of at most 255 messages.
func (f *floorServer) deliver(topic string, payload []byte) {
	f.mu.Lock()
	s := f.subs[topic]
	f.mu.Unlock()
	if s == nil {
		return
	}
	ts := time.Now().UnixMilli()
	var frame, body []byte
	for len(payload) > 0 {
		body = body[:0]
		n := 0
		for ; n < 255 && len(payload) > 0; n++ {
			var rec []byte
			rec, payload = protocol.NextRecord(payload)
			body = protocol.AppendSubMessage(body, ts, f.nextID.Add(1), 0, 0, rec)
		}
		frame = protocol.AppendSubFrameHeader(frame[:0], uint8(n), uint32(len(body)))
		frame = append(frame, body...)
		s.mu.Lock()
		_, err := s.c.Write(frame)
		s.mu.Unlock()
		if err != nil {
			s.c.Close()
			return
		}
	}
}
