package replication

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// quiet keeps test output readable; failures print their own context.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() && os.Getenv("REPL_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return quiet
}

func openBroker(t testing.TB, dir string, slave bool, mod func(*broker.Options)) *broker.Broker {
	t.Helper()
	o := broker.Options{Dir: dir, FlushLevel: 1, Slave: slave, Logger: testLogger(t)}
	if mod != nil {
		mod(&o)
	}
	b, err := broker.Open(o)
	if err != nil {
		t.Fatalf("open broker %s: %v", dir, err)
	}
	return b
}

func rec(body string) []byte {
	r, err := protocol.AppendRecord(nil, protocol.Record{
		Headers: []protocol.KV{{Key: "traceId", Value: "t"}}, Body: []byte(body)})
	if err != nil {
		panic(err)
	}
	return r
}

func recs(prefix string, n int) ([]byte, int) {
	var out []byte
	for i := 0; i < n; i++ {
		out = append(out, rec(fmt.Sprintf("%s-%d", prefix, i))...)
	}
	return out, n
}

// testMaster serves a broker the way the server does for the commands a
// slave sends: valid list (99), alive (17) and replica (64).
type testMaster struct {
	t      testing.TB
	b      *broker.Broker
	ln     net.Listener
	addr   string
	opts   MasterOptions
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	results []error // what ServeMaster returned, in order
	stopped bool
}

// serveMaster listens on addr ("" = a free port) and serves b.
func serveMaster(t testing.TB, b *broker.Broker, addr string, opts MasterOptions) *testMaster {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	// A just-closed listener's port can need a moment before it rebinds.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err = net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &testMaster{t: t, b: b, ln: ln, addr: ln.Addr().String(), opts: opts, ctx: ctx, cancel: cancel,
		conns: map[net.Conn]struct{}{}}
	m.wg.Add(1)
	go m.accept()
	t.Cleanup(m.stop)
	return m
}

func (m *testMaster) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.mu.Lock()
		if m.stopped {
			m.mu.Unlock()
			c.Close()
			return
		}
		m.conns[c] = struct{}{}
		m.wg.Add(1)
		m.mu.Unlock()
		go m.serveConn(c)
	}
}

func (m *testMaster) serveConn(c net.Conn) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.conns, c)
		m.mu.Unlock()
		c.Close()
	}()
	br := bufio.NewReader(c)
	for {
		req, err := protocol.ReadRequest(br, protocol.DefaultLimits())
		if err != nil {
			return
		}
		var out []byte
		switch req.Header.Cmd {
		case protocol.CmdValidList:
			ts, _ := m.b.ValidTopics(req.EventID)
			var body []byte
			if len(ts) > 0 {
				body, _ = json.Marshal(ts)
			}
			out, _ = protocol.AppendReplyJSON(nil, body)
		case protocol.CmdAlive:
			out = protocol.AppendReplyAlive(nil)
		case protocol.CmdReplica:
			reuse, err := ServeMaster(m.ctx, c, br, SourceOf(m.b.ReplicaStream), req.EventID, m.opts)
			m.mu.Lock()
			m.results = append(m.results, err)
			m.mu.Unlock()
			if !reuse {
				return
			}
			continue
		default:
			out = protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg)
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func (m *testMaster) serveResults() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]error(nil), m.results...)
}

// stop closes the listener and every connection abruptly (as a crash
// looks to the slave) and waits for the handlers. The broker stays open.
func (m *testMaster) stop() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	m.ln.Close()
	for c := range m.conns {
		c.Close()
	}
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
}

// runSlave starts a Slave on b and returns it with a stop function that
// cancels it and returns Run's result.
func runSlave(t testing.TB, b *broker.Broker, opts SlaveOptions) (*Slave, func() error) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	if opts.MinBackoff == 0 {
		opts.MinBackoff = 20 * time.Millisecond
		opts.MaxBackoff = 200 * time.Millisecond
	}
	s, err := NewSlave(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var result error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(20 * time.Second):
				result = errors.New("Run did not return within 20 s of cancel")
			}
		})
		return result
	}
	t.Cleanup(func() { stop() })
	return s, stop
}

// waitCaughtUp waits until the slave applied everything the master has.
func waitCaughtUp(t testing.TB, s *Slave, m *broker.Broker, timeout time.Duration) {
	t.Helper()
	smsstest.WaitFor(t, timeout, "the slave to catch up", func() bool {
		st := s.Status()
		if st.State == StateStopped {
			t.Fatalf("replication stopped: %s", st.LastError)
		}
		return st.LastEventID == m.LastEventID()
	})
}

// binlogBytes concatenates a data directory's binlog files in id order.
func binlogBytes(t testing.TB, dataDir string) []byte {
	t.Helper()
	dir := filepath.Join(dataDir, "binlog")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, e := range ents {
		name := e.Name()
		if id, err := strconv.ParseInt(strings.TrimSuffix(name, ".log"), 10, 64); err == nil && strings.HasSuffix(name, ".log") {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var out []byte
	for _, id := range ids {
		b, err := os.ReadFile(filepath.Join(dir, segment.FileName(id)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

func decodeTopic(buf []byte) (int64, int64, int, error) {
	b, n, err := topicblock.DecodeBlock(buf)
	return b.EventID, b.EventID, n, err
}

// topicMessages returns "eventId:record" for every message of a topic,
// read straight from its files.
func topicMessages(t testing.TB, dataDir, name string) []string {
	t.Helper()
	dir := topicblock.Dir(filepath.Join(dataDir, "topic"), []byte(name), 10)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	l, err := segment.Open(segment.Options{Dir: dir, Decode: decodeTopic})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if _, err := l.Scan(segment.Position{}, func(_ segment.Position, _, _ int64, raw []byte) error {
		b, _, err := topicblock.DecodeBlock(raw)
		out = append(out, fmt.Sprintf("%d:%x", b.EventID, b.Record))
		return err
	}); err != nil {
		t.Fatalf("scan %s: %v", dir, err)
	}
	return out
}

// assertSame checks the slave's binlog is byte-identical to the master's
// and that the listed topics hold the same messages (eventIds and records).
func assertSame(t testing.TB, masterDir, slaveDir string, topics ...string) {
	t.Helper()
	mb, sb := binlogBytes(t, masterDir), binlogBytes(t, slaveDir)
	if !bytes.Equal(mb, sb) {
		t.Fatalf("binlogs differ: master %d bytes, slave %d bytes (common prefix %d)", len(mb), len(sb), commonPrefix(mb, sb))
	}
	if len(mb) == 0 {
		t.Fatal("empty binlog")
	}
	for _, name := range topics {
		mm, sm := topicMessages(t, masterDir, name), topicMessages(t, slaveDir, name)
		if strings.Join(mm, ",") != strings.Join(sm, ",") {
			t.Fatalf("topic %s differs: master %d messages, slave %d", name, len(mm), len(sm))
		}
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// binlogEventIDs lists (first, last) eventIds of every binlog block.
func binlogBlocks(t testing.TB, dataDir string) []binlog.Block {
	t.Helper()
	buf := binlogBytes(t, dataDir)
	var out []binlog.Block
	for len(buf) > 0 {
		b, n, err := binlog.DecodeBlock(buf)
		if err != nil {
			t.Fatalf("decode binlog: %v", err)
		}
		out = append(out, b)
		buf = buf[n:]
	}
	return out
}
