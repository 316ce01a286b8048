package kit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// ReplConfig writes a config for a server on a fixed port (a master must
// come back on the same port after a restart) with a short alive interval.
func ReplConfig(t *testing.T, dir string, port int, extra string) {
	t.Helper()
	ReplConfigWith(t, dir, port, ReplDefaults, extra)
}

// ReplOptions are the settings of ReplConfigWith that tests vary.
type ReplOptions struct {
	Flush   int // store.flushLevel
	AliveMs int // timeout.server.alive; 0 leaves the server's default (30 s)
}

// ReplDefaults are ReplConfig's settings: flushLevel 1, and alive frames
// every 300 ms so that idle streams show their state quickly.
var ReplDefaults = ReplOptions{Flush: 1, AliveMs: 300}

// ReplConfigWith is ReplConfig with o's settings.
func ReplConfigWith(t *testing.T, dir string, port int, o ReplOptions, extra string) {
	t.Helper()
	alive := ""
	if o.AliveMs > 0 {
		alive = fmt.Sprintf("timeout:\n  server:\n    alive: %d\n", o.AliveMs)
	}
	cfg := fmt.Sprintf("host: 127.0.0.1\nport: %d\nlog:\n  path: stdout\n  sample: 0\nstore:\n  path: %s\n"+
		"  maxLogSize: 1048576\n  flushLevel: %d\n%s%s",
		port, filepath.Join(dir, "data"), o.Flush, alive, extra)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FreePort returns a port reserved for this test process (smsstest.FreePort).
func FreePort(t *testing.T) int {
	t.Helper()
	return smsstest.FreePort(t)
}

// StartReplSlave runs a slave of the master on masterPort.
func StartReplSlave(t *testing.T, dir string, masterPort int, event int64) *Proc {
	t.Helper()
	return StartArgs(t, dir, "-role", "slave", "-host", "127.0.0.1", "-port", strconv.Itoa(masterPort),
		"-event", strconv.FormatInt(event, 10))
}

// ReplBinlog concatenates a data directory's binlog files in id order.
func ReplBinlog(t testing.TB, dataDir string) []byte {
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

// WaitReplicated waits until the slave's binlog equals the master's, and
// fails if the slave's binlog is ever not a prefix of the master's.
func WaitReplicated(t *testing.T, masterData, slaveData string, slave *Proc, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m, s := ReplBinlog(t, masterData), ReplBinlog(t, slaveData)
		if !bytes.HasPrefix(m, s) {
			t.Fatalf("the slave's binlog (%d bytes) is not a prefix of the master's (%d bytes); common prefix %d",
				len(s), len(m), ReplCommon(m, s))
		}
		if len(m) == len(s) && len(m) > 0 {
			return
		}
		if strings.Contains(slave.Out.String(), "REPLICATION STOPPED") {
			t.Fatalf("replication stopped:\n%s", Tail(slave.Out.String(), 4000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slave did not catch up within %v: master %d bytes, slave %d\n%s", timeout, len(m), len(s),
				Tail(slave.Out.String(), 4000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ReplCommon is the length of the common prefix of a and b, where two
// binlogs part.
func ReplCommon(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// Tail is the last n bytes of s (a process's output), for failure
// messages that must stay readable.
func Tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// replWho numbers the subscribers that check replication, so that each
// has its own name.
var replWho atomic.Int64

// SubscribeAll subscribes to topic from eventId 0 and returns
// "eventId:record" for every message until the server sends an alive
// (it has nothing more), then ends the subscription with ack 1.
func SubscribeAll(t *testing.T, addr, topic string) []string {
	t.Helper()
	c := Dial(t, addr)
	defer c.C.Close()
	who := fmt.Sprintf("repl-check-%d", replWho.Add(1))
	if err := c.Sub(topic, who, 0, 100, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		u, err := c.Next(10 * time.Second)
		if err != nil {
			t.Fatalf("subscribe %s on %s: %v", topic, addr, err)
		}
		switch u.Code {
		case protocol.StatusAlive:
			return out
		case protocol.StatusOK:
			for _, m := range u.Msgs {
				out = append(out, fmt.Sprintf("%d:%x", m.EventID, m.Raw))
			}
			if err := c.Ack(0); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("subscribe %s on %s: %v", topic, addr, u)
		}
	}
}

// ReplPublish publishes total messages on topics from 4 connections,
// batches of 1–10 records, and returns once all are acknowledged.
func ReplPublish(t *testing.T, addr string, topics []string, total int, tag string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	per := total / 4
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			c := Dial(t, addr)
			for i := 0; i < per; {
				n := min(1+i%10, per-i)
				recs := make([][]byte, n)
				for j := range recs {
					recs[j] = Record([][2]string{{"id", fmt.Sprintf("%s-%d-%d", tag, g, i+j)}},
						strings.Repeat("p", (i+j)%300))
				}
				if err := c.Pub(topics[(g+i)%len(topics)], recs...); err != nil {
					errs <- err
					return
				}
				i += n
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// SemiSyncTimeout is replication.syncTimeoutMs of the semi-sync tests:
// short, so that a timeout is reached quickly where a test wants one.
const SemiSyncTimeout = 300 * time.Millisecond

// SemiSyncConfig is the config of a semi-sync master (one sync slave,
// onSyncTimeout mode) with the admin API on.
func SemiSyncConfig(mode string) string {
	return fmt.Sprintf("replication:\n  syncSlaves: 1\n  syncTimeoutMs: %d\n  onSyncTimeout: %s\n%s",
		SemiSyncTimeout.Milliseconds(), mode, AdminConfig(AdminToken))
}

// SyncInfo is /api/replication of the admin API at adm; the test fails if
// it has no sync section.
func SyncInfo(t *testing.T, adm string) metrics.ReplicationInfo {
	t.Helper()
	var r metrics.ReplicationInfo
	AdminJSON(t, adm, "/api/replication", &r)
	if r.Sync == nil {
		t.Fatalf("/api/replication has no sync section: %+v", r)
	}
	return r
}

// WaitConfirming waits up to 30 s until the master at adm counts want
// confirming slaves.
func WaitConfirming(t *testing.T, adm string, want int) {
	t.Helper()
	if !smsstest.Poll(30*time.Second, func() bool { return SyncInfo(t, adm).Sync.Confirming == want }) {
		t.Fatalf("confirming slaves never %d: %+v", want, SyncInfo(t, adm).Sync)
	}
}

// WaitMasterGone waits until the slave at addr has read the end of its
// stream from a master just killed, so that a promote is not refused as
// "still streaming" (env: the credentials, with auth on).
func WaitMasterGone(t *testing.T, addr string, env ...string) {
	t.Helper()
	var st struct {
		Stream *protocol.SlaveStream `json:"stream"`
	}
	if !smsstest.Poll(30*time.Second, func() bool {
		out, _, code := SmssctlEnv(t, env, addr, "status", "--json")
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && st.Stream != nil && st.Stream.State != "streaming"
	}) {
		t.Fatalf("the slave at %s still streams from its killed master: %+v", addr, st.Stream)
	}
}

// CtlBinary is cmd/smssctl, built once per test binary by the test kit.
func CtlBinary(t testing.TB) string {
	t.Helper()
	return smsstest.Binary(t, "./cmd/smssctl")
}

// Smssctl runs smssctl against addr and returns its stdout, stderr and
// exit code.
func Smssctl(t *testing.T, addr string, args ...string) (string, string, int) {
	t.Helper()
	return SmssctlEnv(t, nil, addr, args...)
}

// SmssctlEnv is smssctl with extra environment (SMSS_USER, SMSS_PASSWORD).
func SmssctlEnv(t *testing.T, env []string, addr string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(CtlBinary(t), append([]string{"--addr", addr, "--timeout", "30s"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("smssctl %v: %v", args, err)
		}
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// CtlStatus is the part of smssctl status --json the tests read.
type CtlStatus struct {
	Role        string `json:"role"`
	Epoch       uint64 `json:"epoch"`
	LastEventID int64  `json:"lastEventId"`
	Master      string `json:"master"`
}

// StatusOf runs smssctl status --json against addr.
func StatusOf(t *testing.T, addr string) CtlStatus {
	t.Helper()
	out, errOut, code := Smssctl(t, addr, "status", "--json")
	var st CtlStatus
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("smssctl status of %s: exit %d\n%s%s", addr, code, out, errOut)
	}
	return st
}

// PortOf is the port of a host:port address.
func PortOf(t *testing.T, addr string) int {
	t.Helper()
	p, err := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// LiveSub is a subscriber that records every body it is handed.
type LiveSub struct {
	Name string
	Mu   sync.Mutex
	Got  []string
	Err  error
}

// StartLiveSub subscribes name to topic at addr from the start, retrying
// while the topic has not reached that node yet.
func StartLiveSub(t *testing.T, addr, topic, name string) *LiveSub {
	t.Helper()
	s := &LiveSub{Name: name}
	// The topic may not have reached a slave yet: subscribe until the
	// first unit is not a refusal (an idle stream's first unit is an
	// alive within the alive interval).
	var c *Client
	var first Unit
	if !smsstest.Poll(20*time.Second, func() bool {
		c = Dial(t, addr)
		if err := c.Sub(topic, "rc-"+name, 0, 10, 5*time.Second); err != nil {
			return false
		}
		u, err := c.Next(10 * time.Second)
		first = u
		return err == nil && u.Code != protocol.StatusError
	}) {
		t.Fatalf("%s: cannot subscribe to %s at %s: %v", name, topic, addr, first)
	}
	s.add(first)
	if first.Code == protocol.StatusOK {
		if err := c.Ack(0); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		for {
			u, err := c.Next(60 * time.Second)
			if err != nil {
				s.Mu.Lock()
				s.Err = err
				s.Mu.Unlock()
				return
			}
			if u.Code != protocol.StatusOK {
				continue
			}
			s.add(u)
			if err := c.Ack(0); err != nil {
				return
			}
		}
	}()
	return s
}

func (s *LiveSub) add(u Unit) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	for _, m := range u.Msgs {
		s.Got = append(s.Got, string(m.Record.Body))
	}
}

// Has reports whether the subscriber was handed body.
func (s *LiveSub) Has(body string) bool {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	for _, g := range s.Got {
		if g == body {
			return true
		}
	}
	return false
}

// Count is how many messages the subscriber was handed.
func (s *LiveSub) Count() int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return len(s.Got)
}
