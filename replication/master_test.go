package replication

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// appendixCreate is the create block of spec Appendix A / §5.4 (53 bytes).
var appendixCreate = mustHex("28000000" +
	hex.EncodeToString([]byte("1795950274737\t2\t1\t1795950274737\torder\t9\n")) + "0000000000000000" + "0a")

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// scriptStream is a Stream that delivers fixed blocks, then idles.
type scriptStream struct {
	mu     sync.Mutex
	blocks [][]byte
	closed bool
}

func (s *scriptStream) Next(ctx context.Context, max int, wait time.Duration, fn func([]byte) error) (int, error) {
	s.mu.Lock()
	blocks := s.blocks
	s.blocks = nil
	s.mu.Unlock()
	for _, b := range blocks {
		if err := fn(b); err != nil {
			return 0, err
		}
	}
	if len(blocks) > 0 {
		return len(blocks), nil
	}
	select {
	case <-time.After(wait):
		return 0, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (s *scriptStream) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

type scriptSource struct {
	stream *scriptStream
	err    error
}

func (s scriptSource) ReplicaStream(after int64) (Stream, error) {
	if s.err != nil {
		return nil, s.err
	}
	return s.stream, nil
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-ch
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

type serveResult struct {
	reuse bool
	err   error
}

func goServe(ctx context.Context, conn net.Conn, r *bufio.Reader, src Source, after int64, opts MasterOptions) <-chan serveResult {
	ch := make(chan serveResult, 1)
	go func() {
		reuse, err := ServeMaster(ctx, conn, r, src, after, opts)
		ch <- serveResult{reuse, err}
	}()
	return ch
}

// TestMasterGoldenFrames checks the bytes of a replication frame (the
// Appendix A create block) and of an alive frame.
func TestMasterGoldenFrames(t *testing.T) {
	srv, cli := tcpPair(t)
	st := &scriptStream{blocks: [][]byte{appendixCreate}}
	ctx, cancel := context.WithCancel(context.Background())
	res := goServe(ctx, srv, nil, scriptSource{stream: st}, 0, MasterOptions{AliveInterval: 50 * time.Millisecond, Logger: quiet})

	want := mustHex("c800000000000000000035000000")
	want = append(want, appendixCreate...)
	want = append(want, mustHex("c9000000000000000000")...)
	got := make([]byte, len(want))
	cli.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(cli, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("frames:\n got %x\nwant %x", got, want)
	}
	cancel()
	r := <-res
	if r.reuse || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("after cancel: reuse %v err %v", r.reuse, r.err)
	}
	if !st.closed {
		t.Fatal("stream not closed")
	}
	// Nothing reads the connection any more: bytes sent now stay readable.
	if _, err := cli.Write([]byte("next")); err != nil {
		t.Fatal(err)
	}
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(srv, buf); err != nil || string(buf) != "next" {
		t.Fatalf("read after ServeMaster returned: %q %v", buf, err)
	}
}

// TestSlaveRequestBytes checks the 28-byte valid-list and replica requests
// a slave sends (docs/protocol.md §4.2).
func TestSlaveRequestBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 28)
		io.ReadFull(c, buf)
		empty, _ := protocol.AppendReplyJSON(nil, nil) // no topics
		c.Write(empty)
		req := make([]byte, 28)
		io.ReadFull(c, req)
		got <- append(buf, req...)
		c.Write(protocol.AppendReplyError(nil, "enough"))
	}()
	sb := openBroker(t, t.TempDir(), true, nil)
	defer sb.Close()
	s, _ := runSlave(t, sb, SlaveOptions{MasterAddr: ln.Addr().String(), StartEvent: 0x0102030405})
	b := <-got
	want := mustHex("63" + strings.Repeat("00", 19) + "0504030201000000" + "40" + strings.Repeat("00", 19) + "0504030201000000")
	if !bytes.Equal(b, want) {
		t.Fatalf("requests:\n got %x\nwant %x", b, want)
	}
	smsstest.WaitFor(t, 5*time.Second, "stop on 400", func() bool { return s.Status().State == StateStopped })
	if st := s.Status(); !strings.Contains(st.LastError, "enough") {
		t.Fatalf("status %+v", st)
	}
}

// TestMasterRefusedStartKeepsConnection: an unresolvable start gets one
// 400 and the connection stays usable for the next request.
func TestMasterRefusedStartKeepsConnection(t *testing.T) {
	m := openBroker(t, t.TempDir(), false, nil)
	defer m.Close()
	ctx := context.Background()
	m.CreateTopic(ctx, []byte("t"), 0)
	r, n := recs("x", 3)
	m.Publish(ctx, []byte("t"), r, n) // eventIds 2..4 in one block
	for _, tc := range []struct {
		after int64
		want  string
	}{
		{3, "is inside a binlog block"},
		{99, "beyond the last eventId"},
		{-1, "invalid replica eventId"},
	} {
		srv, cli := tcpPair(t)
		br := bufio.NewReader(srv)
		reuse, err := ServeMaster(ctx, srv, br, SourceOf(m.ReplicaStream), tc.after, MasterOptions{Logger: quiet})
		if !reuse || err == nil {
			t.Fatalf("after %d: reuse %v err %v", tc.after, reuse, err)
		}
		cli.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, rerr := protocol.ReadReplicaFrame(cli, 1<<20)
		if rerr == nil || !strings.Contains(rerr.Error(), tc.want) {
			t.Fatalf("after %d: frame error %v, want %q", tc.after, rerr, tc.want)
		}
		req, _ := protocol.AppendAlive(nil, nil)
		cli.Write(req)
		srv.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, err := protocol.ReadRequest(br, protocol.DefaultLimits()); err != nil || got.Header.Cmd != protocol.CmdAlive {
			t.Fatalf("next request after a refused start: %+v %v", got, err)
		}
	}
	if _, ok := m.OldestReplicaFile(); ok {
		t.Fatal("a refused stream is still registered")
	}
}

// TestMasterDiscardsSlaveInput: a slave that writes a lot (acks, junk)
// while streaming never blocks the stream, and leaving ends it promptly.
func TestMasterDiscardsSlaveInput(t *testing.T) {
	m := openBroker(t, t.TempDir(), false, nil)
	defer m.Close()
	ctx := context.Background()
	m.CreateTopic(ctx, []byte("t"), 0)
	const pubs = 2000
	for i := 0; i < pubs; i++ {
		r, n := recs(strings.Repeat("p", 500), 1)
		m.Publish(ctx, []byte("t"), r, n)
	}
	srv, cli := tcpPair(t)
	br := bufio.NewReader(srv)
	res := goServe(ctx, srv, br, SourceOf(m.ReplicaStream), 0, MasterOptions{AliveInterval: time.Second, Logger: quiet})
	junkDone := make(chan error, 1)
	go func() {
		junk := make([]byte, 64<<10)
		var err error
		for i := 0; i < 512 && err == nil; i++ { // 32 MiB, far beyond socket buffers
			cli.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_, err = cli.Write(junk)
		}
		junkDone <- err
	}()
	cr := bufio.NewReader(cli)
	for got := 0; got < pubs+1; {
		cli.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := protocol.ReadReplicaFrame(cr, 1<<20)
		if err != nil {
			t.Fatalf("frame %d: %v", got, err)
		}
		if f.Code == protocol.StatusOK {
			got++
		}
	}
	if err := <-junkDone; err != nil {
		t.Fatalf("slave writes blocked: %v", err)
	}
	if _, ok := m.OldestReplicaFile(); !ok {
		t.Fatal("a streaming replica is not registered for retention")
	}
	cli.Close()
	select {
	case r := <-res:
		if r.reuse || !errors.Is(r.err, ErrSlaveGone) {
			t.Fatalf("after the slave left: %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeMaster did not notice the slave leaving")
	}
	if _, ok := m.OldestReplicaFile(); ok {
		t.Fatal("the stream is still registered after it ended")
	}
}

// TestStuckSlaveDoesNotBlockWriter: a slave that never reads does not
// block publishing; its stream fails after the write timeout.
func TestStuckSlaveDoesNotBlockWriter(t *testing.T) {
	m := openBroker(t, t.TempDir(), false, nil)
	defer m.Close()
	ctx := context.Background()
	m.CreateTopic(ctx, []byte("t"), 0)
	srv, _ := tcpPair(t) // the client end never reads
	res := goServe(ctx, srv, nil, SourceOf(m.ReplicaStream), 0, MasterOptions{WriteTimeout: 300 * time.Millisecond, Logger: quiet})
	big := bytes.Repeat([]byte("x"), 64<<10)
	start := time.Now()
	for i := 0; i < 200; i++ { // 12.8 MiB: far beyond what the sockets buffer
		r, err := protocol.AppendRecord(nil, protocol.Record{Body: big})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Publish(ctx, []byte("t"), r, 1); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("publishing took %v with a stuck slave", d)
	}
	select {
	case r := <-res:
		if r.reuse || r.err == nil || !strings.Contains(r.err.Error(), "write to slave") {
			t.Fatalf("stuck stream ended with %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck stream did not fail after its write timeout")
	}
	if _, ok := m.OldestReplicaFile(); ok {
		t.Fatal("the stuck stream is still registered")
	}
}

// TestMasterSendsAliveWhenIdle: with nothing to send, a 201 arrives every
// alive interval.
func TestMasterSendsAliveWhenIdle(t *testing.T) {
	m := openBroker(t, t.TempDir(), false, nil)
	defer m.Close()
	srv, cli := tcpPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	goServe(ctx, srv, nil, SourceOf(m.ReplicaStream), 0, MasterOptions{AliveInterval: 50 * time.Millisecond, Logger: quiet})
	start := time.Now()
	for i := 0; i < 3; i++ {
		cli.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := protocol.ReadReplicaFrame(cli, 1<<20)
		if err != nil || f.Code != protocol.StatusAlive {
			t.Fatalf("frame %d: %+v %v", i, f, err)
		}
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("3 alives in %v with a 50 ms interval", d)
	}
}

// TestMasterLargeBlock streams a block above FlushBytes (written without
// copying) between small ones, in order.
func TestMasterLargeBlock(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 3<<20)
	blocks := [][]byte{[]byte("small-1"), big, []byte("small-2")}
	st := &scriptStream{blocks: blocks}
	srv, cli := tcpPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	goServe(ctx, srv, nil, scriptSource{stream: st}, 0, MasterOptions{Logger: quiet, FlushBytes: 1024})
	cr := bufio.NewReader(cli)
	for i, want := range blocks {
		cli.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := protocol.ReadReplicaFrame(cr, 8<<20)
		if err != nil || !bytes.Equal(f.Body, want) {
			t.Fatalf("block %d: len %d err %v", i, len(f.Body), err)
		}
	}
}

// TestMasterReaderErrorSends400: a binlog reader error reaches the slave
// as one 400 frame and ends the stream.
func TestMasterReaderErrorSends400(t *testing.T) {
	srv, cli := tcpPair(t)
	src := errSource{err: protocol.NewBizError("replication position is gone: test")}
	res := goServe(context.Background(), srv, nil, src, 0, MasterOptions{Logger: quiet})
	cli.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := protocol.ReadReplicaFrame(cli, 1<<20)
	if err == nil || !strings.Contains(err.Error(), "position is gone") {
		t.Fatalf("got %v", err)
	}
	r := <-res
	if r.reuse || r.err == nil {
		t.Fatalf("result %+v", r)
	}
}

type errSource struct{ err error }

func (s errSource) ReplicaStream(int64) (Stream, error) { return errStream{s.err}, nil }

type errStream struct{ err error }

func (s errStream) Next(context.Context, int, time.Duration, func([]byte) error) (int, error) {
	return 0, s.err
}
func (errStream) Close() {}

// TestBlockFirstID covers the command-line peek used for original masters.
func TestBlockFirstID(t *testing.T) {
	line := func(s string) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(len(s)))
		return append(b, s...)
	}
	for _, tc := range []struct {
		raw  []byte
		want int64
	}{
		{appendixCreate, 1},
		{line("1\t1\t123456\t1\tt\t0\n"), 123456},
		{line("1\t1\t12x\t1\tt\t0\n"), 0},
		{line("1\t1\t"), 0},
		{[]byte{1, 2}, 0},
		{binary.LittleEndian.AppendUint32(nil, 1<<30), 0},
	} {
		if got := blockFirstID(tc.raw); got != tc.want {
			t.Errorf("blockFirstID(%q) = %d, want %d", tc.raw, got, tc.want)
		}
	}
}

var _ Source = SourceOf((*broker.Broker)(nil).ReplicaStream)

// TestSlowSlaveDoesNotSlowPublishers compares the publish rate of two
// masters, one with no replica and one with a replica that reads 1 KiB
// every 10 ms and is far behind (its socket buffers are full): the stream
// reads binlog files on its own and never holds up the writer. The masters
// are measured alternately and the best of 5 runs of each is compared, as
// the machine is shared and its load varies.
func TestSlowSlaveDoesNotSlowPublishers(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("throughput measurement")
	}
	ctx := context.Background()
	// 32 MiB of backlog each: more than the socket buffers hold, so the
	// slow replica's stream stays blocked in a write.
	big, _ := protocol.AppendRecord(nil, protocol.Record{Body: bytes.Repeat([]byte("b"), 64<<10)})
	open := func() *broker.Broker {
		m := openBroker(t, t.TempDir(), false, nil)
		t.Cleanup(func() { m.Close() })
		if _, err := m.CreateTopic(ctx, []byte("bench"), 0); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 512; i++ {
			if _, err := m.Publish(ctx, []byte("bench"), big, 1); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	alone, followed := open(), open()
	ms := serveMaster(t, followed, "", MasterOptions{AliveInterval: 100 * time.Millisecond})
	c, err := net.Dial("tcp", ms.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, _ := protocol.AppendReplica(nil, 0)
	c.Write(req)
	var got atomic.Int64
	stopRead := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 1024)
		for {
			select {
			case <-stopRead:
				return
			case <-time.After(10 * time.Millisecond):
			}
			c.SetReadDeadline(time.Now().Add(time.Second))
			k, _ := c.Read(buf)
			got.Add(int64(k))
		}
	}()
	smsstest.WaitFor(t, 10*time.Second, "the slow replica's first bytes", func() bool { return got.Load() > 0 })

	const n = 30000
	var rateAlone, rateFollowed float64
	for round := 0; round < 5; round++ {
		rateAlone = max(rateAlone, publishN(t, alone, n, 1, 32))
		rateFollowed = max(rateFollowed, publishN(t, followed, n, 1, 32))
	}
	close(stopRead)
	<-readDone
	if _, ok := followed.OldestReplicaFile(); !ok {
		t.Fatal("the slow replica's stream ended")
	}
	t.Logf("publish rate alone %.0f msg/s, with a slow replica %.0f msg/s (%.0f%%)", rateAlone, rateFollowed, 100*rateFollowed/rateAlone)
	// The bound is loose for the shared machine; a stream that held up the
	// writer would stop publishing altogether.
	if rateFollowed < 0.7*rateAlone {
		t.Fatalf("a slow replica cut the publish rate from %.0f to %.0f msg/s", rateAlone, rateFollowed)
	}
}
