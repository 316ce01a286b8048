package replication

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// holdProxy forwards TCP connections to target. When the client's side
// ends (the process was killed: its kernel sends a FIN), the target's
// side is kept open and drained, so the master does not learn that the
// slave is gone: what it sees when a slave host dies or the network drops
// the FIN, until its writes time out.
type holdProxy struct {
	ln  net.Listener
	mu  sync.Mutex
	ups []net.Conn
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.ups = append(p.ups, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); c.Close() }() // the master's side stays open
			go func() { io.Copy(c, up); c.Close(); io.Copy(io.Discard, up) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.ups {
			c.Close()
		}
	})
	return p
}

func (p *holdProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// allThreadsStopped reports whether every thread of pid is stopped
// (state T in /proc).
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the command name in parentheses.
		i := strings.LastIndexByte(string(st), ')')
		if i < 0 || i+2 >= len(st) || st[i+2] != 'T' {
			return false
		}
	}
	return true
}

// slaveByAddr finds the master's view of the replica stream from addr.
func slaveByAddr(r metrics.ReplicationInfo, addr string) (metrics.SlaveInfo, bool) {
	for _, s := range r.Slaves {
		if s.RemoteAddr == addr {
			return s, true
		}
	}
	return metrics.SlaveInfo{}, false
}

// TestSemiSyncRestartedSlaveCountsOnce: a master with replication.
// syncSlaves 2 and two slaves, A and B (B stopped with SIGSTOP). A write
// that only A has is refused. A is killed (SIGKILL) and started again at
// once on its data directory while the master still holds A's old
// connection. A retry of the write (same message id, so the master waits
// for the original's eventId again) must still be refused: A's old and
// new connections are one slave, which the data directory's instance id
// tells the master. Once B runs again the retry is confirmed by two
// distinct slaves.
func TestSemiSyncRestartedSlaveCountsOnce(t *testing.T) {
	mdir, adir, bdir := t.TempDir(), t.TempDir(), t.TempDir()
	kit.ReplConfig(t, mdir, 0, fmt.Sprintf("replication:\n  syncSlaves: 2\n  syncTimeoutMs: %d\n  onSyncTimeout: fail\n%s",
		kit.SemiSyncTimeout.Milliseconds(), kit.AdminConfig(kit.AdminToken)))
	kit.ReplConfig(t, adir, 0, "")
	kit.ReplConfig(t, bdir, 0, "")
	master := kit.StartArgs(t, mdir)
	madm := kit.AdminAddr(t, master)
	mport := master.Addr[strings.LastIndexByte(master.Addr, ':')+1:]
	proxy := startHoldProxy(t, master.Addr)
	a := kit.StartReplSlave(t, adir, proxy.port(), 0)
	b := kit.StartArgs(t, bdir, "-role", "slave", "-host", "127.0.0.1", "-port", mport, "-event", "0")
	defer b.Cmd.Process.Signal(syscall.SIGCONT) // the cleanup's SIGKILL needs no SIGCONT, but a failed test's stop does
	kit.WaitConfirming(t, madm, 2)
	c := kit.Dial(t, master.Addr)
	if err := c.Create("rs", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Pub("rs", kit.Record(nil, "both")); err != nil {
		t.Fatalf("with both slaves: %v", err)
	}
	idFile := filepath.Join(adir, "data", "instance.id")
	id, err := os.ReadFile(idFile)
	if err != nil {
		t.Fatalf("the slave kept no instance id: %v", err)
	}

	w := kit.Record([][2]string{{"smss-msg-id", "restart-1"}}, "only on A")
	notConfirmed := func(err error) bool {
		var be *protocol.BizError
		return errors.As(err, &be) && strings.HasPrefix(be.Msg, "write not confirmed")
	}
	b.Cmd.Process.Signal(syscall.SIGSTOP)
	// The stop takes effect asynchronously: B must not apply the write.
	if !smsstest.Poll(10*time.Second, func() bool { return allThreadsStopped(b.Cmd.Process.Pid) }) {
		t.Fatal("B did not stop")
	}
	if err := c.Pub("rs", w); !notConfirmed(err) {
		t.Fatalf("a write only A has: %v, want write not confirmed", err)
	}
	var oldAddr string
	if !smsstest.Poll(30*time.Second, func() bool {
		r := kit.SyncInfo(t, madm)
		for _, s := range r.Slaves {
			if s.Confirming && s.Confirmed == r.LastEventID {
				oldAddr = s.RemoteAddr
				return true
			}
		}
		return false
	}) {
		t.Fatalf("A never confirmed the write: %+v", kit.SyncInfo(t, madm))
	}

	a.Kill()
	a = kit.StartReplSlave(t, adir, proxy.port(), 0)
	var newAddr string
	if !smsstest.Poll(30*time.Second, func() bool {
		r := kit.SyncInfo(t, madm)
		for _, s := range r.Slaves {
			if s.Confirming && s.RemoteAddr != oldAddr && s.Confirmed == r.LastEventID {
				newAddr = s.RemoteAddr
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the restarted A never confirmed: %+v", kit.SyncInfo(t, madm))
	}
	r := kit.SyncInfo(t, madm)
	if old, ok := slaveByAddr(r, oldAddr); !ok {
		t.Fatalf("the master dropped A's old connection (the test needs it held): %+v", r.Slaves)
	} else if old.Confirming {
		t.Errorf("A's old connection %s still counts beside its new one %s", oldAddr, newAddr)
	}
	// /api/replication names the slave by the id in its data directory.
	if nw, ok := slaveByAddr(r, newAddr); !ok || nw.InstanceID != strings.TrimSpace(string(id)) {
		t.Errorf("A's new connection shows instance id %q, want %q (its instance.id)", nw.InstanceID, strings.TrimSpace(string(id)))
	}
	if err := c.Pub("rs", w); !notConfirmed(err) {
		t.Fatalf("the retry after A restarted: %v, want write not confirmed (A counted twice)", err)
	}
	if r := kit.SyncInfo(t, madm); r.Sync.Confirming != 2 {
		t.Errorf("confirming slaves %d, want 2 (A once, B)", r.Sync.Confirming)
	}
	if again, _ := os.ReadFile(idFile); string(again) != string(id) {
		t.Errorf("the instance id changed across the restart: %q, was %q", again, id)
	}
	if !strings.Contains(master.Out.String(), "replaces the older one") {
		t.Errorf("the master did not log the replacement:\n%s", kit.Tail(master.Out.String(), 4000))
	}

	// B back: the write is confirmed by two distinct slaves.
	b.Cmd.Process.Signal(syscall.SIGCONT)
	if !smsstest.Poll(30*time.Second, func() bool { return c.Pub("rs", w) == nil }) {
		t.Fatalf("the retry never confirmed after B returned: %+v", kit.SyncInfo(t, madm).Sync)
	}
}

// TestSemiSyncCopiedSlaveDirectory: a second slave made by copying a
// slave's data directory sends the same instance id; the master counts the
// two as one toward syncSlaves (writes are refused, never acknowledged by
// fewer slaves than configured) and logs a warning naming the cause.
// Deleting instance.id in the copy before it starts again makes it a
// slave of its own, and writes are confirmed by both.
func TestSemiSyncCopiedSlaveDirectory(t *testing.T) {
	mdir, adir, cdir := t.TempDir(), t.TempDir(), t.TempDir()
	kit.ReplConfig(t, mdir, 0, fmt.Sprintf("replication:\n  syncSlaves: 2\n  syncTimeoutMs: %d\n  onSyncTimeout: fail\n%s",
		kit.SemiSyncTimeout.Milliseconds(), kit.AdminConfig(kit.AdminToken)))
	kit.ReplConfig(t, adir, 0, "")
	kit.ReplConfig(t, cdir, 0, "")
	master := kit.StartArgs(t, mdir)
	madm := kit.AdminAddr(t, master)
	mport := master.Addr[strings.LastIndexByte(master.Addr, ':')+1:]
	startSlave := func(dir string) *kit.Proc {
		return kit.StartArgs(t, dir, "-role", "slave", "-host", "127.0.0.1", "-port", mport, "-event", "0")
	}
	a := startSlave(adir)
	kit.WaitConfirming(t, madm, 1)
	notConfirmed := func(err error) bool {
		var be *protocol.BizError
		return errors.As(err, &be) && strings.HasPrefix(be.Msg, "write not confirmed")
	}
	c := kit.Dial(t, master.Addr)
	// Stored, but one slave of two confirms it.
	if err := c.Create("cp", 0); !notConfirmed(err) {
		t.Fatalf("create with one slave: %v, want write not confirmed", err)
	}
	a.Term()
	if err := os.CopyFS(filepath.Join(cdir, "data"), os.DirFS(filepath.Join(adir, "data"))); err != nil {
		t.Fatal(err)
	}
	a = startSlave(adir)
	copied := startSlave(cdir)
	if !smsstest.Poll(30*time.Second, func() bool { return len(kit.SyncInfo(t, madm).Slaves) == 2 }) {
		t.Fatalf("two replica streams never seen: %+v", kit.SyncInfo(t, madm).Slaves)
	}
	kit.WaitConfirming(t, madm, 1)
	// Each write makes both slaves confirm; the replaced one's
	// confirmations a second after its replacement are the warning.
	const warning = "two live slaves send the same instance id"
	if !smsstest.Poll(30*time.Second, func() bool {
		if err := c.Pub("cp", kit.Record(nil, "one id, two slaves")); !notConfirmed(err) {
			t.Fatalf("two slaves with one id: %v, want write not confirmed", err)
		}
		return strings.Contains(master.Out.String(), warning)
	}) {
		t.Fatalf("no warning about the shared id:\n%s", kit.Tail(master.Out.String(), 4000))
	}

	// The fix the warning names: the copy gets its own id.
	copied.Term()
	if err := os.Remove(filepath.Join(cdir, "data", "instance.id")); err != nil {
		t.Fatal(err)
	}
	copied = startSlave(cdir)
	// The original's connection, replaced by the copy's old one, counts
	// again at its next confirmation: the next write.
	if !smsstest.Poll(30*time.Second, func() bool { return c.Pub("cp", kit.Record(nil, "two ids")) == nil }) {
		t.Fatalf("the copy with its own id never counted: %+v\ncopy:\n%s\nmaster:\n%s", kit.SyncInfo(t, madm),
			kit.Tail(copied.Out.String(), 3000), kit.Tail(master.Out.String(), 3000))
	}
	if in := kit.SyncInfo(t, madm).Sync; in.Confirming != 2 {
		t.Fatalf("confirming %d, want 2", in.Confirming)
	}
	ida, _ := os.ReadFile(filepath.Join(adir, "data", "instance.id"))
	idc, _ := os.ReadFile(filepath.Join(cdir, "data", "instance.id"))
	if len(idc) == 0 || string(ida) == string(idc) {
		t.Fatalf("instance ids %q and %q", ida, idc)
	}
}
