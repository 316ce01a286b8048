package bridge

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// TestBridgeReadCommitted (issue 32): a master with syncSlaves 1 and
// onSyncTimeout fail, its slave behind a proxy, the real smss-bridge
// mirroring into JetStream. With the slave's link paused, writes are
// refused "write not confirmed" and the bridge receives them but holds
// them: JetStream keeps only the confirmed history. Then either the link
// comes back, the slave confirms and the held writes are mirrored once
// each, or the master is killed and the slave, which never got them,
// restarts as the master on the master's port: the target then holds
// exactly the promoted node's history, without the dropped writes.
func TestBridgeReadCommitted(t *testing.T) {
	for _, dropped := range []bool{false, true} {
		name := "slave confirms"
		if dropped {
			name = "failover drops them"
		}
		t.Run(name, func(t *testing.T) { bridgeReadCommitted(t, dropped) })
	}
}

// bridgeMetrics reads the bridge's /metrics (no labels are needed here).
func bridgeMetrics(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil && i > 0 {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

func bridgeReadCommitted(t *testing.T, dropped bool) {
	bin := buildBridge(t)
	port := kit.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	mdir, sdir := t.TempDir(), t.TempDir()
	kit.ReplConfig(t, mdir, port, kit.SemiSyncConfig("fail"))
	master := kit.StartArgs(t, mdir, "-role", "master")
	madm := kit.AdminAddr(t, master)
	proxy := smsstest.NewProxy(t, addr)
	kit.ReplConfig(t, sdir, kit.FreePort(t), "")
	slave := kit.StartReplSlave(t, sdir, proxy.Port(), 0)
	kit.WaitConfirming(t, madm, 1)

	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(ns.Shutdown)
	read := func() []mirrored { return readJetStream(t, ns.ClientURL(), "SMSS") }
	bodies := func() []string {
		var out []string
		for _, m := range read() {
			out = append(out, m.body)
		}
		return out
	}

	metricsAddr := fmt.Sprintf("127.0.0.1:%d", kit.FreePort(t))
	cfgPath := filepath.Join(t.TempDir(), "bridge.yaml")
	os.WriteFile(cfgPath, []byte("source:\n  minBackoffMs: 20\n  maxBackoffMs: 500\n  silenceMs: 2000\n  statusIntervalMs: 200\n"), 0o644)
	out := &smsstest.SyncBuffer{}
	br := startBridge(t, bin, out, "--config", cfgPath, "--master", addr, "--nats", ns.ClientURL(),
		"--topics", "rc", "--metrics-addr", metricsAddr)
	t.Cleanup(func() {
		br.kill()
		if t.Failed() {
			t.Logf("bridge output:\n%s", kit.Tail(out.String(), 6000))
		}
	})

	pub := kit.Dial(t, addr)
	if err := pub.Create("rc", 0); err != nil {
		t.Fatal(err)
	}
	var confirmed []string
	for i := range 5 {
		body := fmt.Sprintf("ok-%d", i)
		if err := pub.Pub("rc", kit.Record(nil, body)); err != nil {
			t.Fatalf("healthy write %d: %v", i, err)
		}
		confirmed = append(confirmed, body)
	}
	if !smsstest.Poll(20*time.Second, func() bool { return len(read()) == len(confirmed) }) {
		t.Fatalf("the confirmed writes never reached JetStream: %v", bodies())
	}

	// The slave's link pauses: it neither receives nor confirms.
	proxy.Pause()
	var refused []string
	for i := range 3 {
		body := fmt.Sprintf("unconfirmed-%d", i)
		err := pub.Pub("rc", kit.Record(nil, body))
		var be *protocol.BizError
		if !errors.As(err, &be) || !strings.HasPrefix(be.Msg, "write not confirmed") {
			t.Fatalf("write %q with the slave cut off: %v, want write not confirmed", body, err)
		}
		refused = append(refused, body)
	}
	var st struct {
		LastEventID int64 `json:"lastEventId"`
	}
	kit.AdminJSON(t, madm, "/api/replication", &st)
	// The bridge has received every refused write and mirrored everything
	// before them: what it did not mirror by then, it holds.
	var m map[string]float64
	if !smsstest.Poll(20*time.Second, func() bool {
		m, err = bridgeMetrics(metricsAddr)
		return err == nil && m["smss_bridge_received_event_id"] == float64(st.LastEventID) &&
			m["smss_bridge_mirrored_event_id"] >= float64(st.LastEventID-int64(len(refused)))
	}) {
		t.Fatalf("the bridge never received the refused writes (master at %d): %v %v", st.LastEventID, m, err)
	}
	if got := bodies(); strings.Join(got, ",") != strings.Join(confirmed, ",") {
		t.Fatalf("JetStream holds %v while %v are refused as not confirmed; want only %v", got, refused, confirmed)
	}
	if m["smss_bridge_held_blocks"] != float64(len(refused)) || m["smss_bridge_commit_point"] != float64(st.LastEventID-int64(len(refused))) {
		t.Fatalf("bridge metrics held_blocks %v commit_point %v, want %d held above %d", m["smss_bridge_held_blocks"],
			m["smss_bridge_commit_point"], len(refused), st.LastEventID-int64(len(refused)))
	}

	data := filepath.Join(mdir, "data")
	if dropped {
		// The master dies with the writes only it has; the slave, which
		// never received them, restarts as the master on its port.
		master.Kill()
		slave.Term()
		if b := string(kit.ReplBinlog(t, filepath.Join(sdir, "data"))); strings.Contains(b, refused[0]) {
			t.Fatal("the slave received a refused write through the paused link")
		}
		kit.ReplConfig(t, sdir, port, "")
		kit.StartArgs(t, sdir, "-role", "master")
		data = filepath.Join(sdir, "data")
		pub = kit.Dial(t, addr)
	} else {
		proxy.Restore()
	}
	if !smsstest.Poll(20*time.Second, func() bool { return pub.Pub("rc", kit.Record(nil, "after")) == nil }) {
		t.Fatal("writes never confirmed again")
	}
	want, _, _ := expectedFromBinlog(t, kit.ReplBinlog(t, data), func(s string) bool { return s == "rc" })
	if !waitCaughtUp(30*time.Second, int64(len(want)), func() int64 { return int64(len(read())) }) {
		t.Fatalf("the target did not catch up: %v, want %d messages", bodies(), len(want))
	}
	compareMirror(t, read(), want, false)
	got := strings.Join(bodies(), ",")
	for _, b := range refused {
		if n := strings.Count(got+",", b+","); (dropped && n != 0) || (!dropped && n != 1) {
			t.Fatalf("JetStream holds %q %d times (%s)", b, n, got)
		}
	}
	select {
	case <-br.exited:
		t.Fatalf("the bridge exited: %v", br.err)
	default:
	}
	t.Logf("JetStream: %s", got)
}
