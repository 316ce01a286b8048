package main

// The floor server: the least a Go server must do to serve the e2e
// workload, to tell the latency and CPU that smss adds from what Go's
// runtime and this machine cost by themselves. It speaks just enough of
// the smss protocol for smss-bench (create, pub, sub and acks), keeps
// nothing, and has no hand-offs: the publisher's connection goroutine
// writes the subscription frame to the live subscriber's socket itself,
// then replies. Not a message queue: nothing is stored, acks are read and
// ignored, and a message published while no subscriber is live is lost
// (but for a topic's first subscriber: subscriberOf).
//
// With --writer, a publish first takes smss's shape, without its logic: the
// connection's goroutine hands the payload to one writer goroutine, which
// gathers what is queued into a group, writes the group twice to a temp
// file (binlog and topic file) and hands every publish back; then the
// connection's goroutine delivers and replies. The difference between the
// two modes is what the single writer costs in Go by itself.
//
// --leader writes the same groups without a writer goroutine: the
// connection goroutines take turns as the writer (floor_leader.go). --epoll
// (Linux) serves every connection from one locked thread running an epoll
// loop, Redis's shape (floor_epoll_linux.go).
//
//	smss-bench floor --listen 127.0.0.1:7000 [--writer|--leader|--epoll] &
//	smss-bench e2e --addr 127.0.0.1:7000 --pid $!

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
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
	withWriter := fs.Bool("writer", false, "hand publishes to one writer goroutine that writes them to a temp file twice")
	withLeader := fs.Bool("leader", false, "write publishes to a temp file twice in groups, the connection goroutines taking turns as the writer (leader/follower)")
	withEpoll := fs.Bool("epoll", false, "serve every connection from one thread running an epoll loop that writes each turn's publishes to a temp file twice (Linux)")
	replica := fs.Bool("replica", false, "be a floor replica: write the groups a floor master sends twice to a temp file and confirm them (floor_replica.go)")
	replicateTo := fs.String("replicate-to", "", "with --writer: send every group to the floor replica at this address")
	syncAck := fs.Bool("sync", false, "with --replicate-to: answer a publish once the replica confirmed its group (semi-synchronous)")
	fsync := fs.Bool("fsync", false, "with --writer or --replica: fsync the temp file after each group")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if n := btoi(*withWriter) + btoi(*withLeader) + btoi(*withEpoll) + btoi(*replica); n > 1 {
		fmt.Fprintln(stderr, "smss-bench floor: --writer, --leader, --epoll and --replica exclude each other")
		return 2
	}
	if (*replicateTo != "" || *syncAck || *fsync) && !*withWriter && !*replica || *syncAck && *replicateTo == "" {
		fmt.Fprintln(stderr, "smss-bench floor: --replicate-to and --fsync go with --writer (--fsync also with --replica), --sync with --replicate-to")
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "smss-bench floor:", err)
		return 1
	}
	if *replica {
		return floorReplicaMain(ctx, ln, *fsync, stdout, stderr)
	}
	fl := newFloor(ln)
	if *replicateTo != "" {
		st, err := dialFloorStream(*replicateTo, *syncAck)
		if err != nil {
			ln.Close()
			fmt.Fprintln(stderr, "smss-bench floor:", err)
			return 1
		}
		fl.stream = st
	}
	if *withWriter || *withLeader || *withEpoll {
		f, err := os.CreateTemp("", "smss-bench-floor-*")
		if err != nil {
			ln.Close()
			fmt.Fprintln(stderr, "smss-bench floor:", err)
			return 1
		}
		defer os.Remove(f.Name())
		defer f.Close()
		if *fsync {
			fl.fsync = f.Sync
		}
		switch {
		case *withWriter:
			fl.startWriter(f)
		case *withLeader:
			fl.leader = &floorLeader{w: f, groups: &fl.groups}
		case *withEpoll:
			if err := fl.startEpoll(f); err != nil {
				ln.Close()
				fmt.Fprintln(stderr, "smss-bench floor:", err)
				return 1
			}
		}
	}
	fmt.Fprintln(stdout, "floor server listening on", ln.Addr())
	context.AfterFunc(ctx, func() { fl.close() })
	fl.serve()
	return 0
}

type floorServer struct {
	ln     net.Listener
	nextID atomic.Int64
	// submit reaches the writer goroutine (--writer); nil without it.
	submit  chan floorPub
	stopped chan struct{} // closed when the writer has returned
	// leader takes turns writing (--leader); nil without it.
	leader *floorLeader
	// ep runs the epoll loop (--epoll); nil without it.
	ep *floorEpoll
	// groups counts the group writes of every mode that has a writer.
	groups atomic.Int64
	// stream sends the writer's groups to a floor replica (--replicate-to);
	// nil without it.
	stream *floorStream
	// fsync syncs the writer's file after each group (--fsync); nil
	// without it.
	fsync func() error

	mu    sync.Mutex
	subs  map[string]*floorSub // topic → its live subscriber
	held  map[string][]heldPub // topic → publishes while it had none (subscriberOf)
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// heldPub is a publish kept for a topic's first subscriber.
type heldPub struct {
	at      time.Time
	payload []byte
}

// A workload opens its subscription before it publishes, but the server
// may read a publish before the subscription (another connection, another
// goroutine): such publishes are held for the first subscriber, at most
// maxHeld of them and for heldFor, so that they are not lost (the run
// would wait for them) and a later run on the topic is not handed them.
const (
	maxHeld = 1 << 16
	heldFor = 5 * time.Second
)

// subscriberOf is topic's live subscriber; with none, it holds a copy of
// payload for the first one.
func (f *floorServer) subscriberOf(topic string, payload []byte) *floorSub {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.subs[topic]; s != nil {
		return s
	}
	if h := f.held[topic]; len(h) < maxHeld {
		f.held[topic] = append(h, heldPub{at: time.Now(), payload: append([]byte(nil), payload...)})
	}
	return nil
}

// register makes s topic's live subscriber and hands it what was held
// for it (publishes younger than heldFor).
func (f *floorServer) register(topic string, s *floorSub) {
	f.mu.Lock()
	f.subs[topic] = s
	held := f.held[topic]
	delete(f.held, topic)
	f.mu.Unlock()
	for _, h := range held {
		if time.Since(h.at) < heldFor {
			f.deliverTo(s, h.payload)
		}
	}
}

// floorSub is a live subscriber; mu serialises the frames written to it.
type floorSub struct {
	mu sync.Mutex
	c  io.WriteCloser
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func newFloor(ln net.Listener) *floorServer {
	return &floorServer{ln: ln, subs: map[string]*floorSub{}, held: map[string][]heldPub{}, conns: map[net.Conn]struct{}{}}
}

// serve accepts until the listener closes, then waits for its connections.
func (f *floorServer) serve() {
	defer func() {
		if f.ep != nil {
			f.ep.stop()
		}
		f.wg.Wait()
		if f.submit != nil {
			close(f.submit)
			<-f.stopped
		}
		if f.stream != nil {
			f.stream.close()
		}
	}()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if f.ep != nil {
			f.ep.add(c)
			continue
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

// floorPub is one publish handed to the writer; done is signalled once the
// group holding it is written.
type floorPub struct {
	payload []byte
	done    chan error
}

// startWriter starts the writer goroutine of --writer on file w. It ends
// when serve has returned (no publisher is left) and closes stopped.
func (f *floorServer) startWriter(w io.Writer) {
	f.submit = make(chan floorPub, 1024)
	f.stopped = make(chan struct{})
	go func() {
		defer close(f.stopped)
		var group []floorPub
		var buf []byte
		for p := range f.submit {
			group, buf = append(group[:0], p), append(buf[:0], p.payload...)
		gather:
			for {
				select {
				case p, ok := <-f.submit:
					if !ok {
						break gather
					}
					group, buf = append(group, p), append(buf, p.payload...)
				default:
					break gather
				}
			}
			seq := f.groups.Add(1)
			_, err := w.Write(buf) // the binlog's copy
			if err == nil {
				_, err = w.Write(buf) // the topic file's
			}
			if err == nil && f.stream != nil {
				// Sent before the fsync, so the replica's write and fsync
				// overlap the master's.
				err = f.stream.send(seq, buf)
			}
			if err == nil && f.fsync != nil {
				err = f.fsync()
			}
			if err == nil && f.stream != nil && f.stream.sync {
				f.stream.await(seq, append([]floorPub(nil), group...))
				continue
			}
			for _, p := range group {
				p.done <- err
			}
		}
	}()
}

// write hands payload to the writer and waits for its group (--writer).
func (f *floorServer) write(payload []byte, done chan error) error {
	f.submit <- floorPub{payload: payload, done: done}
	return <-done
}

func (f *floorServer) conn(c net.Conn) {
	rr := protocol.NewRequestReader(bufio.NewReader(c), protocol.DefaultLimits())
	var req protocol.Request
	var out []byte
	done := make(chan error, 1)
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
			var err error
			switch {
			case f.submit != nil:
				err = f.write(req.Payload, done)
			case f.leader != nil:
				err = f.leader.write(req.Payload, done)
			}
			if err != nil {
				out = protocol.AppendReplyError(out, "floor server: "+err.Error())
				break
			}
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
	f.register(topic, s)
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
	f.deliverTo(f.subscriberOf(topic, payload), payload)
}

// deliverTo writes the records of one publish to subscriber s (none if nil).
func (f *floorServer) deliverTo(s *floorSub, payload []byte) {
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
