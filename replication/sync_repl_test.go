package replication

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// syncMaster is a master broker served over TCP with a SyncTracker.
func syncMaster(t *testing.T, need int, timeout time.Duration) (*broker.Broker, *testMaster, *SyncTracker) {
	t.Helper()
	m := openBroker(t, t.TempDir(), false, nil)
	t.Cleanup(func() { m.Close() })
	tr := newTestTrackerLast(t, need, false, timeout, m.LastEventID)
	ms := serveMaster(t, m, "", MasterOptions{AliveInterval: 200 * time.Millisecond, Sync: tr})
	return m, ms, tr
}

func publish(t *testing.T, m *broker.Broker, topic, body string, n int) int64 {
	t.Helper()
	r, cnt := recs(body, n)
	id, err := m.Publish(context.Background(), []byte(topic), r, cnt)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestSyncConfirmedByOurSlave: our slave confirms over the replica
// connection (real TCP, real brokers); a write waits until it did, and the
// tracker shows its confirmed position, fsync flag and latency.
func TestSyncConfirmedByOurSlave(t *testing.T) {
	for _, fsynced := range []bool{false, true} {
		t.Run(map[bool]string{false: "written", true: "fsynced"}[fsynced], func(t *testing.T) {
			m, ms, tr := syncMaster(t, 1, 10*time.Second)
			ctx := context.Background()
			if _, err := m.CreateTopic(ctx, []byte("t"), 0); err != nil {
				t.Fatal(err)
			}
			sb := openBroker(t, t.TempDir(), true, func(o *broker.Options) {
				if fsynced {
					o.FlushLevel = 2
				}
			})
			defer sb.Close()
			s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, Fsynced: fsynced, AliveInterval: 200 * time.Millisecond})
			defer stop()
			for i := range 20 {
				id := publish(t, m, "t", "m", 1+i%3)
				start := time.Now()
				if err := tr.Wait(ctx, id); err != nil {
					t.Fatalf("write %d (eventId %d): %v", i, id, err)
				}
				// Confirmed means in the slave's binlog, committed.
				if got := s.Status().LastEventID; got < id {
					t.Fatalf("eventId %d confirmed after %v but the slave has only %d", id, time.Since(start), got)
				}
			}
			in, slaves := tr.Info()
			if in.Confirming != 1 || in.Confirmed != m.LastEventID() || in.TimeoutsFail != 0 {
				t.Fatalf("info %+v", in)
			}
			if len(slaves) != 1 {
				t.Fatalf("slaves %+v", slaves)
			}
			for _, sl := range slaves {
				if sl.Confirmed != m.LastEventID() || sl.Fsynced != fsynced || sl.LatencySeconds <= 0 || sl.Confirms == 0 {
					t.Fatalf("slave %+v", sl)
				}
			}
			r := m.Replication()
			tr.Annotate(&r)
			// The test master names no remote address (the server does):
			// the per-slave fields are checked in cmd/smss and e2e.
			if r.Sync == nil || r.Sync.Confirming != 1 || r.Sync.Confirmed != m.LastEventID() {
				t.Fatalf("annotated replication %+v", r)
			}
		})
	}
}

// rawSlave opens a replica stream from after as a foreign slave would:
// it sends first with the request and perFrame after every block frame.
type rawSlave struct {
	conn   net.Conn
	frames atomic.Int64
	done   chan error
}

func startRawSlave(t *testing.T, addr string, after int64, first []byte, perFrame []byte) *rawSlave {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req, _ := protocol.AppendReplica(nil, after)
	if _, err := c.Write(append(req, first...)); err != nil {
		t.Fatal(err)
	}
	r := &rawSlave{conn: c, done: make(chan error, 1)}
	go func() {
		br := bufio.NewReader(c)
		for {
			f, err := protocol.ReadReplicaFrame(br, 1<<20)
			if err != nil {
				r.done <- err
				return
			}
			if f.Code != protocol.StatusOK {
				continue
			}
			r.frames.Add(1)
			if perFrame != nil {
				if _, err := c.Write(perFrame); err != nil {
					r.done <- err
					return
				}
			}
		}
	}()
	return r
}

// TestSyncForeignSlavesNeverCount: a ReplicaClient (2-byte acks), an
// original slave (silent) and other junk stream normally but never count
// toward syncSlaves; a slave that breaks the format after a valid hello
// stops counting and keeps streaming.
func TestSyncForeignSlavesNeverCount(t *testing.T) {
	hello := AppendConfirm(nil, Confirm{Kind: ConfirmHello, Instance: [6]byte{7}, EventID: 0})
	cases := []struct {
		name            string
		first, perFrame []byte
		countsAtFirst   bool
	}{
		{"ReplicaClient 2-byte acks", nil, []byte{0, 0}, false},
		{"ReplicaClient acks of 1", nil, []byte{1, 0}, false},
		{"original slave (silent)", nil, nil, false},
		{"almost the magic", []byte("SMC2"), AppendConfirm(nil, Confirm{Kind: ConfirmConfirm, EventID: 1 << 40}), false},
		// Confirms beyond what was sent would acknowledge unsent writes.
		{"hello, then confirms ahead of the stream", hello, AppendConfirm(nil, Confirm{Kind: ConfirmConfirm, EventID: 1 << 40}), true},
		{"hello, then junk", hello, []byte("junk junk junk junk junk"), true},
		{"two hellos", hello, hello, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, ms, tr := syncMaster(t, 1, 200*time.Millisecond)
			ctx := context.Background()
			if _, err := m.CreateTopic(ctx, []byte("t"), 0); err != nil {
				t.Fatal(err)
			}
			// From the create on: no frame before the writes below.
			rs := startRawSlave(t, ms.addr, m.LastEventID(), tc.first, tc.perFrame)
			if tc.countsAtFirst {
				smsstest.WaitFor(t, 10*time.Second, "the hello counted", func() bool { in, _ := tr.Info(); return in.Confirming == 1 })
			}
			var ids []int64
			for i := range 3 {
				ids = append(ids, publish(t, m, "t", "x", 1+i))
			}
			smsstest.WaitFor(t, 10*time.Second, "the frames streamed", func() bool { return rs.frames.Load() >= 3 })
			start := time.Now()
			err := tr.Wait(ctx, ids[len(ids)-1])
			if !errors.Is(err, ErrNotConfirmed) {
				t.Fatalf("wait: %v, want ErrNotConfirmed", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("refused after %v", took)
			}
			if in, _ := tr.Info(); in.Confirming != 0 || in.Confirmed != 0 {
				t.Fatalf("a foreign slave counts: %+v", in)
			}
			// The stream goes on.
			publish(t, m, "t", "after", 1)
			smsstest.WaitFor(t, 10*time.Second, "a frame after the refusal", func() bool { return rs.frames.Load() >= 4 })
			select {
			case err := <-rs.done:
				t.Fatalf("stream ended: %v", err)
			default:
			}
		})
	}
}

// TestSyncSlaveLeavesWhileWaiting: a confirming slave that goes away leaves
// the write unconfirmed (400 after the timeout), and one that comes back
// and confirms releases a write waiting at that time.
func TestSyncSlaveLeavesWhileWaiting(t *testing.T) {
	m, ms, tr := syncMaster(t, 1, 3*time.Second)
	ctx := context.Background()
	m.CreateTopic(ctx, []byte("t"), 0)
	sb := openBroker(t, t.TempDir(), true, nil)
	defer sb.Close()
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, AliveInterval: 200 * time.Millisecond})
	if err := tr.Wait(ctx, publish(t, m, "t", "a", 1)); err != nil {
		t.Fatal(err)
	}
	stop()
	smsstest.WaitFor(t, 10*time.Second, "the slave to leave", func() bool { in, _ := tr.Info(); return in.Confirming == 0 })
	id := publish(t, m, "t", "b", 1)
	w := waitAsync(tr, ctx, id)
	expectPending(t, w, "no slave")
	_, stop2 := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, AliveInterval: 200 * time.Millisecond})
	defer stop2()
	expectDone(t, w, nil, "the slave came back and confirmed")
	_ = s
}

// fakeOriginalMaster streams a broker's binlog the way the original smss
// does: it reads exactly the 28-byte replica request, reads and discards
// whatever the slave sends in 20-byte chunks, and writes one frame per
// block. It records what the slave sent.
type fakeOriginalMaster struct {
	ln   net.Listener
	addr string
	mu   sync.Mutex
	got  []byte
	wg   sync.WaitGroup
}

func startFakeOriginalMaster(t *testing.T, m *broker.Broker) *fakeOriginalMaster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeOriginalMaster{ln: ln, addr: ln.Addr().String()}
	ctx, cancel := context.WithCancel(context.Background())
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
				req := make([]byte, 28)
				for {
					if _, err := io.ReadFull(c, req); err != nil {
						return
					}
					if req[0] == byte(protocol.CmdReplica) {
						break
					}
					if req[0] != byte(protocol.CmdValidList) {
						return
					}
					ts, _ := m.ValidTopics(0)
					var body []byte
					if len(ts) > 0 {
						body, _ = json.Marshal(ts)
					}
					out, _ := protocol.AppendReplyJSON(nil, body)
					c.Write(out)
				}
				after := int64(0)
				for i := 7; i >= 0; i-- {
					after = after<<8 | int64(req[20+i])
				}
				st, err := m.ReplicaStream(after)
				if err != nil {
					c.Write(protocol.AppendReplyError(nil, "EOF"))
					return
				}
				defer st.Close()
				f.wg.Add(1)
				go func() {
					defer f.wg.Done()
					chunk := make([]byte, 20)
					for {
						n, err := io.ReadFull(c, chunk)
						f.mu.Lock()
						f.got = append(f.got, chunk[:n]...)
						f.mu.Unlock()
						if err != nil {
							return
						}
					}
				}()
				for ctx.Err() == nil {
					var out []byte
					n, err := st.Next(ctx, 1, 100*time.Millisecond, func(b []byte) error {
						out = frame(b)
						return nil
					})
					if err != nil {
						return
					}
					if n == 0 {
						out = protocol.AppendReplyAlive(nil)
					}
					if _, err := c.Write(out); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		f.wg.Wait()
	})
	return f
}

// TestConfirmingSlaveWithOriginalMaster: an original master discards the
// hello and confirmations; our slave replicates from it byte-identically.
func TestConfirmingSlaveWithOriginalMaster(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	populate(t, m, "1")
	fm := startFakeOriginalMaster(t, m)
	sb := openBroker(t, sdir, true, nil)
	defer sb.Close()
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: fm.addr, AliveInterval: 100 * time.Millisecond,
		SilenceTimeout: 2 * time.Second})
	waitCaughtUp(t, s, m, 20*time.Second)
	for i := range 10 {
		publish(t, m, "order1", "live", 1+i%4)
	}
	waitCaughtUp(t, s, m, 20*time.Second)
	// Confirmations follow the applied blocks: wait for the one of the
	// last block, not just for any.
	smsstest.WaitFor(t, 10*time.Second, "the last block confirmed", func() bool {
		fm.mu.Lock()
		defer fm.mu.Unlock()
		n := len(fm.got) / ConfirmLen * ConfirmLen
		if n < 2*ConfirmLen {
			return false
		}
		c, err := DecodeConfirm(fm.got[n-ConfirmLen : n])
		return err == nil && c.Kind == ConfirmConfirm && c.EventID == m.LastEventID()
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := s.Status(); st.Reconnects != 0 {
		t.Fatalf("status %+v", st)
	}
	if mb, sbb := binlogBytes(t, mdir), binlogBytes(t, sdir); !bytes.Equal(mb, sbb) {
		t.Fatalf("binlogs differ: master %d bytes, slave %d, common prefix %d", len(mb), len(sbb), commonPrefix(mb, sbb))
	}
	fm.mu.Lock()
	got := append([]byte(nil), fm.got...)
	fm.mu.Unlock()
	c, err := DecodeConfirm(got[:ConfirmLen])
	if err != nil || c.Kind != ConfirmHello {
		t.Fatalf("first record %x: %+v %v", got[:ConfirmLen], c, err)
	}
	last := int64(-1)
	for off := ConfirmLen; off+ConfirmLen <= len(got); off += ConfirmLen {
		c, err := DecodeConfirm(got[off : off+ConfirmLen])
		if err != nil || c.Kind != ConfirmConfirm || c.EventID <= last {
			t.Fatalf("record at %d: %+v %v (previous %d)", off, c, err, last)
		}
		last = c.EventID
	}
	if last != m.LastEventID() {
		t.Fatalf("last confirmation %d, master at %d", last, m.LastEventID())
	}
}

// TestSyncStartEventIsNotConfirmed: a slave started with -event past the
// master's history confirms only the blocks it has, not the skipped ones.
func TestSyncStartEventIsNotConfirmed(t *testing.T) {
	m, ms, tr := syncMaster(t, 1, 300*time.Millisecond)
	ctx := context.Background()
	m.CreateTopic(ctx, []byte("t"), 0)
	skipped := publish(t, m, "t", "old", 2)
	sb := openBroker(t, t.TempDir(), true, nil)
	defer sb.Close()
	_, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, StartEvent: m.LastEventID(), AliveInterval: 200 * time.Millisecond})
	defer stop()
	smsstest.WaitFor(t, 10*time.Second, "the hello", func() bool { in, _ := tr.Info(); return in.Confirming == 1 })
	if err := tr.Wait(ctx, skipped); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("a skipped write counted as confirmed: %v", err)
	}
	if err := tr.Wait(ctx, publish(t, m, "t", "new", 1)); err != nil {
		t.Fatalf("a replicated write: %v", err)
	}
}

// TestSyncTwoSlaves: syncSlaves 2 needs both slaves; one of them alone
// never confirms a write.
func TestSyncTwoSlaves(t *testing.T) {
	m, ms, tr := syncMaster(t, 2, 300*time.Millisecond)
	ctx := context.Background()
	m.CreateTopic(ctx, []byte("t"), 0)
	var stops []func() error
	var slaves []*Slave
	for range 2 {
		sb := openBroker(t, t.TempDir(), true, nil)
		defer sb.Close()
		s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, AliveInterval: 200 * time.Millisecond})
		slaves, stops = append(slaves, s), append(stops, stop)
	}
	smsstest.WaitFor(t, 10*time.Second, "both slaves confirming", func() bool { in, _ := tr.Info(); return in.Confirming == 2 })
	for i := range 5 {
		id := publish(t, m, "t", "both", 1+i)
		if err := tr.Wait(ctx, id); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		for j, s := range slaves {
			if got := s.Status().LastEventID; got < id {
				t.Fatalf("write %d confirmed with slave %d at %d < %d", i, j, got, id)
			}
		}
	}
	stops[1]()
	smsstest.WaitFor(t, 10*time.Second, "one slave left", func() bool { in, _ := tr.Info(); return in.Confirming == 1 })
	id := publish(t, m, "t", "one", 1)
	if err := tr.Wait(ctx, id); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("one slave of two: %v", err)
	}
	// Refused, yet stored and replicated to the remaining slave.
	smsstest.WaitFor(t, 10*time.Second, "the remaining slave to apply", func() bool { return slaves[0].Status().LastEventID >= id })
}

// TestSlaveOfOriginalMasterKeepsLegacyTopicNames: an original master whose
// data directory holds topics with names the original accepted and this
// server refuses to create ("", ".", a backslash, a space). Our slave,
// from the start (creates in the stream) and from a later eventId (topics
// from the valid list), keeps every one of them (the binlog
// byte-identical) and still has them once promoted.
func TestSlaveOfOriginalMasterKeepsLegacyTopicNames(t *testing.T) {
	legacy := []string{"", ".", `a\b`, "with space"}
	mdir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(mdir, "binlog"), 0o700); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	id, now := int64(1), time.Now().UnixMilli()
	for _, name := range legacy {
		raw = binlog.AppendBlock(raw, &binlog.Block{WriteTime: now, Cmd: binlog.CmdCreate, EventID: id, Timestamp: now,
			Topic: []byte(name), Payload: make([]byte, 8)})
		id++
		raw = binlog.AppendBlock(raw, &binlog.Block{WriteTime: now, Cmd: binlog.CmdPub, EventID: id, Timestamp: now,
			Topic: []byte(name), Payload: rec(name + "-1")})
		id++
	}
	if err := os.WriteFile(filepath.Join(mdir, "binlog", "0.log"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	m := openBroker(t, mdir, false, nil)
	defer m.Close()
	fm := startFakeOriginalMaster(t, m)
	for _, tc := range []struct {
		name  string
		start int64
	}{{"from the start", 0}, {"from a later eventId", m.LastEventID()}} {
		t.Run(tc.name, func(t *testing.T) {
			sdir := t.TempDir()
			sb := openBroker(t, sdir, true, nil)
			defer sb.Close()
			s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: fm.addr, StartEvent: tc.start, AliveInterval: 100 * time.Millisecond,
				SilenceTimeout: 2 * time.Second})
			smsstest.WaitFor(t, 20*time.Second, "every topic on the slave", func() bool {
				ts, err := sb.Topics()
				return err == nil && len(ts) == len(legacy)
			})
			if tc.start == 0 {
				waitCaughtUp(t, s, m, 20*time.Second)
			}
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if tc.start == 0 {
				if mb, sbb := binlogBytes(t, mdir), binlogBytes(t, sdir); !bytes.Equal(mb, sbb) {
					t.Fatalf("binlogs differ: master %d bytes, slave %d", len(mb), len(sbb))
				}
			}
			if _, err := sb.Promote(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, name := range legacy {
				if _, err := sb.Topic([]byte(name)); err != nil {
					t.Errorf("topic %q on the promoted slave: %v", name, err)
				}
			}
		})
	}
}
