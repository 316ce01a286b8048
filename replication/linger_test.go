package replication

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// feedStream is a Stream fed by a producer: Next delivers what was
// committed since the last call, or waits for a commit.
type feedStream struct {
	mu      sync.Mutex
	blocks  [][]byte
	changed chan struct{} // closed and replaced on every commit
	taken   atomic.Int64  // blocks Next has delivered
}

func newFeedStream() *feedStream { return &feedStream{changed: make(chan struct{})} }

func (s *feedStream) commitMany(b ...[]byte) {
	s.mu.Lock()
	s.blocks = append(s.blocks, b...)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

func (s *feedStream) Next(ctx context.Context, max int, wait time.Duration, fn func([]byte) error) (int, error) {
	for {
		s.mu.Lock()
		n := min(max, len(s.blocks))
		blocks := s.blocks[:n]
		s.blocks = s.blocks[n:]
		changed := s.changed
		s.mu.Unlock()
		for _, b := range blocks {
			if err := fn(b); err != nil {
				return 0, err
			}
		}
		s.taken.Add(int64(n))
		if n > 0 || wait <= 0 {
			return n, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (s *feedStream) Close() {}

type feedSource struct{ s *feedStream }

func (f feedSource) ReplicaStream(int64) (Stream, error) { return f.s, nil }

// lingerBlock is a well-formed-enough block for the frame layer: the
// master copies blocks verbatim, so only the length matters here.
func lingerBlock(i int) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, uint64(i))
	return b
}

// readBlocks reads replication frames until it has n blocks, checking
// their order.
func readBlocks(t *testing.T, r *bufio.Reader, n int) {
	t.Helper()
	readBlocksFrom(t, r, 0, n)
}

// readAlive reads one alive frame, the first frame of a stream that starts
// with nothing to send.
func readAlive(t *testing.T, r *bufio.Reader) {
	t.Helper()
	hdr := make([]byte, frameHeaderLen-4)
	if _, err := io.ReadFull(r, hdr); err != nil {
		t.Fatalf("alive frame: %v", err)
	}
	if hdr[0] != 201 {
		t.Fatalf("first frame: code %d, want the alive frame (201)", hdr[0])
	}
}

// readBlocksFrom reads n blocks numbered from first on, skipping alive
// frames as a slave does (an idle stream starts with one).
func readBlocksFrom(t *testing.T, r *bufio.Reader, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		hdr := make([]byte, frameHeaderLen)
		if _, err := io.ReadFull(r, hdr[:frameHeaderLen-4]); err != nil {
			t.Fatalf("frame %d header: %v", i, err)
		}
		if hdr[0] == 201 {
			i--
			continue
		}
		if hdr[0] != 200 {
			t.Fatalf("frame %d: code %d", i, hdr[0])
		}
		if _, err := io.ReadFull(r, hdr[frameHeaderLen-4:]); err != nil {
			t.Fatalf("frame %d header: %v", i, err)
		}
		body := make([]byte, binary.LittleEndian.Uint32(hdr[10:]))
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatalf("frame %d body: %v", i, err)
		}
		if got := int(binary.LittleEndian.Uint64(body)); got != i {
			t.Fatalf("block %d arrived as number %d", got, i)
		}
	}
}

// TestMasterLingerCoalescesBusyStream: commits arriving faster than the
// linger go out in at most one write per linger, and none is lost.
func TestMasterLingerCoalescesBusyStream(t *testing.T) {
	srv, cli := tcpPair(t)
	cc := &countingConn{Conn: srv}
	st := newFeedStream()
	const linger = 40 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := goServe(ctx, cc, nil, feedSource{st}, 0,
		MasterOptions{AliveInterval: time.Hour, Linger: linger, Logger: quiet})

	// The stream's first write: its alive frame (nothing committed yet).
	cli.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(cli)
	readAlive(t, br)
	// A producer commits two blocks per millisecond for a while (a loaded
	// master: commits pile up, so writes carry several blocks).
	const total = 300
	start := time.Now()
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; i < total; i += 2 {
			<-tick.C
			st.commitMany(lingerBlock(i), lingerBlock(i+1))
		}
	}()
	readBlocks(t, br, total)
	elapsed := time.Since(start)
	// Block by block until a write carries two, then at most one per linger.
	if w, most := cc.writes.Load()-1, int64(elapsed/linger)+3; w > most {
		t.Fatalf("%d writes for %d blocks in %v; with a %v linger at most %d", w, total, elapsed, linger, most)
	}
	cancel()
	<-res
}

// TestMasterLingerIdleSendsAtOnce: the first commit after an idle period
// is not held back by the linger.
func TestMasterLingerIdleSendsAtOnce(t *testing.T) {
	srv, cli := tcpPair(t)
	st := &scriptStream{blocks: [][]byte{lingerBlock(0)}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := goServe(ctx, srv, nil, scriptSource{stream: st}, 0,
		MasterOptions{AliveInterval: time.Hour, Linger: time.Hour, Logger: quiet})
	// Far inside the hour-long linger: only an immediate send passes.
	cli.SetReadDeadline(time.Now().Add(20 * time.Second))
	readBlocks(t, bufio.NewReader(cli), 1)
	cancel()
	<-res
}

// TestMasterLingerLonePublisherNotDelayed: a stream whose writes carry one
// block each is not busy, so no block waits for the linger.
func TestMasterLingerLonePublisherNotDelayed(t *testing.T) {
	srv, cli := tcpPair(t)
	st := newFeedStream()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := goServe(ctx, srv, nil, feedSource{st}, 0,
		MasterOptions{AliveInterval: time.Hour, Linger: time.Hour, Logger: quiet})
	r := bufio.NewReader(cli)
	// Far inside the hour-long linger: only immediate sends pass.
	cli.SetReadDeadline(time.Now().Add(20 * time.Second))
	for i := 0; i < 5; i++ {
		st.commitMany(lingerBlock(i))
		readBlocksFrom(t, r, i, 1)
	}
	cancel()
	<-res
}

// TestMasterLingerEndsWithTheBurst: what a linger gathers does not make a
// stream busy. After a burst, a commit that arrives alone waits for the
// linger, which gathers several more; the commits after that, arriving one
// at a time, go out at once again.
//
// Each step waits for the master to have taken the blocks before it
// commits more, so every wake-up finds exactly what the test means it to
// however slowly a loaded machine runs the master: paced commits would
// pile up behind a late wake-up and make the stream busy for real.
func TestMasterLingerEndsWithTheBurst(t *testing.T) {
	srv, cli := tcpPair(t)
	cc := &countingConn{Conn: srv}
	st := newFeedStream()
	const linger, gathered, singles = 2 * time.Second, 5, 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := goServe(ctx, cc, nil, feedSource{st}, 0,
		MasterOptions{AliveInterval: time.Hour, Linger: linger, Logger: quiet})
	r := bufio.NewReader(cli)
	cli.SetReadDeadline(time.Now().Add(60 * time.Second))
	// The stream starts with nothing to send: its alive frame is the one
	// write before the blocks.
	readAlive(t, r)
	if w := cc.writes.Load(); w != 1 {
		t.Fatalf("%d writes before any commit, want the one alive frame", w)
	}
	st.commitMany(lingerBlock(0), lingerBlock(1), lingerBlock(2)) // a burst
	readBlocksFrom(t, r, 0, 3)

	// One block alone: the stream is busy since the burst, so the master
	// takes it and lingers; what commits meanwhile joins its write.
	st.commitMany(lingerBlock(3))
	smsstest.WaitFor(t, 10*time.Second, "the master to take the block after the burst", func() bool { return st.taken.Load() == 4 })
	for i := 4; i < 4+gathered; i++ {
		st.commitMany(lingerBlock(i))
	}
	readBlocksFrom(t, r, 3, 1+gathered)
	if w := cc.writes.Load() - 1; w != 2 {
		t.Fatalf("%d writes for the burst and the linger after it, want 2 (the linger gathers %d blocks)", w, 1+gathered)
	}

	// The wake-up before the linger found one block: single commits now go
	// out at once, far sooner than the linger.
	var worst time.Duration
	for i := 4 + gathered; i < 4+gathered+singles; i++ {
		committed := time.Now()
		st.commitMany(lingerBlock(i))
		readBlocksFrom(t, r, i, 1)
		worst = max(worst, time.Since(committed))
	}
	if worst > linger/2 {
		t.Fatalf("after the burst, single blocks still waited up to %v (linger %v)", worst, linger)
	}
	cancel()
	<-res
}
