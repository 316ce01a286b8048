package replication

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

func block(cmd uint8, eventID int64, topic string, payload []byte) []byte {
	return binlog.AppendBlock(nil, &binlog.Block{WriteTime: 1700000000000, Cmd: cmd, EventID: eventID,
		Timestamp: 1700000000000, Topic: []byte(topic), Payload: payload})
}

func frame(b []byte) []byte {
	f, err := protocol.AppendReplicaFrame(nil, b)
	if err != nil {
		panic(err)
	}
	return f
}

// fakeMaster answers valid list with no topics and answers each replica
// request with script(n, eventId) for the n-th request, then keeps the
// connection open (reading) until the slave leaves, unless closeAfter.
type fakeMaster struct {
	ln       net.Listener
	addr     string
	replicas atomic.Int64
	wg       sync.WaitGroup
}

func startFake(t *testing.T, script func(n int, eventID int64) (out []byte, closeAfter bool)) *fakeMaster {
	t.Helper()
	return startFakeList(t, nil, script)
}

// startFakeList is startFake answering valid list with the given JSON.
func startFakeList(t *testing.T, validList []byte, script func(n int, eventID int64) (out []byte, closeAfter bool)) *fakeMaster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeMaster{ln: ln, addr: ln.Addr().String()}
	var conns sync.Map
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := protocol.ReadRequest(br, protocol.DefaultLimits())
					if err != nil {
						return
					}
					switch req.Header.Cmd {
					case protocol.CmdStatus:
						// As an original smss: unknown command, then close.
						c.Write(protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg))
						return
					case protocol.CmdValidList:
						out, _ := protocol.AppendReplyJSON(nil, validList)
						c.Write(out)
					case protocol.CmdReplica:
						n := int(f.replicas.Add(1))
						out, closeAfter := script(n, req.EventID)
						if out != nil {
							c.Write(out)
						}
						if closeAfter {
							return
						}
						io.Copy(io.Discard, br)
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		f.wg.Wait()
	})
	return f
}

// TestInvalidInputFromMaster: bad frames stop replication loudly without
// applying anything after the last good block; a connection lost in the
// middle of a frame only reconnects.
func TestInvalidInputFromMaster(t *testing.T) {
	create := block(binlog.CmdCreate, 1, "order", make([]byte, 8))
	pub := block(binlog.CmdPub, 2, "order", rec("hello"))
	badLine := append([]byte(nil), pub...)
	copy(badLine[4:], "17x0")
	huge := append(protocol.AppendReplyOK(nil), 0xf0, 0xff, 0xff, 0xff)
	for _, tc := range []struct {
		name      string
		out       []byte
		want      string // in Status.LastError; "" means: reconnect, not stop
		wantLast  int64
		closeConn bool
	}{
		{"truncated block", append(frame(create), frame(pub[:len(pub)-3])...), "invalid replicated block", 1, false},
		{"trailing bytes", frame(append(append([]byte(nil), create...), 'x')), "bytes after the block", 0, false},
		{"bad command line", append(frame(create), frame(badLine)...), "invalid replicated block", 1, false},
		{"huge length", append(frame(create), huge...), "over the cap", 1, false},
		{"unknown status", append(frame(create), protocol.AppendReplySubEnd(nil)...), "status 255", 1, false},
		{"error from master", append(frame(create), protocol.AppendReplyError(nil, "retention removed it")...), "retention removed it", 1, false},
		{"out of order", append(frame(block(binlog.CmdCreate, 5, "a", make([]byte, 8))), frame(create)...), "does not follow", 5, false},
		{"empty block", frame(nil), "invalid replicated block", 0, false},
		{"cut mid-frame", append(frame(create), frame(pub)[:20]...), "", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fm := startFake(t, func(n int, _ int64) ([]byte, bool) {
				if n == 1 {
					return tc.out, tc.closeConn
				}
				return nil, false // later sessions: an idle master
			})
			sdir := t.TempDir()
			sb := openBroker(t, sdir, true, nil)
			defer sb.Close()
			s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: fm.addr, MaxBlock: 1 << 20})
			if tc.want == "" {
				smsstest.WaitFor(t, 10*time.Second, "a reconnect", func() bool { return fm.replicas.Load() >= 2 })
				if st := s.Status(); st.State == StateStopped || st.LastEventID != tc.wantLast {
					t.Fatalf("status %+v", st)
				}
				if err := stop(); err != nil {
					t.Fatal(err)
				}
			} else {
				smsstest.WaitFor(t, 10*time.Second, "a loud stop", func() bool { return s.Status().State == StateStopped })
				err := stop()
				if !errors.Is(err, ErrStopped) {
					t.Fatalf("Run returned %v", err)
				}
				st := s.Status()
				if !strings.Contains(st.LastError, tc.want) || st.LastEventID != tc.wantLast {
					t.Fatalf("status %+v, want error containing %q and last %d", st, tc.want, tc.wantLast)
				}
				if n := fm.replicas.Load(); n != 1 {
					t.Fatalf("%d replica requests after a stop", n)
				}
			}
			blocks := binlogBlocks(t, sdir)
			if tc.wantLast == 0 && len(blocks) != 0 || tc.wantLast > 0 && (len(blocks) != 1 || blocks[0].EventID != tc.wantLast) {
				t.Fatalf("slave binlog: %+v", blocks)
			}
		})
	}
}

// TestMasterRefusalStops: a real master refusing the start (an eventId in
// the middle of a block) stops replication with its text.
func TestMasterRefusalStops(t *testing.T) {
	m := openBroker(t, t.TempDir(), false, nil)
	defer m.Close()
	ctx := context.Background()
	m.CreateTopic(ctx, []byte("t"), 0)
	r, n := recs("x", 4)
	m.Publish(ctx, []byte("t"), r, n) // 2..5
	ms := serveMaster(t, m, "", MasterOptions{})
	sb := openBroker(t, t.TempDir(), true, nil)
	defer sb.Close()
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, StartEvent: 3})
	smsstest.WaitFor(t, 10*time.Second, "a loud stop", func() bool { return s.Status().State == StateStopped })
	if err := stop(); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "is inside a binlog block") {
		t.Fatalf("Run: %v", err)
	}
	// The topic sync at eventId 3 happened before the refusal.
	if _, err := sb.Topic([]byte("t")); err != nil {
		t.Fatalf("synced topic: %v", err)
	}
}

// TestSilentMaster: a master that stops sending anything (no data, no
// alive) is detected within about twice its alive interval; so is one that
// never answers the topic sync.
func TestSilentMaster(t *testing.T) {
	t.Run("stream", func(t *testing.T) {
		fm := startFake(t, func(int, int64) ([]byte, bool) { return nil, false })
		sb := openBroker(t, t.TempDir(), true, nil)
		defer sb.Close()
		s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: fm.addr, AliveInterval: 100 * time.Millisecond})
		start := time.Now()
		smsstest.WaitFor(t, 10*time.Second, "two silent sessions", func() bool { return s.Status().Reconnects >= 2 })
		if d := time.Since(start); d < 400*time.Millisecond {
			t.Fatalf("gave up on the master after %v; silence timeout is 200 ms", d)
		}
		if st := s.Status(); !strings.Contains(st.LastError, "silence timeout") || st.State == StateStopped {
			t.Fatalf("status %+v", st)
		}
		stop()
	})
	t.Run("topic sync", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var accepted atomic.Int64
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				defer c.Close()
			}
		}()
		sb := openBroker(t, t.TempDir(), true, nil)
		defer sb.Close()
		s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ln.Addr().String(), RequestTimeout: 100 * time.Millisecond})
		smsstest.WaitFor(t, 10*time.Second, "retries", func() bool { return accepted.Load() >= 3 })
		if st := s.Status(); !strings.Contains(st.LastError, "topic sync") || st.State == StateStopped {
			t.Fatalf("status %+v", st)
		}
		stop()
	})
}

// TestOriginalMasterResume: an original master resolves only a block's
// first eventId (docs/protocol.md §10 item 11) and answers "EOF" to anything else. The
// session's divergence check asks from the first eventId of the block
// before the last local one (the create, 1), gets the last local block
// (2..4) back, verifies it and goes on with the next block. Against a
// master that does not hold that block the same request finds the
// divergence instead (TestDivergenceAgainstOriginalMaster).
func TestOriginalMasterResume(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	ctx := context.Background()
	m.CreateTopic(ctx, []byte("t"), 0)
	r, n := recs("x", 3)
	m.Publish(ctx, []byte("t"), r, n) // block 2..4
	ms := serveMaster(t, m, "", MasterOptions{})
	sb := openBroker(t, sdir, true, nil)
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr})
	waitCaughtUp(t, s, m, 10*time.Second)
	stop()
	ms.stop()
	m.Close()
	sb.Close()

	blks := binlogBlocks(t, sdir)
	lastLocal := binlog.AppendBlock(nil, &blks[len(blks)-1])
	next := block(binlog.CmdPub, 5, "t", rec("after"))
	var asked []int64
	var mu sync.Mutex
	fm := startFake(t, func(_ int, id int64) ([]byte, bool) {
		mu.Lock()
		asked = append(asked, id)
		mu.Unlock()
		if id == 1 {
			return append(frame(lastLocal), frame(next)...), false
		}
		return protocol.AppendReplyError(nil, "EOF"), false
	})
	sb = openBroker(t, sdir, true, nil)
	defer sb.Close()
	s, stop = runSlave(t, sb, SlaveOptions{MasterAddr: fm.addr, MinBackoff: time.Hour})
	smsstest.WaitFor(t, 10*time.Second, "the next block", func() bool { return s.Status().LastEventID == 5 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || asked[0] != 1 {
		t.Fatalf("replica requests %v, want [1]", asked)
	}
	if got := binlogBytes(t, sdir); !bytes.Equal(got, append(binlogBytes(t, mdir), next...)) {
		t.Fatalf("slave binlog is not the master's plus the next block")
	}
}

// cutProxy forwards slave↔master traffic and cuts every connection after
// a random number of master→slave bytes, so frames are torn anywhere.
type cutProxy struct {
	ln     net.Listener
	target string
	cuts   atomic.Int64
	maxCut int
}

func startCutProxy(t *testing.T, target string, maxCut int) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, maxCut: maxCut}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				p.relay(c, rand.New(rand.NewPCG(seed, 7)))
			}(i)
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return p
}

func (p *cutProxy) relay(c net.Conn, rng *rand.Rand) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		// The slave closed (e.g. a status query's connection, which the
		// master keeps open): close towards the master too.
		io.Copy(up, c)
		up.Close()
	}()
	limit := int64(1 + rng.IntN(p.maxCut))
	n, _ := io.CopyN(c, up, limit)
	if n == limit {
		p.cuts.Add(1)
	}
}

// TestConnectionCutAnywhere: with connections torn at random byte offsets
// while the master keeps publishing, the slave ends identical to the
// master: no torn frame applied, no gap, no duplicate.
func TestConnectionCutAnywhere(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		m.CreateTopic(ctx, []byte(name), 0)
	}
	for i := 0; i < 3000; i++ {
		r, n := recs("backlog", 1+i%4)
		m.Publish(ctx, []byte([]string{"a", "b"}[i%2]), r, n)
	}
	ms := serveMaster(t, m, "", MasterOptions{AliveInterval: 100 * time.Millisecond})
	proxy := startCutProxy(t, ms.addr, 64<<10)
	sb := openBroker(t, sdir, true, nil)
	defer sb.Close()
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: proxy.ln.Addr().String(), AliveInterval: 100 * time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := 0; i < 3000; i++ {
			r, n := recs("live", 1+i%3)
			if _, err := m.Publish(ctx, []byte([]string{"a", "b"}[i%2]), r, n); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	<-pubDone
	waitCaughtUp(t, s, m, 60*time.Second)
	stop()
	if c := proxy.cuts.Load(); c < 5 {
		t.Fatalf("only %d cuts", c)
	}
	t.Logf("%d connection cuts, %d reconnects", proxy.cuts.Load(), s.Status().Reconnects)
	assertSame(t, mdir, sdir, "a", "b")
}

// TestRestartAfterTopicSyncNeverSkips: a slave restarted after its
// first-start topic sync but before it replicated the synced topics'
// creates must not resume from the broker's counter (which includes the
// synced createEventIds) and silently skip blocks: it either resumes from
// its binlog or stops loudly.
func TestRestartAfterTopicSyncNeverSkips(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c"} {
		m.CreateTopic(ctx, []byte(name), 0) // 1, 2, 3
	}
	for i := 0; i < 10; i++ {
		r, n := recs("x", 2)
		m.Publish(ctx, []byte("c"), r, n)
	}
	// First start against a master that lists the topics but then sends
	// only the first block.
	topics, err := m.ValidTopics(0)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := json.Marshal(topics)
	first := binlogBlocks(t, mdir)[0]
	fm := startFakeList(t, list, func(int, int64) ([]byte, bool) { return frame(binlog.AppendBlock(nil, &first)), false })
	sb := openBroker(t, sdir, true, nil)
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: fm.addr})
	smsstest.WaitFor(t, 10*time.Second, "the first block", func() bool { return s.Status().LastEventID == 1 })
	stop()
	sb.Close()
	ms := serveMaster(t, m, "", MasterOptions{})
	sb = openBroker(t, sdir, true, nil)
	defer sb.Close()
	s, stop = runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr})
	smsstest.WaitFor(t, 10*time.Second, "caught up or stopped", func() bool {
		st := s.Status()
		return st.State == StateStopped || st.LastEventID == m.LastEventID()
	})
	err = stop()
	if st := s.Status(); st.LastEventID == m.LastEventID() {
		assertSame(t, mdir, sdir, "a", "b", "c")
		return
	}
	// The broker refused the next block as out of order: a loud stop with
	// the slave's binlog still a prefix of the master's.
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "does not follow") {
		t.Fatalf("Run: %v", err)
	}
	mb, sbb := binlogBytes(t, mdir), binlogBytes(t, sdir)
	if len(sbb) >= len(mb) || string(mb[:len(sbb)]) != string(sbb) {
		t.Fatal("the slave's binlog is not a prefix of the master's")
	}
	t.Logf("stopped loudly (broker counter ahead of its binlog after a topic sync): %v", err)
}

// TestPositionFromBinlog covers reading the position at start.
func TestPositionFromBinlog(t *testing.T) {
	sdir := t.TempDir()
	sb := openBroker(t, sdir, true, nil)
	first, last, err := lastBlockIDs(sb)
	if err != nil || first != 0 || last != 0 {
		t.Fatalf("empty: %d %d %v", first, last, err)
	}
	ctx := context.Background()
	if _, err := sb.ApplyReplicated(ctx, block(binlog.CmdCreate, 1, "t", make([]byte, 8))); err != nil {
		t.Fatal(err)
	}
	r, _ := recs("x", 3)
	if _, err := sb.ApplyReplicated(ctx, block(binlog.CmdPub, 7, "t", r)); err != nil {
		t.Fatal(err)
	}
	sb.Close()
	sb = openBroker(t, sdir, true, nil) // a new, still empty binlog file
	defer sb.Close()
	first, last, err = lastBlockIDs(sb)
	if err != nil || first != 7 || last != 9 {
		t.Fatalf("after restart: first %d last %d err %v", first, last, err)
	}
	s, err := NewSlave(sb, SlaveOptions{MasterAddr: "127.0.0.1:1", StartEvent: 3, Logger: quiet})
	if err != nil || s.pos != 9 || s.needSync {
		t.Fatalf("position %d sync %v err %v", s.pos, s.needSync, err)
	}
	s, _ = NewSlave(sb, SlaveOptions{MasterAddr: "127.0.0.1:1", StartEvent: 9, Logger: quiet})
	if s.pos != 9 || !s.needSync {
		t.Fatalf("-event equal to the position: %d %v", s.pos, s.needSync)
	}
	if _, err := NewSlave(sb, SlaveOptions{}); err == nil {
		t.Fatal("no master address accepted")
	}
	if _, err := NewSlave(sb, SlaveOptions{MasterAddr: "x:1", StartEvent: -1}); err == nil {
		t.Fatal("negative -event accepted")
	}
}
