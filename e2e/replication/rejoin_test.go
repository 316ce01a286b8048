package replication

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
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// lastBinlogID returns the last eventId in a data directory's binlog.
func lastBinlogID(t *testing.T, dataDir string) int64 {
	t.Helper()
	buf := kit.ReplBinlog(t, dataDir)
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
	aport, bport := kit.FreePort(t), kit.FreePort(t)
	kit.ReplConfig(t, adir, aport, "")
	kit.ReplConfig(t, bdir, bport, "")
	aData, bData := filepath.Join(adir, "data"), filepath.Join(bdir, "data")

	a := kit.StartArgs(t, adir)
	ac := kit.Dial(t, a.Addr)
	for _, topic := range []string{"t", "gone"} {
		if err := ac.Create(topic, 0); err != nil {
			t.Fatal(err)
		}
	}
	b := kit.StartReplSlave(t, bdir, aport, 0)
	kit.ReplPublish(t, a.Addr, []string{"t", "gone"}, 200, "shared")
	kit.WaitReplicated(t, aData, bData, b, time.Minute)

	// B stops following; A acknowledges writes only it has, then dies.
	if err := b.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal is asynchronous: write only once B is stopped, so that
	// what follows is A's alone.
	if !smsstest.Poll(10*time.Second, func() bool { return kit.ProcState(b.Cmd.Process.Pid) == 'T' }) {
		t.Fatalf("B did not stop (state %c)", kit.ProcState(b.Cmd.Process.Pid))
	}
	if err := ac.Create("onlyA", 0); err != nil {
		t.Fatal(err)
	}
	kit.ReplPublish(t, a.Addr, []string{"t", "onlyA"}, 40, "lost")
	if err := ac.Del("gone"); err != nil {
		t.Fatal(err)
	}
	if err := ac.Delay("t", 3_600_000, kit.Record(nil, "late")); err != nil {
		t.Fatal(err)
	}
	aLast := lastBinlogID(t, aData)
	a.Kill()
	// Killed while stopped: what sits in its socket buffer is never
	// applied. What it has is the shared history.
	b.Kill()
	shared := lastBinlogID(t, bData)
	if aBin, bBin := kit.ReplBinlog(t, aData), kit.ReplBinlog(t, bData); !bytes.HasPrefix(aBin, bBin) || shared >= aLast {
		t.Fatalf("B (up to eventId %d) is not behind A (up to %d) with a prefix of its binlog", shared, aLast)
	}

	// B is promoted the way it is today: a restart as master.
	b = kit.StartArgs(t, bdir)
	bc := kit.Dial(t, b.Addr)
	if err := bc.Create("fresh", 0); err != nil {
		t.Fatal(err)
	}
	kit.ReplPublish(t, b.Addr, []string{"t", "fresh"}, 40, "new")
	bLast := lastBinlogID(t, bData)

	// A as B's slave: refused, loudly, with both positions; nothing moved.
	aBin := kit.ReplBinlog(t, aData)
	slaveArgs := []string{"-role", "slave", "-host", "127.0.0.1", "-port", strconv.Itoa(bport), "-event", "0"}
	code, out := kit.RunToExit(t, adir, time.Minute, slaveArgs...)
	if code == 0 {
		t.Fatalf("a divergent old master started as a slave:\n%s", kit.Tail(out, 4000))
	}
	for _, want := range []string{"REFUSING TO START", "ends at eventId " + strconv.FormatInt(aLast, 10),
		"at eventId " + strconv.FormatInt(shared+1, 10), "prefix ends at eventId " + strconv.FormatInt(shared, 10), "-rejoin"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, kit.Tail(out, 4000))
		}
	}
	if !bytes.Equal(kit.ReplBinlog(t, aData), aBin) {
		t.Fatal("a refused start changed the binlog")
	}
	if _, err := os.Stat(filepath.Join(aData, "diverged")); !os.IsNotExist(err) {
		t.Fatalf("a refused start created the diverged directory: %v", err)
	}

	// With -rejoin it moves the tail aside and follows.
	a = kit.StartArgs(t, adir, append(slaveArgs, "-rejoin")...)
	kit.WaitReplicated(t, bData, aData, a, time.Minute)
	bBin := kit.ReplBinlog(t, bData)
	if got := kit.ReplBinlog(t, aData); !bytes.HasPrefix(bBin, got) || lastBinlogID(t, aData) != bLast {
		t.Fatalf("A's binlog is not B's after -rejoin (common %d of %d bytes)", kit.ReplCommon(got, bBin), len(bBin))
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
		if got, want := kit.SubscribeAll(t, a.Addr, topic), kit.SubscribeAll(t, b.Addr, topic); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("topic %s: A serves %d messages, B %d", topic, len(got), len(want))
		}
	}
	c := kit.Dial(t, a.Addr)
	body, err := c.RoundTrip(kit.Must(protocol.AppendList(nil, nil)), protocol.ReplyJSON)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), `"onlyA"`) {
		t.Fatalf("A still lists the topic only it had: %s", body)
	}

	// Once rejoined, a restart as a slave is not refused, and -rejoin on a
	// node that has not diverged changes nothing.
	for _, args := range [][]string{slaveArgs, append(slaveArgs, "-rejoin")} {
		a.Term()
		a = kit.StartArgs(t, adir, args...)
		if err := bc.Pub("t", kit.Record(nil, "after the rejoin")); err != nil {
			t.Fatal(err)
		}
		kit.WaitReplicated(t, bData, aData, a, time.Minute)
		if out := a.Out.String(); strings.Contains(out, "REFUSING") || strings.Contains(out, "DIVERGED") || strings.Contains(out, "REJOIN") {
			t.Fatalf("a rejoined node was refused or rewound again:\n%s", kit.Tail(out, 4000))
		}
		if ents, err := os.ReadDir(filepath.Join(aData, "diverged")); err != nil || len(ents) != 1 {
			t.Fatalf("diverged directory after a restart with %v: %v %v", args, ents, err)
		}
	}
	a.Term()
	b.Term()
}

// TestReplDivergenceOnReconnect: a running slave whose master is replaced
// by one with another history (same address) finds out at its next
// connection, stops and ends the process with status 1 rather than keep
// serving what the new master never had.
func TestReplDivergenceOnReconnect(t *testing.T) {
	m1dir, m2dir, sdir := t.TempDir(), t.TempDir(), t.TempDir()
	mport := kit.FreePort(t)
	kit.ReplConfig(t, m1dir, mport, "")
	kit.ReplConfig(t, m2dir, mport, "")
	kit.ReplConfig(t, sdir, 0, "")
	m1 := kit.StartArgs(t, m1dir)
	c := kit.Dial(t, m1.Addr)
	if err := c.Create("t", 0); err != nil {
		t.Fatal(err)
	}
	s := kit.StartReplSlave(t, sdir, mport, 0)
	kit.ReplPublish(t, m1.Addr, []string{"t"}, 40, "first")
	kit.WaitReplicated(t, filepath.Join(m1dir, "data"), filepath.Join(sdir, "data"), s, time.Minute)
	m1.Kill()

	// Another master on the same address, with a history of its own.
	m2 := kit.StartArgs(t, m2dir)
	c2 := kit.Dial(t, m2.Addr)
	if err := c2.Create("t", 0); err != nil {
		t.Fatal(err)
	}
	kit.ReplPublish(t, m2.Addr, []string{"t"}, 80, "other")
	select {
	case <-s.Exited():
	case <-time.After(time.Minute):
		t.Fatalf("the slave kept running against a master with another history:\n%s", kit.Tail(s.Out.String(), 4000))
	}
	ee, ok := s.Err().(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("slave exit %v, want status 1", s.Err())
	}
	if out := s.Out.String(); !strings.Contains(out, "STOPPING") || !strings.Contains(out, "diverged") {
		t.Fatalf("the slave's exit does not say why:\n%s", kit.Tail(out, 4000))
	}
	m2.Term()
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
	aport, bport := kit.FreePort(t), kit.FreePort(t)
	smsstest.WriteConfig(t, adir, aport, "")
	smsstest.WriteConfig(t, bdir, bport, "")
	aData, bData := filepath.Join(adir, "data"), filepath.Join(bdir, "data")
	a := kit.StartArgs(t, adir)
	ac := kit.Dial(t, a.Addr)
	if err := ac.Create("t", 0); err != nil {
		t.Fatal(err)
	}
	kit.ReplPublish(t, a.Addr, []string{"t"}, 40, "shared")
	b := kit.StartReplSlave(t, bdir, aport, 0)
	kit.WaitReplicated(t, aData, bData, b, time.Minute)
	// master is who the rejoining node follows; node is the one rejoining.
	master, mData, mport := a, aData, aport
	node, nodeDir, nodeData := b, bdir, bData
	if diverged {
		if err := b.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if !smsstest.Poll(10*time.Second, func() bool { return kit.ProcState(b.Cmd.Process.Pid) == 'T' }) {
			t.Fatalf("B did not stop (state %c)", kit.ProcState(b.Cmd.Process.Pid))
		}
		kit.ReplPublish(t, a.Addr, []string{"t"}, 40, "lost")
		a.Kill()
		b.Kill()
		b = kit.StartArgs(t, bdir) // promoted by a restart as master; no writes
		master, mData, mport = b, bData, bport
		node, nodeDir, nodeData = a, adir, aData
	}
	node.Kill()

	done := make(chan *kit.Proc, 1)
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
		sp.Out = out // the command writes to out, which p.Out is to name
		done <- &kit.Proc{Proc: sp, Dir: nodeDir}
	}()
	var p *kit.Proc
	select {
	case p = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the rejoining node did not listen within 10 s while its master took no writes:\n%s", kit.Tail(out.String(), 4000))
	}
	if p == nil {
		t.Fatalf("the rejoining node exited:\n%s", kit.Tail(out.String(), 4000))
	}
	t.Logf("listening after %v", time.Since(start))
	kit.WaitReplicated(t, mData, nodeData, p, 10*time.Second)
	_, err := os.Stat(filepath.Join(nodeData, "diverged"))
	if diverged != (err == nil) {
		t.Fatalf("diverged directory: %v (diverged %v)", err, diverged)
	}
	// It follows: the master's next write reaches it.
	kit.ReplPublish(t, master.Addr, []string{"t"}, 4, "after")
	kit.WaitReplicated(t, mData, nodeData, p, 30*time.Second)
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
	aport, bport := kit.FreePort(t), kit.FreePort(t)
	smsstest.WriteConfig(t, adir, aport, "")
	smsstest.WriteConfig(t, bdir, bport, "")
	smsstest.WriteConfig(t, cdir, 0, "")
	aData, bData, cData := filepath.Join(adir, "data"), filepath.Join(bdir, "data"), filepath.Join(cdir, "data")
	a := kit.StartArgs(t, adir)
	ac := kit.Dial(t, a.Addr)
	if err := ac.Create("t", 0); err != nil {
		t.Fatal(err)
	}
	kit.ReplPublish(t, a.Addr, []string{"t"}, 40, "shared")
	b := kit.StartReplSlave(t, bdir, aport, 0)
	c := kit.StartReplSlave(t, cdir, aport, 0)
	kit.WaitReplicated(t, aData, bData, b, time.Minute)
	kit.WaitReplicated(t, aData, cData, c, time.Minute)
	if err := b.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !smsstest.Poll(10*time.Second, func() bool { return kit.ProcState(b.Cmd.Process.Pid) == 'T' }) {
		t.Fatalf("B did not stop (state %c)", kit.ProcState(b.Cmd.Process.Pid))
	}
	if err := ac.Pub("t", kit.Record(nil, "onlyAC")); err != nil {
		t.Fatal(err)
	}
	kit.WaitReplicated(t, aData, cData, c, time.Minute)
	a.Kill()
	b.Kill()
	b = kit.StartArgs(t, bdir) // B promoted by a restart as master; no writes
	start := time.Now()
	ctl := smsstest.Binary(t, "./cmd/smssctl")
	out, err := exec.Command(ctl, "--addr", c.Addr, "follow", b.Addr).CombinedOutput()
	took := time.Since(start)
	if err == nil || !strings.Contains(string(out), "not a prefix") {
		t.Fatalf("follow of a master C diverged from: %v\n%s", err, out)
	}
	if took > 15*time.Second {
		t.Fatalf("follow took %v to find the divergence from an idle master", took)
	}
	select {
	case <-c.Exited():
		t.Fatalf("C exited after a refused follow:\n%s", kit.Tail(c.Out.String(), 4000))
	default:
	}
	t.Logf("follow refused %v after it was asked", took.Round(time.Millisecond))
}
