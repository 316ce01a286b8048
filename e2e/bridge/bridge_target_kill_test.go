package bridge

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

// natsServer is the nats-server of the module's go.mod, built once per test
// binary, so that the target can be killed like a real deployment's.

func buildNATS(t *testing.T) string { return smsstest.Binary(t, "github.com/nats-io/nats-server/v2") }

// natsProc is a nats-server process with JetStream on a fixed port and
// store dir, so that a restart finds the stream where the kill left it.
type natsProc struct {
	bin, storeDir string
	port          int
	out           *smsstest.SyncBuffer
	p             *bridgeProc
}

func (n *natsProc) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// start runs the server and waits until JetStream answers (and, once the
// stream exists, until the stream is recovered).
func (n *natsProc) start(t *testing.T) {
	t.Helper()
	n.p = startBridge(t, n.bin, n.out, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-js", "-sd", n.storeDir)
	ok := smsstest.Poll(30*time.Second, func() bool {
		select {
		case <-n.p.exited:
			return true
		default:
		}
		nc, err := nats.Connect(n.url(), nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			return false
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	})
	select {
	case <-n.p.exited:
		t.Fatalf("nats-server exited during start-up: %v\n%s", n.p.err, kit.Tail(n.out.String(), 4000))
	default:
	}
	if !ok {
		t.Fatalf("nats-server with JetStream not ready within 30 s:\n%s", kit.Tail(n.out.String(), 4000))
	}
}

// TestBridgeTargetKill: a real master under mixed load, the real
// smss-bridge, and JetStream in its own nats-server process, SIGKILLed at
// random moments and restarted on the same store dir and port. The bridge
// must resume from what the stream holds after each restart (the tail of
// what it had sent may be missing, or present without an ack): afterwards
// the stream holds every message of the mirrored topics exactly once, in
// eventId order per topic, bytes exact.
// It runs twice: with the default duplicate window, where JetStream's
// Nats-Msg-Id dedupe backs up the bridge's resume, and with a 1 s window,
// where re-sent messages are older than the window, so the bridge's own
// resume from the stream's tail must be exact.
// SMSS_BRIDGE_TARGET_KILLS=N kills the target N times (default 3) over a
// proportionally longer load.
func TestBridgeTargetKill(t *testing.T) {
	t.Parallel() // long, mostly waiting on its faults; owns its ports and directories
	for _, tc := range []struct {
		name      string
		windowSec int
	}{
		{"dedupeWindow120s", 120},
		{"dedupeWindow1s", 1},
	} {
		t.Run(tc.name, func(t *testing.T) { bridgeTargetKill(t, tc.windowSec) })
	}
}

func bridgeTargetKill(t *testing.T, windowSec int) {
	kills := 3
	if v := os.Getenv("SMSS_BRIDGE_TARGET_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SMSS_BRIDGE_TARGET_KILLS=%q: want a positive number", v)
		}
		kills = n
	}
	bin := buildBridge(t)
	ns := &natsProc{bin: buildNATS(t), storeDir: t.TempDir(), port: kit.FreePort(t), out: &smsstest.SyncBuffer{}}
	ns.start(t)
	var nmu sync.Mutex
	t.Cleanup(func() {
		nmu.Lock()
		ns.p.kill()
		nmu.Unlock()
		if t.Failed() {
			t.Logf("nats-server output:\n%s", kit.Tail(ns.out.String(), 3000))
		}
	})

	port := kit.FreePort(t)
	mdir := t.TempDir()
	kit.ReplConfig(t, mdir, port, "")
	kit.StartArgs(t, mdir, "-role", "master")
	addr := fmt.Sprintf("127.0.0.1:%d", port)

	cfgPath := filepath.Join(t.TempDir(), "bridge.yaml")
	// A short ack timeout: acks outstanding at a kill fail at once anyway
	// (the connection drops); fast backoff so a restart is found quickly.
	if err := os.WriteFile(cfgPath, []byte("source:\n  minBackoffMs: 20\n  maxBackoffMs: 300\n"+
		fmt.Sprintf("nats:\n  maxInFlight: 64\n  fileStorage: true\n  ackTimeoutMs: 3000\n  duplicateWindowSec: %d\n", windowSec)+
		"metrics:\n  logIntervalSec: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--nats", ns.url(), "--config", cfgPath, "--master", addr, "--topics", "mir.*", "--exclude", "mir.skip*"}
	out := &smsstest.SyncBuffer{}
	br := startBridge(t, bin, out, args...)
	t.Cleanup(func() {
		br.kill()
		if t.Failed() {
			t.Logf("bridge output:\n%s", kit.Tail(out.String(), 6000))
		}
	})

	load, stopLoad := startBridgeLoad(t, addr)
	// Let the bridge create the stream and mirror something first, so the
	// first kill hits a stream with content.
	if !smsstest.Poll(30*time.Second, func() bool { return streamMsgs(ns.url()) > 0 }) {
		stopLoad()
		t.Fatal("the bridge mirrored nothing before the first kill")
	}

	// The killer: SIGKILL the target at random moments under load (the
	// bridge has publishes in flight) and restart it on the same store.
	rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
	var held []uint64 // the stream's message count seen after each restart
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(200+rnd.Intn(700)) * time.Millisecond)
		select {
		case <-br.exited:
			t.Fatalf("the bridge exited by itself: %v", br.err)
		default:
		}
		resumed := strings.Count(out.String(), "msg=resuming")
		nmu.Lock()
		ns.p.kill()
		// Down for a moment: the bridge's reconnects meet a refused port.
		// With the short window, down for longer than the window: what
		// the bridge had in flight at the kill is then too old for
		// JetStream's dedupe when it is sent again.
		down := time.Duration(rnd.Intn(300)) * time.Millisecond
		if windowSec == 1 {
			down += 1100 * time.Millisecond
		}
		time.Sleep(down)
		ns.start(t)
		nmu.Unlock()
		held = append(held, streamMsgs(ns.url()))
		// The next kill must hit a session on the restarted server, not
		// the bridge's backoff from this one.
		if !smsstest.Poll(30*time.Second, func() bool { return strings.Count(out.String(), "msg=resuming") > resumed }) {
			t.Fatalf("the bridge did not resume within 30 s of restart %d", k+1)
		}
	}
	// Load continues a little after the last restart, then stops.
	time.Sleep(time.Second)
	stopLoad()

	var want []mirrored
	if !smsstest.Poll(60*time.Second, func() bool {
		msgs, delays, applies := expectedFromBinlog(t, kit.ReplBinlog(t, filepath.Join(mdir, "data")), func(s string) bool {
			return strings.HasPrefix(s, "mir.") && !strings.HasPrefix(s, "mir.skip")
		})
		want = msgs
		return delays == applies
	}) {
		t.Fatal("delayed messages did not all fire")
	}
	read := func() []mirrored { return readJetStream(t, ns.url(), "SMSS") }
	if !waitCaughtUp(30*time.Second, int64(len(want)), func() int64 { return int64(len(read())) }) {
		t.Fatalf("the target did not catch up: %d of %d messages", len(read()), len(want))
	}
	compareMirror(t, read(), want, false)
	select {
	case <-br.exited:
		t.Fatalf("the bridge exited: %v", br.err)
	default:
	}
	// Every kill must have cost the bridge its session: it resumed from the
	// stream once at start and once after each restart at least.
	if n := strings.Count(out.String(), "msg=resuming"); n < kills+1 {
		t.Fatalf("the bridge resumed %d times over %d target kills", n, kills)
	}
	if load.n.Load() < 100 {
		t.Fatalf("too little load: %d requests", load.n.Load())
	}
	t.Logf("%d messages mirrored exactly once across %d nats-server kills (stream held %v after the restarts; %d requests)",
		len(want), kills, held, load.n.Load())
}

// streamMsgs is how many messages stream SMSS holds now (0 if it cannot
// tell).
func streamMsgs(url string) uint64 {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return 0
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "SMSS")
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}
