package crash

// Issue 23, must fix 1: a full disk must not kill the server. These tests
// run smss on a small tmpfs (mounting needs root; they skip otherwise).

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

// mountTmpfs mounts a tmpfs of sizeMB at dir (created) for the test; the
// cleanup unmounts it after the test's processes were killed (cleanups run
// in reverse order: call this before starting them).
func mountTmpfs(t *testing.T, dir string, sizeMB int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", sizeMB), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

func freeMiB(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize >> 20
}

// fillTo writes a filler file in dir so that about leaveMiB stay free (0:
// none at all), and returns its path.
func fillTo(t *testing.T, dir string, leaveMiB int64) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	if leaveMiB == 0 {
		chunk = chunk[:4096] // to the last page: write until ENOSPC
	}
	for leaveMiB == 0 || freeMiB(t, dir) > leaveMiB {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
	}
	return path
}

// TestDiskWatermark runs a master on a 128 MiB filesystem with
// store.minFreeMB 40: something fills the disk, writes are refused with
// the documented 400 while reads, subscriptions and deletes go on and
// /readyz and the metric say so; writes resume by themselves when space
// returns; a stop and a restart on the full disk serve reads instead of
// dying.
func TestDiskWatermark(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	mountTmpfs(t, data, 128)
	kit.WriteConfig(t, dir, "  minFreeMB: 40\n"+kit.AdminConfig(""))
	p := kit.Start(t, dir)
	admin := kit.AdminAddr(t, p)
	c := kit.Dial(t, p.Addr)
	for _, topic := range []string{"keep", "doomed"} {
		if err := c.Create(topic, 0); err != nil {
			t.Fatal(err)
		}
	}
	body := strings.Repeat("m", 100<<10)
	for i := range 10 {
		if err := c.Pub("keep", kit.Record(nil, fmt.Sprintf("%02d%s", i, body))); err != nil {
			t.Fatal(err)
		}
	}
	kit.WaitMetric(t, admin, "smss_disk_writes_refused", 0)

	filler := fillTo(t, data, 45)
	// Once a reading has seen the filler, the writes that follow are
	// counted against it and refused before the disk is full.
	if !smsstest.Poll(10*time.Second, func() bool { return kit.Scrape(t, admin)["smss_disk_free_bytes"] < 46<<20 }) {
		t.Fatalf("no reading of the free space after the filler")
	}
	var refusal string
	stored, nospace := 10, 0
	if !smsstest.Poll(20*time.Second, func() bool {
		err := c.Pub("keep", kit.Record(nil, fmt.Sprintf("%02d%s", stored, body)))
		switch text := kit.BizText(err); {
		case err == nil:
			stored++
			return false
		case strings.Contains(text, "no space left on device"):
			// The estimate between two readings fell short: the write
			// failed cleanly (and the next reading comes at once).
			nospace++
			return false
		default:
			refusal = text
			return true
		}
	}) {
		t.Fatalf("publishing was never refused with %d MiB free:\n%s", freeMiB(t, data), p.Out.String())
	}
	if !strings.HasPrefix(refusal, "disk almost full: ") || !strings.HasSuffix(refusal, " MiB free, store.minFreeMB 40") {
		t.Fatalf("refusal %q", refusal)
	}
	if nospace > 0 {
		t.Errorf("%d writes ran into ENOSPC before the watermark refused them", nospace)
	}
	t.Logf("%d messages stored before the refusal %q", stored, refusal)
	if err := c.Create("new", 0); !strings.HasPrefix(kit.BizText(err), "disk almost full") {
		t.Errorf("create while low: %s", kit.BizText(err))
	}
	if err := c.Delay("keep", 5000, kit.Record(nil, "later")); !strings.HasPrefix(kit.BizText(err), "disk almost full") {
		t.Errorf("delay while low: %s", kit.BizText(err))
	}
	if err := c.InSync(); err != nil {
		t.Fatalf("connection after the refusals: %v", err)
	}
	if code, text := kit.AdminGet(t, admin, "", "/readyz"); code != 503 || !strings.Contains(text, "disk almost full") {
		t.Errorf("/readyz while low: %d %q", code, text)
	}
	kit.WaitMetric(t, admin, "smss_disk_writes_refused", 1)
	if err := c.Del("doomed"); err != nil {
		t.Errorf("delete while low: %v", err)
	}
	if got := kit.ReadAll(t, p.Addr, "keep", stored); len(got) != stored {
		t.Fatalf("read %d of %d messages while low", len(got), stored)
	}

	// Something else takes the rest: a stop and a restart on a full disk
	// (0 bytes free) must neither die (SIGBUS in badger's memory-mapped
	// files) nor refuse to serve reads.
	fillTo(t, data, 0)
	p.Term()
	p = kit.Start(t, dir)
	admin = kit.AdminAddr(t, p)
	c = kit.Dial(t, p.Addr)
	if err := c.Pub("keep", kit.Record(nil, "refused")); !strings.HasPrefix(kit.BizText(err), "disk almost full") {
		t.Errorf("pub after a restart below the watermark: %s", kit.BizText(err))
	}
	if got := kit.ReadAll(t, p.Addr, "keep", stored); len(got) != stored {
		t.Fatalf("read %d of %d messages after a restart below the watermark", len(got), stored)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if !smsstest.Poll(20*time.Second, func() bool { return c.Pub("keep", kit.Record(nil, "after")) == nil }) {
		t.Fatalf("writes did not resume with %d MiB free:\n%s", freeMiB(t, data), p.Out.String())
	}
	if code, text := kit.AdminGet(t, admin, "", "/readyz"); code != 200 {
		t.Errorf("/readyz after space returned: %d %q", code, text)
	}
	kit.WaitMetric(t, admin, "smss_disk_writes_refused", 0)
	p.Term()
}

// TestSlaveDiskFullPausesReplication: a slave whose disk fills pauses
// replication and resumes when space returns (it used to stop for good and
// need a restart), ending byte-identical to its master.
func TestSlaveDiskFullPausesReplication(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	sdata := filepath.Join(sdir, "data")
	mountTmpfs(t, sdata, 48)
	mport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, "")
	kit.ReplConfig(t, sdir, 0, "")
	cfgPath := filepath.Join(sdir, "config.yaml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = []byte(strings.Replace(string(cfg), "  flushLevel: 1\n", "  flushLevel: 1\n  minFreeMB: 2\n", 1))
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	m := kit.StartArgs(t, mdir)
	c := kit.Dial(t, m.Addr)
	if err := c.Create("r", 0); err != nil {
		t.Fatal(err)
	}
	s := kit.StartReplSlave(t, sdir, mport, 0)
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), sdata, s, 30*time.Second)

	// Leave 3 MiB; the master then stores 8 MiB, which the slave writes
	// twice (binlog and topic file): it runs out of space mid-stream.
	filler := fillTo(t, sdata, 3)
	body := strings.Repeat("s", 512<<10)
	for i := range 16 {
		if err := c.Pub("r", kit.Record(nil, fmt.Sprintf("%02d%s", i, body))); err != nil {
			t.Fatal(err)
		}
	}
	if !smsstest.Poll(30*time.Second, func() bool {
		return strings.Contains(s.Out.String(), "disk almost full") || strings.Contains(s.Out.String(), "replication paused")
	}) {
		t.Fatalf("the slave did not pause:\n%s", kit.Tail(s.Out.String(), 4000))
	}
	if strings.Contains(s.Out.String(), "REPLICATION STOPPED") {
		t.Fatalf("replication stopped for good:\n%s", kit.Tail(s.Out.String(), 4000))
	}
	for _, line := range strings.Split(s.Out.String(), "\n") {
		if strings.Contains(line, "disk almost full") || strings.Contains(line, "replication paused") {
			t.Logf("slave: %.200s", line)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), sdata, s, 60*time.Second)
	if a, b := kit.SubscribeAll(t, m.Addr, "r"), kit.SubscribeAll(t, s.Addr, "r"); fmt.Sprint(a) != fmt.Sprint(b) || len(a) != 16 {
		t.Fatalf("master has %d messages, slave %d (or they differ)", len(a), len(b))
	}
	select {
	case <-s.Exited():
		t.Fatalf("slave exited: %v\n%s", s.Err(), kit.Tail(s.Out.String(), 4000))
	default:
	}
	s.Term()
	m.Term()
}

// fillToLastPage fills dir's filesystem and gives one page back: less than
// badger needs to open for writing. It returns the filler's path.
func fillToLastPage(t *testing.T, dir string) string {
	t.Helper()
	filler := fillTo(t, dir, 0)
	st, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, st.Size()-4096); err != nil {
		t.Fatal(err)
	}
	return filler
}

// dataState hashes every file under dir but the filler.
func dataState(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "filler" {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[p] = sha256.Sum256(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDiskFullStartReadOnly: a server stopped cleanly, whose disk is then
// filled to its last page with no reserve file left, used to be refused at
// start (and before that died with SIGBUS in badger). It starts read-only:
// every stored message is delivered, every write gets the read-only 400,
// /readyz and smss_read_only say a restart is needed, no file of the data
// directory changes, and a restart once space is freed accepts writes.
func TestDiskFullStartReadOnly(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	mountTmpfs(t, data, 32)
	kit.WriteConfig(t, dir, "  minFreeMB: 16\n"+kit.AdminConfig(""))
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	for _, topic := range []string{"keep", "other"} {
		if err := c.Create(topic, 0); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for i := range 50 {
		want = append(want, fmt.Sprintf("m%02d", i))
		if err := c.Pub("keep", kit.Record(nil, want[i])); err != nil {
			t.Fatal(err)
		}
	}
	p.Term()
	if err := os.Remove(filepath.Join(data, "smss.reserve")); err != nil {
		t.Fatalf("the reserve file: %v", err)
	}
	filler := fillToLastPage(t, data)
	before := dataState(t, data)

	p = kit.Start(t, dir)
	admin := kit.AdminAddr(t, p)
	if !strings.Contains(p.Out.String(), "STARTED READ-ONLY") {
		t.Errorf("no read-only start line:\n%s", p.Out.String())
	}
	if got := kit.ReadAll(t, p.Addr, "keep", len(want)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read-only start delivered %q, want %q", got, want)
	}
	c = kit.Dial(t, p.Addr)
	for _, w := range []struct {
		name string
		call func() error
	}{
		{"pub", func() error { return c.Pub("keep", kit.Record(nil, "refused")) }},
		{"delay", func() error { return c.Delay("keep", 5000, kit.Record(nil, "refused")) }},
		{"create", func() error { return c.Create("new", 0) }},
		{"delete", func() error { return c.Del("other") }},
	} {
		text := kit.BizText(w.call())
		if !strings.HasPrefix(text, "disk almost full: started read-only with ") || !strings.Contains(text, "restart the server to resume writes") {
			t.Errorf("%s on a read-only start: %q, want the read-only 400", w.name, text)
		}
	}
	if err := c.InSync(); err != nil {
		t.Fatalf("connection after the refusals: %v", err)
	}
	if code, text := kit.AdminGet(t, admin, "", "/readyz"); code != 503 || !strings.Contains(text, "started read-only on a full disk, not ready for writes") || !strings.Contains(text, "restart") {
		t.Errorf("/readyz on a read-only start: %d %q", code, text)
	}
	kit.WaitMetric(t, admin, "smss_read_only", 1)
	kit.WaitMetric(t, admin, "smss_disk_writes_refused", 1)

	// Space returning does not resume writes: the log and the metric say
	// to restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if !smsstest.Poll(20*time.Second, func() bool { return strings.Contains(p.Out.String(), "restart it to resume writes") }) {
		t.Fatalf("no restart hint after space returned:\n%s", p.Out.String())
	}
	if err := c.Pub("keep", kit.Record(nil, "refused")); !strings.Contains(kit.BizText(err), "started read-only") {
		t.Errorf("pub after space returned, before the restart: %s", kit.BizText(err))
	}
	kit.WaitMetric(t, admin, "smss_read_only", 1)
	select {
	case <-p.Exited():
		t.Fatalf("the read-only server exited: %v\n%s", p.Err(), p.Out.String())
	default:
	}
	p.Term()
	after := dataState(t, data)
	for path, sum := range before {
		if after[path] != sum {
			t.Errorf("the read-only run changed or removed %s", path)
		}
	}
	for path := range after {
		if _, ok := before[path]; !ok {
			t.Errorf("the read-only run created %s", path)
		}
	}

	p = kit.Start(t, dir)
	c = kit.Dial(t, p.Addr)
	if err := c.Pub("keep", kit.Record(nil, "after")); err != nil {
		t.Fatalf("pub after a restart with space: %v", err)
	}
	if got := kit.ReadAll(t, p.Addr, "keep", len(want)+1); len(got) != len(want)+1 || got[len(want)] != "after" {
		t.Fatalf("after the restart: %q", got)
	}
	p.Term()
}

// TestDiskFullStartAfterCrashRefused: a read-only start needs a clean
// shutdown (badger replays a crashed run's memtable log only when it opens
// for writing, and recovery may have to cut torn tails). A data directory
// without a reserve file, left by a killed server on a disk filled to its
// last pages, is refused with an error naming the free space and why, and
// starts and serves once space is freed.
func TestDiskFullStartAfterCrashRefused(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	mountTmpfs(t, data, 32)
	kit.WriteConfig(t, dir, "  minFreeMB: 0\n")
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	if err := c.Create("keep", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Pub("keep", kit.Record(nil, "kept")); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if _, err := os.Stat(filepath.Join(data, "smss.reserve")); !os.IsNotExist(err) {
		t.Fatalf("a reserve file with the guard off: %v", err)
	}

	filler := fillToLastPage(t, data)
	kit.WriteConfig(t, dir, "  minFreeMB: 16\n")
	cmd := smsstest.SmssCommand(t, dir)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		out, err = cmd.CombinedOutput()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("a start on a full disk neither served nor ended within 30 s:\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "disk full: ") || !strings.Contains(string(out), "KiB free") ||
		!strings.Contains(string(out), "clean shutdown") {
		t.Fatalf("start on a full disk after a crash: %v, want exit 1 naming the free space and the unclean shutdown:\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if _, why, ok := strings.Cut(line, "a read-only start"); ok {
			t.Logf("refused: a read-only start%s", why)
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	p = kit.Start(t, dir)
	if got := kit.ReadAll(t, p.Addr, "keep", 1); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("after space returned: %q", got)
	}
	p.Term()
}

// TestSlaveDiskFullStartReadOnly: a slave stopped cleanly and restarted on
// a disk filled to its last page (no reserve file) starts read-only: it
// serves what it replicated, does not replicate (it cannot write a block)
// and says so, and changes no data file.
func TestSlaveDiskFullStartReadOnly(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	sdata := filepath.Join(sdir, "data")
	mountTmpfs(t, sdata, 32)
	mport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, "")
	kit.ReplConfig(t, sdir, 0, "")
	cfgPath := filepath.Join(sdir, "config.yaml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = []byte(strings.Replace(string(cfg), "  flushLevel: 1\n", "  flushLevel: 1\n  minFreeMB: 16\n", 1))
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	m := kit.StartArgs(t, mdir)
	c := kit.Dial(t, m.Addr)
	if err := c.Create("r", 0); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := c.Pub("r", kit.Record(nil, fmt.Sprintf("r%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	s := kit.StartReplSlave(t, sdir, mport, 0)
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), sdata, s, 30*time.Second)
	s.Term()
	if err := os.Remove(filepath.Join(sdata, "smss.reserve")); err != nil {
		t.Fatalf("the reserve file: %v", err)
	}
	fillToLastPage(t, sdata)
	before := dataState(t, sdata)
	for i := 10; i < 15; i++ {
		if err := c.Pub("r", kit.Record(nil, fmt.Sprintf("r%02d", i))); err != nil {
			t.Fatal(err)
		}
	}

	s = kit.StartReplSlave(t, sdir, mport, 0)
	if !strings.Contains(s.Out.String(), "REPLICATION PAUSED: this slave started read-only") {
		t.Fatalf("no pause line:\n%s", kit.Tail(s.Out.String(), 4000))
	}
	if got := kit.ReadAll(t, s.Addr, "r", 10); len(got) != 10 || got[9] != "r09" {
		t.Fatalf("the read-only slave delivered %q", got)
	}
	if strings.Contains(s.Out.String(), "REPLICATION STOPPED") {
		t.Fatalf("replication ran:\n%s", kit.Tail(s.Out.String(), 4000))
	}
	s.Term()
	after := dataState(t, sdata)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("the read-only slave changed its data directory")
	}
	m.Term()
}
