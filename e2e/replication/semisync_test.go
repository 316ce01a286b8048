package replication

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// Semi-synchronous replication on real processes: a master with
// replication.syncSlaves 1 and one smss slave, faults on the slave while
// writes wait. The invariant checked throughout: a write answered 200 is
// in the slave's binlog, read from the slave's files while the slave can
// no longer write (stopped, killed or cut off).

// semiSyncMargin is how late past the timeout a refusal may come on a
// loaded machine.
const semiSyncMargin = 2 * time.Second

// semiSyncWriters publish unique single-record messages on several
// connections and record each answer.
type semiSyncWriters struct {
	t       *testing.T
	addr    string
	topic   string
	mu      sync.Mutex
	acked   []string // bodies answered 200
	refused int
	slowest time.Duration
	other   []error
	seq     atomic.Int64
}

// run publishes from n connections for d and returns how many writes were
// answered 200 and 400 "write not confirmed" in that time.
func (w *semiSyncWriters) run(n int, d time.Duration, tag string) (acked, refused int) {
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	var a, r atomic.Int64
	for i := range n {
		c := kit.Dial(w.t, w.addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				body := fmt.Sprintf("semisync-%s-%d-%d.", tag, i, w.seq.Add(1))
				start := time.Now()
				err := c.Pub(w.topic, kit.Record(nil, body))
				took := time.Since(start)
				w.mu.Lock()
				w.slowest = max(w.slowest, took)
				var be *protocol.BizError
				switch {
				case err == nil:
					w.acked = append(w.acked, body)
					a.Add(1)
				case errors.As(err, &be) && strings.HasPrefix(be.Msg, "write not confirmed"):
					w.refused++
					r.Add(1)
				default:
					w.other = append(w.other, err)
				}
				w.mu.Unlock()
				if err != nil && !errors.As(err, &be) {
					return
				}
			}
		}()
	}
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.other) > 0 {
		w.t.Fatalf("writes failed otherwise than refused: %v", w.other)
	}
	return int(a.Load()), int(r.Load())
}

// checkAcked fails unless every write answered 200 so far is in the
// slave's binlog.
func (w *semiSyncWriters) checkAcked(slaveData, when string) {
	w.t.Helper()
	// The bodies in the binlog: "semisync-" up to the first ".".
	have := map[string]bool{}
	bin := kit.ReplBinlog(w.t, slaveData)
	for {
		i := bytes.Index(bin, []byte("semisync-"))
		if i < 0 {
			break
		}
		j := bytes.IndexByte(bin[i:], '.')
		if j < 0 {
			break
		}
		have[string(bin[i:i+j+1])] = true
		bin = bin[i+j+1:]
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	missing := 0
	for _, b := range w.acked {
		if !have[b] {
			if missing < 5 {
				w.t.Errorf("%s: write %q answered 200 but not in the slave's binlog", when, b)
			}
			missing++
		}
	}
	if missing > 0 {
		w.t.Fatalf("%s: %d of %d acknowledged writes missing on the slave", when, missing, len(w.acked))
	}
}

func (w *semiSyncWriters) checkLatency() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slowest > kit.SemiSyncTimeout+semiSyncMargin {
		w.t.Fatalf("a write was answered after %v (timeout %v)", w.slowest, kit.SemiSyncTimeout)
	}
}

// faultWhileWaiting runs the writers for d and applies fault once the
// master reports writes waiting for confirmations; it returns the writers'
// counts.
func (w *semiSyncWriters) faultWhileWaiting(adm string, d time.Duration, tag string, fault func()) (acked, refused int) {
	w.t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		acked, refused = w.run(4, d, tag)
	}()
	if !smsstest.Poll(d/2, func() bool { return kit.SyncInfo(w.t, adm).Sync.Waiting > 0 }) {
		w.t.Logf("%s: no write seen waiting before the fault", tag)
	}
	fault()
	<-done
	return acked, refused
}

// waitSynchronous publishes until a write is answered 200 (the slave is
// back and confirms).
func waitSynchronous(t *testing.T, w *semiSyncWriters) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if a, _ := w.run(1, 50*time.Millisecond, "recover"); a > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no write confirmed within 30 s of the slave's return")
		}
	}
}

// TestSemiSyncFailMode: with onSyncTimeout fail, a slave that is stopped
// (SIGSTOP), cut off from the master, or killed (SIGKILL) while writes
// wait makes them 400 within the timeout plus a margin; no write is ever
// answered 200 without being in the slave's binlog; the slave's return
// makes writes synchronous again.
func TestSemiSyncFailMode(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	kit.ReplConfig(t, mdir, 0, kit.SemiSyncConfig("fail"))
	kit.ReplConfig(t, sdir, 0, "")
	master := kit.StartArgs(t, mdir)
	madm := kit.AdminAddr(t, master)
	mport, _ := strconv.Atoi(master.Addr[strings.LastIndexByte(master.Addr, ':')+1:])
	proxy := smsstest.NewProxy(t, master.Addr)
	slaveData := filepath.Join(sdir, "data")
	slave := kit.StartReplSlave(t, sdir, proxy.Port(), 0)
	kit.WaitConfirming(t, madm, 1)
	if err := kit.Dial(t, master.Addr).Create("ss", 0); err != nil {
		t.Fatal(err)
	}
	w := &semiSyncWriters{t: t, addr: master.Addr, topic: "ss"}
	if a, r := w.run(4, 500*time.Millisecond, "healthy"); a == 0 {
		t.Fatalf("healthy: no write confirmed (%d refused)", r)
	}
	w.checkAcked(slaveData, "healthy")

	// Stopped: the slave keeps its connection but does nothing.
	a, r := w.faultWhileWaiting(madm, 1500*time.Millisecond, "stopped", func() { slave.Cmd.Process.Signal(syscall.SIGSTOP) })
	if r == 0 {
		t.Fatalf("stopped slave: no write refused (%d answered 200)", a)
	}
	w.checkAcked(slaveData, "slave stopped")
	slave.Cmd.Process.Signal(syscall.SIGCONT)
	waitSynchronous(t, w)
	w.checkAcked(slaveData, "after SIGCONT")

	// Cut off: writes waiting when the connection breaks are refused;
	// the slave reconnects (after its 1 s backoff) and confirms again.
	cutAcked, cutRefused := w.faultWhileWaiting(madm, 1500*time.Millisecond, "cut", proxy.Reset)
	if cutRefused == 0 {
		t.Fatalf("cut off: no write refused (%d answered 200)", cutAcked)
	}
	waitSynchronous(t, w)
	w.checkAcked(slaveData, "after the cut")

	// Killed: nothing it had not confirmed may have been answered 200,
	// and after the kill nothing is.
	a, r = w.faultWhileWaiting(madm, 1500*time.Millisecond, "killed", slave.Kill)
	if r == 0 {
		t.Fatalf("killed slave: no write refused (%d answered 200)", a)
	}
	w.checkAcked(slaveData, "slave killed")
	if a, r := w.run(4, 500*time.Millisecond, "dead"); a != 0 || r == 0 {
		t.Fatalf("dead slave: %d answered 200, %d refused", a, r)
	}
	in := kit.SyncInfo(t, madm).Sync
	if in.TimeoutsFail == 0 || in.Degraded || in.Confirming != 0 {
		t.Fatalf("sync info after the faults %+v", in)
	}
	m := kit.Scrape(t, madm)
	if m[kit.Series("smss_replication_sync_timeouts_total", "mode", "fail")] != float64(in.TimeoutsFail) ||
		m[kit.Series("smss_replication_sync_slaves")] != 1 {
		t.Fatalf("metrics disagree with %+v: timeouts %v", in, m[kit.Series("smss_replication_sync_timeouts_total", "mode", "fail")])
	}

	slave = kit.StartReplSlave(t, sdir, proxy.Port(), 0)
	kit.WaitConfirming(t, madm, 1)
	waitSynchronous(t, w)
	w.checkLatency()
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), slaveData, slave, 30*time.Second)
	w.checkAcked(slaveData, "end")
	r2 := kit.SyncInfo(t, madm)
	if len(r2.Slaves) != 1 || !r2.Slaves[0].Confirming || r2.Slaves[0].Confirmed != r2.LastEventID {
		t.Fatalf("slave view %+v", r2.Slaves)
	}
	sm := kit.Scrape(t, madm)
	if sm[kit.Series("smss_replication_slave_confirmed_event_id", "slave", r2.Slaves[0].RemoteAddr)] != float64(r2.LastEventID) {
		t.Fatalf("confirmed position metric missing or wrong")
	}
	t.Logf("master port %d: %d writes acknowledged, %d refused, slowest answer %v, timeouts %d",
		mport, len(w.acked), w.refused, w.slowest, in.TimeoutsFail)
}

// TestSemiSyncDegradeMode: with onSyncTimeout degrade, a stopped slave
// makes a write wait the timeout and then answer 200; the master is
// asynchronous (answering at once) until the slave is back and caught
// up, then synchronous again: observable in the metrics and the API.
func TestSemiSyncDegradeMode(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	kit.ReplConfig(t, mdir, 0, kit.SemiSyncConfig("degrade"))
	kit.ReplConfig(t, sdir, 0, "")
	master := kit.StartArgs(t, mdir)
	madm := kit.AdminAddr(t, master)
	mport, _ := strconv.Atoi(master.Addr[strings.LastIndexByte(master.Addr, ':')+1:])
	slave := kit.StartReplSlave(t, sdir, mport, 0)
	slaveData := filepath.Join(sdir, "data")
	kit.WaitConfirming(t, madm, 1)
	c := kit.Dial(t, master.Addr)
	if err := c.Create("sd", 0); err != nil {
		t.Fatal(err)
	}
	pub := func(body string) time.Duration {
		start := time.Now()
		if err := c.Pub("sd", kit.Record(nil, body)); err != nil {
			t.Fatalf("pub %s: %v", body, err)
		}
		return time.Since(start)
	}
	pub("sync-1")
	if !bytes.Contains(kit.ReplBinlog(t, slaveData), []byte("sync-1")) {
		t.Fatal("a synchronous write answered before the slave had it")
	}
	kit.WaitMetric(t, madm, kit.Series("smss_replication_sync_degraded"), 0)

	slave.Cmd.Process.Signal(syscall.SIGSTOP)
	// The stop takes effect asynchronously: a slave thread still running
	// could confirm the write (seen once: it was answered in 2.5 ms).
	if !smsstest.Poll(10*time.Second, func() bool { return allThreadsStopped(slave.Cmd.Process.Pid) }) {
		t.Fatal("the slave did not stop")
	}
	if took := pub("timed-out"); took < kit.SemiSyncTimeout || took > kit.SemiSyncTimeout+semiSyncMargin {
		t.Fatalf("degrade: the write waited %v (timeout %v)", took, kit.SemiSyncTimeout)
	}
	kit.WaitMetric(t, madm, kit.Series("smss_replication_sync_degraded"), 1)
	if in := kit.SyncInfo(t, madm).Sync; !in.Degraded || in.TimeoutsDegrade != 1 || in.DegradedSince == 0 {
		t.Fatalf("sync info %+v", in)
	}
	// Degraded writes do not wait for the slave. What proves it is the
	// timeout counter, still 1 at the end (a write that waited would time
	// out and count); the wall clock only catches a hang, since a loaded
	// machine can make any single request slow.
	for i := range 5 {
		if took := pub(fmt.Sprintf("async-%d", i)); took >= kit.SemiSyncTimeout+semiSyncMargin {
			t.Fatalf("degraded write %d waited %v", i, took)
		}
	}
	if in := kit.SyncInfo(t, madm).Sync; in.TimeoutsDegrade != 1 {
		t.Fatalf("degraded writes waited for the slave: %d timeouts", in.TimeoutsDegrade)
	}
	slave.Cmd.Process.Signal(syscall.SIGCONT)
	kit.WaitMetric(t, madm, kit.Series("smss_replication_sync_degraded"), 0)
	in := kit.SyncInfo(t, madm).Sync
	if in.Degraded || in.Unconfirmed != 6 || in.Degradations != 1 {
		t.Fatalf("sync info after recovery %+v", in)
	}
	// Synchronous again: a 200 means the slave has it.
	for i := range 5 {
		body := fmt.Sprintf("sync-again-%d", i)
		pub(body)
		if !bytes.Contains(kit.ReplBinlog(t, slaveData), []byte(body)) {
			t.Fatalf("write %s answered before the slave had it after the recovery", body)
		}
	}
	m := kit.Scrape(t, madm)
	if m[kit.Series("smss_replication_sync_timeouts_total", "mode", "degrade")] != 1 ||
		m[kit.Series("smss_replication_sync_unconfirmed_writes_total")] != 6 {
		t.Fatalf("metrics: timeouts %v unconfirmed %v", m[kit.Series("smss_replication_sync_timeouts_total", "mode", "degrade")],
			m[kit.Series("smss_replication_sync_unconfirmed_writes_total")])
	}
}

// TestSemiSyncOverTLS: a slave that logs in and replicates over the
// master's TLS listener confirms like a plain one.
func TestSemiSyncOverTLS(t *testing.T) {
	pki := authtest.NewPKI(t)
	mdir, sdir := t.TempDir(), t.TempDir()
	users := filepath.Join(mdir, "users.json")
	authtest.WriteUsers(t, users,
		authtest.User{Name: "admin", Password: "adm", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "slave", Password: "sl", Roles: []string{auth.RoleReplication}})
	tport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, 0, fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\ntls:\n  listen: 127.0.0.1:%d\n  cert: %s\n  key: %s\n%s",
		users, tport, pki.ServerCert, pki.ServerKey, kit.SemiSyncConfig("fail")))
	master := kit.Start(t, mdir)
	madm := kit.AdminAddr(t, master)
	pwFile := filepath.Join(sdir, "master.pw")
	if err := os.WriteFile(pwFile, []byte("sl\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kit.ReplConfig(t, sdir, 0, fmt.Sprintf("replication:\n  user: slave\n  passwordFile: %s\n  useTLS: true\n  ca: %s\n  serverName: localhost\n",
		pwFile, pki.CAFile))
	kit.StartReplSlave(t, sdir, tport, 0)
	kit.WaitConfirming(t, madm, 1)
	c := kit.Dial(t, master.Addr)
	if err := c.Login(t, "admin", "adm"); err != nil {
		t.Fatal(err)
	}
	if err := c.Create("tls", 0); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		body := fmt.Sprint("over-tls-", i)
		if err := c.Pub("tls", kit.Record(nil, body)); err != nil {
			t.Fatalf("pub %d: %v", i, err)
		}
		if !bytes.Contains(kit.ReplBinlog(t, filepath.Join(sdir, "data")), []byte(body)) {
			t.Fatalf("%s answered 200 before the TLS slave had it", body)
		}
	}
}
