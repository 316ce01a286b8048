package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// runToExit runs smss with args and waits for it to exit by itself.
func runToExit(t *testing.T, dir string, timeout time.Duration, args ...string) (int, string) {
	t.Helper()
	out := &smsstest.SyncBuffer{}
	cmd := smsstest.SmssCommand(t, dir, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String()
	case <-time.After(timeout):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("smss %v did not exit within %v:\n%s", args, timeout, tail(out.String(), 4000))
		return 0, ""
	}
}

// lastBinlogID returns the last eventId in a data directory's binlog.
func lastBinlogID(t *testing.T, dataDir string) int64 {
	t.Helper()
	buf := replBinlog(t, dataDir)
	var last int64
	for len(buf) > 0 {
		_, l, n, err := binlog.DecodeSpan(buf)
		if err != nil {
			t.Fatalf("decode binlog: %v", err)
		}
		last, buf = l, buf[n:]
	}
	return last
}

// procState is the state letter of a process (Linux /proc), 0 if unknown.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ...: comm may hold spaces, so look after the ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// rejoinManifest is the part of manifest.json the test reads.
type rejoinManifest struct {
	CommonLastEventID int64 `json:"commonLastEventId"`
	FirstEventID      int64 `json:"firstEventId"`
	LastEventID       int64 `json:"lastEventId"`
	BinlogFiles       []struct {
		Path string `json:"path"`
	} `json:"binlogFiles"`
	Topics []struct {
		Name   string `json:"name"`
		Action string `json:"action"`
	} `json:"topics"`
}

// TestReplRejoinOldMaster is issue 16's rejoin on real processes: master A
// and slave B; A takes acknowledged writes B never gets (B is stopped with
// SIGSTOP) and dies with kill -9; B is restarted as the master and takes
// its own writes. A restarted as B's slave refuses to start, naming both
// positions; with -rejoin it moves its divergent tail into
// data/diverged/<time>/, follows B, ends with a binlog that is a byte
// prefix of B's and serves exactly B's messages.
func TestReplRejoinOldMaster(t *testing.T) {
	adir, bdir := t.TempDir(), t.TempDir()
	aport, bport := freePort(t), freePort(t)
	replConfig(t, adir, aport, "")
	replConfig(t, bdir, bport, "")
	aData, bData := filepath.Join(adir, "data"), filepath.Join(bdir, "data")

	a := startArgs(t, adir)
	ac := dial(t, a.addr)
	for _, topic := range []string{"t", "gone"} {
		if err := ac.create(topic, 0); err != nil {
			t.Fatal(err)
		}
	}
	b := startReplSlave(t, bdir, aport, 0)
	replPublish(t, a.addr, []string{"t", "gone"}, 200, "shared")
	waitReplicated(t, aData, bData, b, time.Minute)

	// B stops following; A acknowledges writes only it has, then dies.
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal is asynchronous: write only once B is stopped, so that
	// what follows is A's alone.
	if !smsstest.Poll(10*time.Second, func() bool { return procState(b.cmd.Process.Pid) == 'T' }) {
		t.Fatalf("B did not stop (state %c)", procState(b.cmd.Process.Pid))
	}
	if err := ac.create("onlyA", 0); err != nil {
		t.Fatal(err)
	}
	replPublish(t, a.addr, []string{"t", "onlyA"}, 40, "lost")
	if err := ac.del("gone"); err != nil {
		t.Fatal(err)
	}
	if err := ac.delay("t", 3_600_000, record(nil, "late")); err != nil {
		t.Fatal(err)
	}
	aLast := lastBinlogID(t, aData)
	a.kill()
	// Killed while stopped: what sits in its socket buffer is never
	// applied. What it has is the shared history.
	b.kill()
	shared := lastBinlogID(t, bData)
	if aBin, bBin := replBinlog(t, aData), replBinlog(t, bData); !bytes.HasPrefix(aBin, bBin) || shared >= aLast {
		t.Fatalf("B (up to eventId %d) is not behind A (up to %d) with a prefix of its binlog", shared, aLast)
	}

	// B is promoted the way it is today: a restart as master.
	b = startArgs(t, bdir)
	bc := dial(t, b.addr)
	if err := bc.create("fresh", 0); err != nil {
		t.Fatal(err)
	}
	replPublish(t, b.addr, []string{"t", "fresh"}, 40, "new")
	bLast := lastBinlogID(t, bData)

	// A as B's slave: refused, loudly, with both positions; nothing moved.
	aBin := replBinlog(t, aData)
	slaveArgs := []string{"-role", "slave", "-host", "127.0.0.1", "-port", strconv.Itoa(bport), "-event", "0"}
	code, out := runToExit(t, adir, time.Minute, slaveArgs...)
	if code == 0 {
		t.Fatalf("a divergent old master started as a slave:\n%s", tail(out, 4000))
	}
	for _, want := range []string{"REFUSING TO START", "ends at eventId " + strconv.FormatInt(aLast, 10),
		"at eventId " + strconv.FormatInt(shared+1, 10), "prefix ends at eventId " + strconv.FormatInt(shared, 10), "-rejoin"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, tail(out, 4000))
		}
	}
	if !bytes.Equal(replBinlog(t, aData), aBin) {
		t.Fatal("a refused start changed the binlog")
	}
	if _, err := os.Stat(filepath.Join(aData, "diverged")); !os.IsNotExist(err) {
		t.Fatalf("a refused start created the diverged directory: %v", err)
	}

	// With -rejoin it moves the tail aside and follows.
	a = startArgs(t, adir, append(slaveArgs, "-rejoin")...)
	waitReplicated(t, bData, aData, a, time.Minute)
	bBin := replBinlog(t, bData)
	if got := replBinlog(t, aData); !bytes.HasPrefix(bBin, got) || lastBinlogID(t, aData) != bLast {
		t.Fatalf("A's binlog is not B's after -rejoin (common %d of %d bytes)", replCommon(got, bBin), len(bBin))
	}
	ents, err := os.ReadDir(filepath.Join(aData, "diverged"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("diverged directory: %v %v", ents, err)
	}
	moved := filepath.Join(aData, "diverged", ents[0].Name())
	raw, err := os.ReadFile(filepath.Join(moved, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var man rejoinManifest
	if err := json.Unmarshal(raw, &man); err != nil {
		t.Fatalf("manifest: %v\n%s", err, raw)
	}
	if man.CommonLastEventID != shared || man.FirstEventID != shared+1 || man.LastEventID != aLast {
		t.Fatalf("manifest range %d / %d..%d, want %d / %d..%d", man.CommonLastEventID, man.FirstEventID, man.LastEventID, shared, shared+1, aLast)
	}
	var tailBytes []byte
	for _, f := range man.BinlogFiles {
		data, err := os.ReadFile(filepath.Join(moved, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		tailBytes = append(tailBytes, data...)
	}
	if prefix := len(aBin) - len(tailBytes); prefix < 0 || !bytes.Equal(aBin[prefix:], tailBytes) || !bytes.HasPrefix(bBin, aBin[:prefix]) {
		t.Fatalf("the moved binlog (%d bytes) is not A's divergent tail", len(tailBytes))
	}
	actions := map[string]string{}
	for _, tp := range man.Topics {
		actions[tp.Name] = tp.Action
	}
	if actions["onlyA"] != "removed" || actions["t"] != "truncated" || actions["gone"] != "restored" {
		t.Fatalf("manifest topics %v", actions)
	}

	// A serves exactly B's messages, and not A's lost topic.
	for _, topic := range []string{"t", "gone", "fresh"} {
		if got, want := subscribeAll(t, a.addr, topic), subscribeAll(t, b.addr, topic); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("topic %s: A serves %d messages, B %d", topic, len(got), len(want))
		}
	}
	c := dial(t, a.addr)
	body, err := c.roundTrip(must(protocol.AppendList(nil, nil)), protocol.ReplyJSON)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), `"onlyA"`) {
		t.Fatalf("A still lists the topic only it had: %s", body)
	}

	// Once rejoined, a restart as a slave is not refused, and -rejoin on a
	// node that has not diverged changes nothing.
	for _, args := range [][]string{slaveArgs, append(slaveArgs, "-rejoin")} {
		a.stop()
		a = startArgs(t, adir, args...)
		if err := bc.pub("t", record(nil, "after the rejoin")); err != nil {
			t.Fatal(err)
		}
		waitReplicated(t, bData, aData, a, time.Minute)
		if out := a.out.String(); strings.Contains(out, "REFUSING") || strings.Contains(out, "DIVERGED") || strings.Contains(out, "REJOIN") {
			t.Fatalf("a rejoined node was refused or rewound again:\n%s", tail(out, 4000))
		}
		if ents, err := os.ReadDir(filepath.Join(aData, "diverged")); err != nil || len(ents) != 1 {
			t.Fatalf("diverged directory after a restart with %v: %v %v", args, ents, err)
		}
	}
	a.stop()
	b.stop()
}

// TestReplDivergenceOnReconnect: a running slave whose master is replaced
// by one with another history (same address) finds out at its next
// connection, stops and ends the process with status 1 rather than keep
// serving what the new master never had.
func TestReplDivergenceOnReconnect(t *testing.T) {
	m1dir, m2dir, sdir := t.TempDir(), t.TempDir(), t.TempDir()
	mport := freePort(t)
	replConfig(t, m1dir, mport, "")
	replConfig(t, m2dir, mport, "")
	replConfig(t, sdir, 0, "")
	m1 := startArgs(t, m1dir)
	c := dial(t, m1.addr)
	if err := c.create("t", 0); err != nil {
		t.Fatal(err)
	}
	s := startReplSlave(t, sdir, mport, 0)
	replPublish(t, m1.addr, []string{"t"}, 40, "first")
	waitReplicated(t, filepath.Join(m1dir, "data"), filepath.Join(sdir, "data"), s, time.Minute)
	m1.kill()

	// Another master on the same address, with a history of its own.
	m2 := startArgs(t, m2dir)
	c2 := dial(t, m2.addr)
	if err := c2.create("t", 0); err != nil {
		t.Fatal(err)
	}
	replPublish(t, m2.addr, []string{"t"}, 80, "other")
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		t.Fatalf("the slave kept running against a master with another history:\n%s", tail(s.out.String(), 4000))
	}
	ee, ok := s.Err().(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("slave exit %v, want status 1", s.Err())
	}
	if out := s.out.String(); !strings.Contains(out, "STOPPING") || !strings.Contains(out, "diverged") {
		t.Fatalf("the slave's exit does not say why:\n%s", tail(out, 4000))
	}
	m2.stop()
}

// TestRejoinAtMastersLastBlock: the common prefix of a rejoining node and
// its master ends exactly at the master's last block, and the master takes
// no writes. In sync: a slave stopped and restarted with -rejoin. Diverged:
// an old master whose unconfirmed tail its slave never got, rejoining the
// promoted slave before that one wrote anything. Either way the node opens
// its port within seconds (the master has no next block to send, and the
// default alive interval, 30 s, is longer than the test allows) and
// follows.
func TestRejoinAtMastersLastBlock(t *testing.T) {
	for _, diverged := range []bool{false, true} {
		name := "in sync"
		if diverged {
			name = "diverged"
		}
		t.Run(name, func(t *testing.T) { testRejoinAtMastersLastBlock(t, diverged) })
	}
}

func testRejoinAtMastersLastBlock(t *testing.T, diverged bool) {
	adir, bdir := t.TempDir(), t.TempDir()
	aport, bport := freePort(t), freePort(t)
	smsstest.WriteConfig(t, adir, aport, "")
	smsstest.WriteConfig(t, bdir, bport, "")
	aData, bData := filepath.Join(adir, "data"), filepath.Join(bdir, "data")
	a := startArgs(t, adir)
	ac := dial(t, a.addr)
	if err := ac.create("t", 0); err != nil {
		t.Fatal(err)
	}
	replPublish(t, a.addr, []string{"t"}, 40, "shared")
	b := startReplSlave(t, bdir, aport, 0)
	waitReplicated(t, aData, bData, b, time.Minute)
	// master is who the rejoining node follows; node is the one rejoining.
	master, mData, mport := a, aData, aport
	node, nodeDir, nodeData := b, bdir, bData
	if diverged {
		if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if !smsstest.Poll(10*time.Second, func() bool { return procState(b.cmd.Process.Pid) == 'T' }) {
			t.Fatalf("B did not stop (state %c)", procState(b.cmd.Process.Pid))
		}
		replPublish(t, a.addr, []string{"t"}, 40, "lost")
		a.kill()
		b.kill()
		b = startArgs(t, bdir) // promoted by a restart as master; no writes
		master, mData, mport = b, bData, bport
		node, nodeDir, nodeData = a, adir, aData
	}
	node.Kill()

	done := make(chan *proc, 1)
	start := time.Now()
	cmd := smsstest.SmssCommand(t, nodeDir, "-role", "slave", "-host", "127.0.0.1", "-port", strconv.Itoa(mport), "-event", "0", "-rejoin")
	out := &smsstest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	go func() {
		sp := smsstest.StartProc(t, cmd, nil)
		for !smsstest.ListenRe.MatchString(out.String()) {
			select {
			case <-sp.Exited():
				done <- nil
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		done <- &proc{Proc: sp, cmd: sp.Cmd, out: out, dir: nodeDir, exited: sp.Exited()}
	}()
	var p *proc
	select {
	case p = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the rejoining node did not listen within 10 s while its master took no writes:\n%s", tail(out.String(), 4000))
	}
	if p == nil {
		t.Fatalf("the rejoining node exited:\n%s", tail(out.String(), 4000))
	}
	t.Logf("listening after %v", time.Since(start))
	waitReplicated(t, mData, nodeData, p, 10*time.Second)
	_, err := os.Stat(filepath.Join(nodeData, "diverged"))
	if diverged != (err == nil) {
		t.Fatalf("diverged directory: %v (diverged %v)", err, diverged)
	}
	// It follows: the master's next write reaches it.
	replPublish(t, master.addr, []string{"t"}, 4, "after")
	waitReplicated(t, mData, nodeData, p, 30*time.Second)
}

// TestDivergenceOnFollowIdleMaster: slave C holds a block its new master
// lacks, and that master's last block is the one before it (C got the old
// master's last write, the promoted slave B did not). Re-pointed to B with
// follow while B takes no writes, C finds the divergence within seconds
// instead of waiting for a block or an alive from B (30 s by default):
// follow checks the prefix before it switches, so it is refused (an error,
// not rc 0) and C keeps running, following its old master.
func TestDivergenceOnFollowIdleMaster(t *testing.T) {
	adir, bdir, cdir := t.TempDir(), t.TempDir(), t.TempDir()
	aport, bport := freePort(t), freePort(t)
	smsstest.WriteConfig(t, adir, aport, "")
	smsstest.WriteConfig(t, bdir, bport, "")
	smsstest.WriteConfig(t, cdir, 0, "")
	aData, bData, cData := filepath.Join(adir, "data"), filepath.Join(bdir, "data"), filepath.Join(cdir, "data")
	a := startArgs(t, adir)
	ac := dial(t, a.addr)
	if err := ac.create("t", 0); err != nil {
		t.Fatal(err)
	}
	replPublish(t, a.addr, []string{"t"}, 40, "shared")
	b := startReplSlave(t, bdir, aport, 0)
	c := startReplSlave(t, cdir, aport, 0)
	waitReplicated(t, aData, bData, b, time.Minute)
	waitReplicated(t, aData, cData, c, time.Minute)
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !smsstest.Poll(10*time.Second, func() bool { return procState(b.cmd.Process.Pid) == 'T' }) {
		t.Fatalf("B did not stop (state %c)", procState(b.cmd.Process.Pid))
	}
	if err := ac.pub("t", record(nil, "onlyAC")); err != nil {
		t.Fatal(err)
	}
	waitReplicated(t, aData, cData, c, time.Minute)
	a.kill()
	b.kill()
	b = startArgs(t, bdir) // B promoted by a restart as master; no writes
	start := time.Now()
	ctl := smsstest.Binary(t, "./cmd/smssctl")
	out, err := exec.Command(ctl, "--addr", c.addr, "follow", b.addr).CombinedOutput()
	took := time.Since(start)
	if err == nil || !strings.Contains(string(out), "not a prefix") {
		t.Fatalf("follow of a master C diverged from: %v\n%s", err, out)
	}
	if took > 15*time.Second {
		t.Fatalf("follow took %v to find the divergence from an idle master", took)
	}
	select {
	case <-c.exited:
		t.Fatalf("C exited after a refused follow:\n%s", tail(c.out.String(), 4000))
	default:
	}
	t.Logf("follow refused %v after it was asked", took.Round(time.Millisecond))
}
