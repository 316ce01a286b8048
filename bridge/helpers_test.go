package bridge

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

const testDeadline = 60 * time.Second

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("BRIDGE_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// history builds binlog blocks the way a master writes them.
type history struct {
	next   int64
	blocks [][]byte
	now    int64
}

func newHistory() *history { return &history{next: 1, now: time.Now().UnixMilli()} }

func (h *history) add(cmd uint8, topic string, payload []byte, n int) int64 {
	id := h.next
	h.now++
	h.blocks = append(h.blocks, binlog.AppendBlock(nil, &binlog.Block{WriteTime: h.now, Cmd: cmd, EventID: id,
		Timestamp: h.now, Topic: []byte(topic), Payload: payload}))
	h.next += int64(n)
	return id
}

func (h *history) create(topic string) int64 {
	return h.add(binlog.CmdCreate, topic, make([]byte, 8), 1)
}

func (h *history) del(topic string) int64 { return h.add(binlog.CmdDelete, topic, nil, 1) }

func (h *history) pub(topic string, recs ...protocol.Record) int64 {
	var p []byte
	for _, r := range recs {
		p, _ = protocol.AppendRecord(p, r)
	}
	return h.add(binlog.CmdPub, topic, p, len(recs))
}

// delay schedules recs and returns the payload its apply will carry.
func (h *history) delay(topic string, recs ...protocol.Record) []byte {
	p := make([]byte, binlog.DelayPrefixLen)
	binary.LittleEndian.PutUint64(p, uint64(h.now+1000))
	binary.LittleEndian.PutUint64(p[8:], uint64(h.next))
	for _, r := range recs {
		p, _ = protocol.AppendRecord(p, r)
	}
	h.add(binlog.CmdDelay, topic, p, 1)
	return p
}

func (h *history) apply(topic string, payload []byte) int64 {
	n, err := protocol.CountRecords(payload[binlog.DelayPrefixLen:], 0)
	if err != nil {
		panic(err)
	}
	return h.add(binlog.CmdDelayApply, topic, payload, n)
}

// fakeMaster serves the replication stream of a history over real TCP,
// with the resume rule of docs/protocol.md §11: after 0 = from the start, after = the
// last eventId of a block = right after it, anything else = 400.
type fakeMaster struct {
	t  testing.TB
	ln net.Listener

	mu      sync.Mutex
	blocks  [][]byte
	changed chan struct{}
	conns   map[net.Conn]struct{}
	extra   int // bytes received after replica requests
	reqs    []int64
	refuse  string // answer every replica request with this 400

	// v3: the status says "replica":3 with epoch; once a stream's reader
	// sent its 40 bytes (hello and epoch record, kept in recv) it gets a
	// commit frame whenever commit changes, as a version 3 master sends.
	v3     bool
	epoch  uint64
	commit int64
	recv   []byte // what readers sent after their replica requests, in order
}

// setCommit moves the commit point the streams are sent.
func (m *fakeMaster) setCommit(cp int64) {
	m.mu.Lock()
	m.commit = cp
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

func (m *fakeMaster) received() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]byte(nil), m.recv...)
}

func startFakeMaster(t testing.TB, blocks [][]byte) *fakeMaster {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeMaster{t: t, ln: ln, blocks: blocks, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go m.accept()
	t.Cleanup(m.close)
	return m
}

func (m *fakeMaster) addr() string { return m.ln.Addr().String() }

func (m *fakeMaster) close() {
	m.ln.Close()
	m.dropConns()
}

func (m *fakeMaster) dropConns() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for c := range m.conns {
		c.Close()
	}
}

// setBlocks replaces the history (a failover to a node with another one).
func (m *fakeMaster) setBlocks(blocks [][]byte) {
	m.mu.Lock()
	m.blocks = blocks
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

func (m *fakeMaster) requests() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int64(nil), m.reqs...)
}

func (m *fakeMaster) extraBytes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.extra
}

func (m *fakeMaster) accept() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.mu.Lock()
		m.conns[c] = struct{}{}
		m.mu.Unlock()
		go m.serve(c)
	}
}

func (m *fakeMaster) serve(c net.Conn) {
	defer func() {
		c.Close()
		m.mu.Lock()
		delete(m.conns, c)
		m.mu.Unlock()
	}()
	br := bufio.NewReader(c)
	var req [28]byte
	for {
		if _, err := io.ReadFull(br, req[:20]); err != nil {
			return
		}
		if req[0] != byte(protocol.CmdStatus) {
			break
		}
		// Status (34): the last eventId of the history.
		m.mu.Lock()
		var last int64
		if n := len(m.blocks); n > 0 {
			_, last, _, _ = binlog.DecodeSpan(m.blocks[n-1])
		}
		st := fmt.Appendf(nil, `{"role":"master","epoch":1,"lastEventId":%d}`, last)
		if m.v3 {
			st = fmt.Appendf(nil, `{"role":"master","epoch":%d,"lastEventId":%d,"replica":3,"commitPoint":%d}`, m.epoch, last, m.commit)
		}
		m.mu.Unlock()
		r, _ := protocol.AppendReplyJSON(nil, st)
		if _, err := c.Write(r); err != nil {
			return
		}
	}
	if req[0] != byte(protocol.CmdReplica) {
		return
	}
	if _, err := io.ReadFull(br, req[20:]); err != nil {
		return
	}
	after := int64(binary.LittleEndian.Uint64(req[20:]))
	m.mu.Lock()
	m.reqs = append(m.reqs, after)
	m.mu.Unlock()
	// Count whatever the reader sends afterwards: a bridge sends nothing
	// to a master of version 0, its hello and epoch to one of version 3.
	var helloSeen atomic.Bool
	go func() {
		buf := make([]byte, 4096)
		got := 0
		for {
			n, err := br.Read(buf)
			m.mu.Lock()
			m.extra += n
			m.recv = append(m.recv, buf[:n]...)
			got += n
			if got >= 2*protocol.ConfirmLen && !helloSeen.Load() {
				helloSeen.Store(true)
				close(m.changed)
				m.changed = make(chan struct{})
			}
			m.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	commitSent := int64(-1)
	pos := -1
	m.mu.Lock()
	if m.refuse != "" {
		msg := m.refuse
		m.mu.Unlock()
		c.Write(protocol.AppendReplyError(nil, msg))
		return
	}
	if after == 0 {
		pos = 0
	} else {
		for i, raw := range m.blocks {
			_, last, _, _ := binlog.DecodeSpan(raw)
			if last == after {
				pos = i + 1
				break
			}
		}
	}
	m.mu.Unlock()
	if pos < 0 {
		c.Write(protocol.AppendReplyError(nil, fmt.Sprintf("eventId %d does not end a block", after)))
		return
	}
	for {
		m.mu.Lock()
		blocks, changed, v3, cp, epoch := m.blocks, m.changed, m.v3, m.commit, m.epoch
		m.mu.Unlock()
		for ; pos < len(blocks); pos++ {
			f, _ := protocol.AppendReplicaFrame(nil, blocks[pos])
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(f); err != nil {
				return
			}
		}
		if v3 && helloSeen.Load() && cp != commitSent {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(protocol.AppendCommitFrame(nil, cp, epoch)); err != nil {
				return
			}
			commitSent = cp
		}
		select {
		case <-changed:
		case <-time.After(500 * time.Millisecond):
			if _, err := c.Write(protocol.AppendReplyAlive(nil)); err != nil {
				return
			}
		}
	}
}

// startNATS runs a JetStream server in a temp dir. port 0 picks one.
func startNATS(t testing.TB, port int, dir string) *natsserver.Server {
	t.Helper()
	if port == 0 {
		port = -1
	}
	if dir == "" {
		dir = t.TempDir()
	}
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func startKafka(t testing.TB) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// got is one mirrored message as read back from a target.
type got struct {
	Topic   string
	EventID int64
	Headers []protocol.KV // the smss record headers, decoded back
	Body    string
	Delay   string
}

// decodeBack turns a target message's headers into a got.
func decodeBack(t testing.TB, get func(string) (string, bool), all []protocol.KV, body []byte) got {
	t.Helper()
	mark, ok, err := ParseMark(get)
	if err != nil || !ok {
		t.Fatalf("mark: %v %v", ok, err)
	}
	topic, _ := get(HeaderTopic)
	g := got{Topic: topic, EventID: mark.EventID, Body: string(body)}
	g.Delay, _ = get(HeaderDelayEventID)
	if raw, ok := get(HeaderRaw); ok {
		if g.Headers, err = ParseRawHeaders(raw); err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, h := range all {
		if !isReserved(h.Key) {
			g.Headers = append(g.Headers, h)
		}
	}
	return g
}

// readNATS returns every message of the stream in stream order.
func readNATS(t testing.TB, url, stream string) []got {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []got
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var all []protocol.KV
		keys := make([]string, 0, len(msg.Header))
		for k := range msg.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			for _, v := range msg.Header[k] {
				all = append(all, protocol.KV{Key: k, Value: v})
			}
		}
		all = dropNATS(all)
		out = append(out, decodeBack(t, natsGet(msg.Header), all, msg.Data))
	}
	return out
}

// dropNATS removes the headers JetStream adds.
func dropNATS(h []protocol.KV) []protocol.KV {
	var out []protocol.KV
	for _, kv := range h {
		if !strings.HasPrefix(kv.Key, "Nats-") {
			out = append(out, kv)
		}
	}
	return out
}

// readKafka returns every record of the topics, per partition in order,
// partitions one after the other.
func readKafka(t testing.TB, brokers []string, topics ...string) []got {
	t.Helper()
	tg := NewKafkaTarget(KafkaConfig{Brokers: brokers})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tg.cl = cl
	tg.adm = kadm.NewClient(cl)
	offs, err := tg.offsets(ctx, topics)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := tg.read(ctx, offs)
	if err != nil {
		t.Fatal(err)
	}
	lanes := make([]string, 0, len(recs))
	for l := range recs {
		lanes = append(lanes, l)
	}
	sort.Strings(lanes)
	var out []got
	for _, l := range lanes {
		for _, r := range recs[l] {
			var all []protocol.KV
			for _, h := range r.Headers {
				all = append(all, protocol.KV{Key: h.Key, Value: string(h.Value)})
			}
			out = append(out, decodeBack(t, kafkaGet(r), all, r.Value))
		}
	}
	return out
}

// want lists the messages a history must produce on a target with filter f.
func want(t testing.TB, blocks [][]byte, f *Filter) []got {
	t.Helper()
	var out []got
	for _, raw := range blocks {
		b, _, err := binlog.DecodeBlock(raw)
		if err != nil {
			t.Fatal(err)
		}
		var recs []byte
		delay := ""
		switch b.Cmd {
		case binlog.CmdPub:
			recs = b.Payload
		case binlog.CmdDelayApply:
			recs = b.Payload[binlog.DelayPrefixLen:]
			delay = fmt.Sprint(binary.LittleEndian.Uint64(b.Payload[8:]))
		default:
			continue
		}
		if !f.Match(string(b.Topic)) {
			continue
		}
		id := b.EventID
		for len(recs) > 0 {
			r, n, err := protocol.ParseRecord(recs)
			if err != nil {
				t.Fatal(err)
			}
			recs = recs[n:]
			out = append(out, got{Topic: string(b.Topic), EventID: id, Headers: r.Headers, Body: string(r.Body), Delay: delay})
			id++
		}
	}
	return out
}

// byTopic groups messages per topic, keeping their order.
func byTopic(gs []got) map[string][]got {
	out := map[string][]got{}
	for _, g := range gs {
		out[g.Topic] = append(out[g.Topic], g)
	}
	return out
}

// sameHeaders compares headers as a multiset of pairs when the target
// cannot keep the order across keys (NATS), exactly otherwise.
func sameHeaders(a, b []protocol.KV, ordered bool) bool {
	if len(a) != len(b) {
		return false
	}
	if !ordered {
		a = append([]protocol.KV(nil), a...)
		b = append([]protocol.KV(nil), b...)
		less := func(s []protocol.KV) func(i, j int) bool {
			return func(i, j int) bool {
				if s[i].Key != s[j].Key {
					return s[i].Key < s[j].Key
				}
				return s[i].Value < s[j].Value
			}
		}
		sort.SliceStable(a, less(a))
		sort.SliceStable(b, less(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkMirror fails unless the target holds exactly the wanted messages:
// each once, in eventId order per topic, bodies and headers exact.
func checkMirror(t testing.TB, gotMsgs, wantMsgs []got, orderedHeaders bool) {
	t.Helper()
	g, w := byTopic(gotMsgs), byTopic(wantMsgs)
	if len(gotMsgs) != len(wantMsgs) {
		t.Errorf("target holds %d messages, want %d", len(gotMsgs), len(wantMsgs))
	}
	for topic, ws := range w {
		gs := g[topic]
		for i := 0; i < len(ws) || i < len(gs); i++ {
			switch {
			case i >= len(gs):
				t.Fatalf("topic %s: missing eventId %d (and %d more)", topic, ws[i].EventID, len(ws)-i-1)
			case i >= len(ws):
				t.Fatalf("topic %s: extra message eventId %d", topic, gs[i].EventID)
			case gs[i].EventID != ws[i].EventID:
				t.Fatalf("topic %s position %d: eventId %d, want %d", topic, i, gs[i].EventID, ws[i].EventID)
			case gs[i].Body != ws[i].Body || gs[i].Delay != ws[i].Delay || !sameHeaders(gs[i].Headers, ws[i].Headers, orderedHeaders):
				t.Fatalf("topic %s eventId %d: got %+v, want %+v", topic, ws[i].EventID, gs[i], ws[i])
			}
		}
	}
	for topic := range g {
		if _, ok := w[topic]; !ok {
			t.Fatalf("topic %s should not be mirrored", topic)
		}
	}
}

func decodeSpan(raw []byte) (binlog.Block, int64, int, error) { return binlog.DecodeSpan(raw) }

// freePort is a port reserved for this test process (smsstest.FreePort).
func freePort(t testing.TB) int {
	t.Helper()
	return smsstest.FreePort(t)
}

// listenFakeMaster serves blocks on a given address.
func listenFakeMaster(t testing.TB, addr string, blocks [][]byte) *fakeMaster {
	var ln net.Listener
	var err error
	smsstest.WaitFor(t, 10*time.Second, "listen "+addr, func() bool {
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	m := &fakeMaster{t: t, ln: ln, blocks: blocks, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go m.accept()
	t.Cleanup(m.close)
	return m
}
