package bridge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/bridge"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// buildBridge builds cmd/smss-bridge once per test binary.
func buildBridge(t *testing.T) string { return smsstest.Binary(t, "./cmd/smss-bridge") }

// bridgeProc is a running smss-bridge process.
type bridgeProc struct {
	cmd    *exec.Cmd
	out    *smsstest.SyncBuffer
	exited chan struct{}
	err    error
}

func startBridge(t *testing.T, bin string, out *smsstest.SyncBuffer, args ...string) *bridgeProc {
	t.Helper()
	p := &bridgeProc{out: out, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p
}

func (p *bridgeProc) kill() {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// mirrored is one message as the target holds it.
type mirrored struct {
	topic   string
	eventID int64
	headers []protocol.KV
	body    string
}

func (m mirrored) String() string {
	return fmt.Sprintf("%s#%d %q %q", m.topic, m.eventID, m.headers, m.body)
}

// fromTarget decodes a target message; all are its headers minus the
// target's own.
func fromTarget(t *testing.T, get func(string) (string, bool), all []protocol.KV, body []byte) mirrored {
	t.Helper()
	mark, ok, err := bridge.ParseMark(get)
	if err != nil || !ok {
		t.Fatalf("a target message without a valid mark: %v %v", ok, err)
	}
	topic, _ := get(bridge.HeaderTopic)
	m := mirrored{topic: topic, eventID: mark.EventID, body: string(body)}
	if raw, ok := get(bridge.HeaderRaw); ok {
		if m.headers, err = bridge.ParseRawHeaders(raw); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, h := range all {
		switch strings.ToLower(h.Key) {
		case bridge.HeaderEventID, bridge.HeaderTimestamp, bridge.HeaderTopic, bridge.HeaderBlock, bridge.HeaderSafe, bridge.HeaderDelayEventID:
			continue
		}
		if strings.HasPrefix(h.Key, "Nats-") {
			continue
		}
		m.headers = append(m.headers, h)
	}
	return m
}

// expectedFromBinlog lists the messages of the mirrored topics in a binlog.
func expectedFromBinlog(t *testing.T, raw []byte, match func(string) bool) (msgs []mirrored, delays, applies int) {
	t.Helper()
	for len(raw) > 0 {
		b, n, err := binlog.DecodeBlock(raw)
		if err != nil {
			t.Fatalf("binlog: %v", err)
		}
		raw = raw[n:]
		var recs []byte
		switch b.Cmd {
		case binlog.CmdPub:
			recs = b.Payload
		case binlog.CmdDelay:
			delays++
		case binlog.CmdDelayApply:
			applies++
			recs = b.Payload[binlog.DelayPrefixLen:]
		}
		if recs == nil || !match(string(b.Topic)) {
			continue
		}
		id := b.EventID
		for len(recs) > 0 {
			r, n, err := protocol.ParseRecord(recs)
			if err != nil {
				t.Fatal(err)
			}
			recs = recs[n:]
			msgs = append(msgs, mirrored{topic: string(b.Topic), eventID: id, headers: r.Headers, body: string(r.Body)})
			id++
		}
	}
	return msgs, delays, applies
}

func sortedHeaders(h []protocol.KV) []protocol.KV {
	h = append([]protocol.KV(nil), h...)
	sort.SliceStable(h, func(i, j int) bool {
		if h[i].Key != h[j].Key {
			return h[i].Key < h[j].Key
		}
		return h[i].Value < h[j].Value
	})
	return h
}

// compareMirror checks that got holds exactly want: once each, in eventId
// order per topic, bodies and headers byte-exact (header order across
// keys only where the target keeps it).
func compareMirror(t *testing.T, got, want []mirrored, orderedHeaders bool) {
	t.Helper()
	group := func(ms []mirrored) map[string][]mirrored {
		out := map[string][]mirrored{}
		for _, m := range ms {
			out[m.topic] = append(out[m.topic], m)
		}
		return out
	}
	g, w := group(got), group(want)
	for topic := range g {
		if _, ok := w[topic]; !ok {
			t.Fatalf("topic %s is in the target but should not be mirrored", topic)
		}
	}
	for topic, ws := range w {
		gs := g[topic]
		for i := 0; i < len(ws) || i < len(gs); i++ {
			switch {
			case i >= len(gs):
				t.Fatalf("topic %s: the target lacks eventId %d and %d more", topic, ws[i].eventID, len(ws)-i-1)
			case i >= len(ws):
				t.Fatalf("topic %s: extra message %v", topic, gs[i])
			}
			a, b := gs[i], ws[i]
			ha, hb := a.headers, b.headers
			if !orderedHeaders {
				ha, hb = sortedHeaders(ha), sortedHeaders(hb)
			}
			if a.eventID != b.eventID || a.body != b.body || fmt.Sprint(ha) != fmt.Sprint(hb) {
				t.Fatalf("topic %s position %d: target has %v, binlog has %v", topic, i, a, b)
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("target holds %d messages, want %d", len(got), len(want))
	}
}

func readJetStream(t *testing.T, url, stream string) []mirrored {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []mirrored
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		msg, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var all []protocol.KV
		for k, vs := range msg.Header {
			for _, v := range vs {
				all = append(all, protocol.KV{Key: k, Value: v})
			}
		}
		get := func(k string) (string, bool) {
			v := msg.Header.Values(k)
			if len(v) == 0 {
				return "", false
			}
			return v[0], true
		}
		out = append(out, fromTarget(t, get, all, msg.Data))
	}
	return out
}

func readKafkaTopics(t *testing.T, brokers []string, prefix string) []mirrored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for name := range td {
		if strings.HasPrefix(name, prefix) {
			topics = append(topics, name)
		}
	}
	if len(topics) == 0 {
		return nil
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	parts := map[string]map[int32]kgo.Offset{}
	remaining := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if parts[o.Topic] == nil {
				parts[o.Topic] = map[int32]kgo.Offset{}
			}
			parts[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
			remaining[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	})
	if len(parts) == 0 {
		return nil
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(parts))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var out []mirrored
	done := map[string]bool{}
	for len(done) < len(remaining) {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("reading Kafka timed out")
		}
		fs.EachRecord(func(r *kgo.Record) {
			lane := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			if done[lane] {
				return
			}
			var all []protocol.KV
			get := func(k string) (string, bool) {
				for _, h := range r.Headers {
					if h.Key == k {
						return string(h.Value), true
					}
				}
				return "", false
			}
			for _, h := range r.Headers {
				all = append(all, protocol.KV{Key: h.Key, Value: string(h.Value)})
			}
			out = append(out, fromTarget(t, get, all, r.Value))
			if r.Offset >= remaining[lane]-1 {
				done[lane] = true
			}
		})
	}
	return out
}

var loadTopics = []string{"mir.a", "mir.b", "mir.skip1", "other"}

// startBridgeLoad creates the load topics on the master at addr and starts
// three bridgeLoad workers; stopLoad stops them and waits until they are
// done. load.addr may be re-pointed (a failover) while they run.
func startBridgeLoad(t *testing.T, addr string) (load *bridgeLoad, stopLoad func()) {
	t.Helper()
	setup := kit.Dial(t, addr)
	for _, topic := range loadTopics {
		if err := setup.Create(topic, 0); err != nil {
			t.Fatal(err)
		}
	}
	load = &bridgeLoad{}
	load.addr.Store(addr)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			load.run(t, stop, seed)
		}(int64(i + 1))
	}
	var once sync.Once
	return load, func() { once.Do(func() { close(stop); wg.Wait() }) }
}

// bridgeLoad publishes a mix to the master at addr until stop is closed
// or pause is set: singles, batches, delays, and short-lived topics that
// are created, written and deleted.
type bridgeLoad struct {
	addr   atomic.Value
	paused atomic.Bool
	idle   atomic.Int32 // workers that saw paused and hold no request
	n      atomic.Int64
	errs   atomic.Int64
}

func (l *bridgeLoad) run(t *testing.T, stop <-chan struct{}, seed int64) {
	rnd := rand.New(rand.NewSource(seed))
	var c *kit.Client
	connect := func() bool {
		addr, _ := l.addr.Load().(string)
		cn, err := dialErr(addr)
		if err != nil {
			return false
		}
		c = cn
		return true
	}
	tmp := 0
	for i := 0; ; i++ {
		select {
		case <-stop:
			if c != nil {
				c.C.Close()
			}
			return
		default:
		}
		if l.paused.Load() {
			if c != nil {
				c.C.Close()
				c = nil
			}
			l.idle.Add(1)
			for l.paused.Load() {
				select {
				case <-stop:
				case <-time.After(5 * time.Millisecond):
				}
			}
			l.idle.Add(-1)
			continue
		}
		if c == nil && !connect() {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		topic := loadTopics[rnd.Intn(len(loadTopics))]
		rec := func(j int) []byte {
			hs := [][2]string{{"traceId", fmt.Sprintf("t%d-%d", i, j)}}
			switch rnd.Intn(4) {
			case 0:
				hs = append(hs, [2]string{"bin", "a\r\nb\x00\xff"})
			case 1:
				hs = append(hs, [2]string{"k", "v1"}, [2]string{"k", "v2"})
			}
			return kit.Record(hs, fmt.Sprintf("%s-%d-%d-%s", topic, i, j, strings.Repeat("x", rnd.Intn(200))))
		}
		var err error
		switch k := rnd.Intn(10); {
		case k < 5:
			err = c.Pub(topic, rec(0))
		case k < 8:
			var recs [][]byte
			for j := 0; j < 2+rnd.Intn(4); j++ {
				recs = append(recs, rec(j))
			}
			err = c.Pub(topic, recs...)
		case k < 9:
			err = c.Delay(topic, int64(1000+rnd.Intn(500)), rec(0))
		default:
			name := fmt.Sprintf("mir.tmp%d", tmp)
			tmp++
			if err = c.Create(name, 0); err == nil {
				if err = c.Pub(name, rec(0), rec(1)); err == nil {
					err = c.Del(name)
				}
			}
		}
		if err != nil {
			l.errs.Add(1)
			c.C.Close()
			c = nil
			continue
		}
		l.n.Add(1)
	}
}

// TestBridgeKillAndFailover: a master under mixed load with a slave; the
// bridge mirrors "mir.*" and is SIGKILLed and restarted at random moments;
// once, the master is killed and its slave restarted as the master on the
// same port. Afterwards the target holds every message of the mirrored
// topics exactly once, in eventId order per topic, bytes exact.
// SMSS_BRIDGE_LONG=1 runs the load for a minute instead of seconds.
func TestBridgeKillAndFailover(t *testing.T) {
	t.Parallel() // long, mostly waiting on its faults; owns its ports and directories
	for _, target := range []string{"jetstream", "kafka"} {
		t.Run(target, func(t *testing.T) { bridgeKillAndFailover(t, target) })
	}
}

func bridgeKillAndFailover(t *testing.T, target string) {
	bin := buildBridge(t)
	loadFor := 4 * time.Second
	if os.Getenv("SMSS_BRIDGE_LONG") != "" {
		loadFor = 60 * time.Second
	}
	port := kit.FreePort(t)
	mdir, sdir := t.TempDir(), t.TempDir()
	kit.ReplConfig(t, mdir, port, "")
	master := kit.StartArgs(t, mdir, "-role", "master")
	kit.ReplConfig(t, sdir, kit.FreePort(t), "")
	slave := kit.StartReplSlave(t, sdir, port, 0)
	addr := fmt.Sprintf("127.0.0.1:%d", port)

	var args []string
	var read func() []mirrored
	ordered := false
	switch target {
	case "jetstream":
		ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		if !ns.ReadyForConnections(20 * time.Second) {
			t.Fatal("nats not ready")
		}
		t.Cleanup(ns.Shutdown)
		args = []string{"--nats", ns.ClientURL()}
		read = func() []mirrored { return readJetStream(t, ns.ClientURL(), "SMSS") }
	case "kafka":
		kc, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(kc.Close)
		args = []string{"--kafka", strings.Join(kc.ListenAddrs(), ",")}
		read = func() []mirrored { return readKafkaTopics(t, kc.ListenAddrs(), "smss.") }
		ordered = true
	}
	cfgPath := filepath.Join(t.TempDir(), "bridge.yaml")
	os.WriteFile(cfgPath, []byte("source:\n  minBackoffMs: 20\n  maxBackoffMs: 500\n  silenceMs: 2000\n"+
		"nats:\n  maxInFlight: 64\nkafka:\n  maxInFlight: 64\n  partitions: 2\nmetrics:\n  logIntervalSec: 1\n"), 0o644)
	args = append(args, "--config", cfgPath, "--master", addr, "--topics", "mir.*", "--exclude", "mir.skip*")

	out := &smsstest.SyncBuffer{}
	var bmu sync.Mutex
	br := startBridge(t, bin, out, args...)
	t.Cleanup(func() {
		bmu.Lock()
		br.kill()
		bmu.Unlock()
		if t.Failed() {
			t.Logf("bridge output:\n%s", kit.Tail(out.String(), 6000))
		}
	})

	load, stopLoad := startBridgeLoad(t, addr)
	// The killer: SIGKILL the bridge at random moments and restart it.
	kills := 0
	killStop := make(chan struct{})
	killDone := make(chan struct{})
	var stopKiller sync.Once
	endKiller := func() {
		stopKiller.Do(func() { close(killStop) })
		<-killDone
	}
	t.Cleanup(endKiller)
	go func() {
		defer close(killDone)
		rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
		for {
			select {
			case <-killStop:
				return
			case <-time.After(time.Duration(150+rnd.Intn(600)) * time.Millisecond):
			}
			bmu.Lock()
			select {
			case <-br.exited:
				bmu.Unlock()
				t.Errorf("the bridge exited by itself: %v", br.err)
				return
			default:
			}
			br.kill()
			kills++
			br = startBridge(t, bin, out, args...)
			bmu.Unlock()
		}
	}()

	time.Sleep(loadFor / 2)
	// Failover, today's way: writes stop, the slave catches up, the master
	// is killed and the slave restarts as the master on its port.
	load.paused.Store(true)
	if !smsstest.Poll(30*time.Second, func() bool { return load.idle.Load() == 3 }) {
		t.Fatal("the load did not pause")
	}
	// Scheduled delays still fire while the load pauses: wait for the last
	// one, so that the master stops writing, then for the slave.
	all := func(string) bool { return true }
	if !smsstest.Poll(30*time.Second, func() bool {
		_, d, a := expectedFromBinlog(t, kit.ReplBinlog(t, filepath.Join(mdir, "data")), all)
		return d == a
	}) {
		t.Fatal("the master's delayed messages did not fire")
	}
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), slave, 60*time.Second)
	master.Kill()
	slave.Term()
	kit.ReplConfig(t, sdir, port, "")
	promoted := kit.StartArgs(t, sdir, "-role", "master")
	_ = promoted
	load.paused.Store(false)
	time.Sleep(loadFor / 2)
	stopLoad()
	endKiller()

	// Every delay must have fired before the final comparison.
	var want []mirrored
	if !smsstest.Poll(60*time.Second, func() bool {
		msgs, delays, applies := expectedFromBinlog(t, kit.ReplBinlog(t, filepath.Join(sdir, "data")), func(s string) bool {
			return strings.HasPrefix(s, "mir.") && !strings.HasPrefix(s, "mir.skip")
		})
		want = msgs
		return delays == applies
	}) {
		t.Fatal("delayed messages did not all fire")
	}
	if !waitCaughtUp(30*time.Second, int64(len(want)), func() int64 { return int64(len(read())) }) {
		t.Fatalf("the target did not catch up: %d of %d messages", len(read()), len(want))
	}
	got := read()
	compareMirror(t, got, want, ordered)
	bmu.Lock()
	exited := false
	select {
	case <-br.exited:
		exited = true
	default:
	}
	bmu.Unlock()
	if exited {
		t.Fatalf("the bridge exited: %v", br.err)
	}
	if kills < 3 || load.n.Load() < 100 || load.errs.Load() > load.n.Load()/10 {
		t.Fatalf("too little happened: %d kills, %d requests", kills, load.n.Load())
	}
	t.Logf("%s: %d messages mirrored exactly once across %d bridge kills and one failover (%d requests, %d failed during the failover)",
		target, len(want), kills, load.n.Load(), load.errs.Load())
}

func dialErr(addr string) (*kit.Client, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &kit.Client{C: c, R: bufio.NewReader(c)}, nil
}

// waitCaughtUp waits until count() reaches want, for as long as it keeps
// growing: it gives up only when count stands still for stall. A mirror
// that catches up slowly on a loaded machine is not a failure; one that
// stopped is.
func waitCaughtUp(stall time.Duration, want int64, count func() int64) bool {
	last, since := int64(-1), time.Now()
	for {
		n := count()
		if n >= want {
			return true
		}
		if n > last {
			last, since = n, time.Now()
		} else if time.Since(since) > stall {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
