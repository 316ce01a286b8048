package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"

	"github.com/smssmq/smss/protocol"
)

// replConfig writes a config for a server on a fixed port (a master must
// come back on the same port after a restart) with a short alive interval.
func replConfig(t *testing.T, dir string, port int, extra string) {
	t.Helper()
	cfg := fmt.Sprintf("host: 127.0.0.1\nport: %d\nlog:\n  path: stdout\n  sample: 0\nstore:\n  path: %s\n"+
		"  maxLogSize: 1048576\n  flushLevel: 1\ntimeout:\n  server:\n    alive: 300\n%s",
		port, filepath.Join(dir, "data"), extra)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a port reserved for this test process (smsstest.FreePort).
func freePort(t *testing.T) int {
	t.Helper()
	return smsstest.FreePort(t)
}

// startReplSlave runs a slave of the master on masterPort.
func startReplSlave(t *testing.T, dir string, masterPort int, event int64) *proc {
	t.Helper()
	return startArgs(t, dir, "-role", "slave", "-host", "127.0.0.1", "-port", strconv.Itoa(masterPort),
		"-event", strconv.FormatInt(event, 10))
}

// replBinlog concatenates a data directory's binlog files in id order.
func replBinlog(t testing.TB, dataDir string) []byte {
	t.Helper()
	dir := filepath.Join(dataDir, "binlog")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, e := range ents {
		if id, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".log"), 10, 64); err == nil && strings.HasSuffix(e.Name(), ".log") {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var out []byte
	for _, id := range ids {
		b, err := os.ReadFile(filepath.Join(dir, strconv.FormatInt(id, 10)+".log"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// waitReplicated waits until the slave's binlog equals the master's, and
// fails if the slave's binlog is ever not a prefix of the master's.
func waitReplicated(t *testing.T, masterData, slaveData string, slave *proc, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m, s := replBinlog(t, masterData), replBinlog(t, slaveData)
		if !bytes.HasPrefix(m, s) {
			t.Fatalf("the slave's binlog (%d bytes) is not a prefix of the master's (%d bytes); common prefix %d",
				len(s), len(m), replCommon(m, s))
		}
		if len(m) == len(s) && len(m) > 0 {
			return
		}
		if strings.Contains(slave.out.String(), "REPLICATION STOPPED") {
			t.Fatalf("replication stopped:\n%s", tail(slave.out.String(), 4000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slave did not catch up within %v: master %d bytes, slave %d\n%s", timeout, len(m), len(s),
				tail(slave.out.String(), 4000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func replCommon(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

var replWho atomic.Int64

// subscribeAll subscribes to topic from eventId 0 and returns
// "eventId:record" for every message until the server sends an alive
// (it has nothing more), then ends the subscription with ack 1.
func subscribeAll(t *testing.T, addr, topic string) []string {
	t.Helper()
	c := dial(t, addr)
	defer c.c.Close()
	who := fmt.Sprintf("repl-check-%d", replWho.Add(1))
	if err := c.sub(topic, who, 0, 100, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		u, err := c.next(10 * time.Second)
		if err != nil {
			t.Fatalf("subscribe %s on %s: %v", topic, addr, err)
		}
		switch u.code {
		case protocol.StatusAlive:
			return out
		case protocol.StatusOK:
			for _, m := range u.msgs {
				out = append(out, fmt.Sprintf("%d:%x", m.EventID, m.Raw))
			}
			if err := c.ack(0); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("subscribe %s on %s: %v", topic, addr, u)
		}
	}
}
