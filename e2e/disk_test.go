package e2e

// Issue 23, must fix 1: a full disk must not kill the server. These tests
// run smss on a small tmpfs (mounting needs root; they skip otherwise).

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	writeConfig(t, dir, "  minFreeMB: 40\n"+adminConfig(""))
	p := start(t, dir)
	admin := adminAddr(t, p)
	c := dial(t, p.addr)
	for _, topic := range []string{"keep", "doomed"} {
		if err := c.create(topic, 0); err != nil {
			t.Fatal(err)
		}
	}
	body := strings.Repeat("m", 100<<10)
	for i := range 10 {
		if err := c.pub("keep", record(nil, fmt.Sprintf("%02d%s", i, body))); err != nil {
			t.Fatal(err)
		}
	}
	waitMetric(t, admin, "smss_disk_writes_refused", 0)

	filler := fillTo(t, data, 45)
	// Once a reading has seen the filler, the writes that follow are
	// counted against it and refused before the disk is full.
	if !waitUntil(10*time.Second, func() bool { return scrape(t, admin)["smss_disk_free_bytes"] < 46<<20 }) {
		t.Fatalf("no reading of the free space after the filler")
	}
	var refusal string
	stored, nospace := 10, 0
	if !waitUntil(20*time.Second, func() bool {
		err := c.pub("keep", record(nil, fmt.Sprintf("%02d%s", stored, body)))
		switch text := bizText(err); {
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
		t.Fatalf("publishing was never refused with %d MiB free:\n%s", freeMiB(t, data), p.out.String())
	}
	if !strings.HasPrefix(refusal, "disk almost full: ") || !strings.HasSuffix(refusal, " MiB free, store.minFreeMB 40") {
		t.Fatalf("refusal %q", refusal)
	}
	if nospace > 0 {
		t.Errorf("%d writes ran into ENOSPC before the watermark refused them", nospace)
	}
	t.Logf("%d messages stored before the refusal %q", stored, refusal)
	if err := c.create("new", 0); !strings.HasPrefix(bizText(err), "disk almost full") {
		t.Errorf("create while low: %s", bizText(err))
	}
	if err := c.delay("keep", 5000, record(nil, "later")); !strings.HasPrefix(bizText(err), "disk almost full") {
		t.Errorf("delay while low: %s", bizText(err))
	}
	if err := c.inSync(); err != nil {
		t.Fatalf("connection after the refusals: %v", err)
	}
	if code, text := adminGet(t, admin, "", "/readyz"); code != 503 || !strings.Contains(text, "disk almost full") {
		t.Errorf("/readyz while low: %d %q", code, text)
	}
	waitMetric(t, admin, "smss_disk_writes_refused", 1)
	if err := c.del("doomed"); err != nil {
		t.Errorf("delete while low: %v", err)
	}
	if got := readAll(t, p.addr, "keep", stored); len(got) != stored {
		t.Fatalf("read %d of %d messages while low", len(got), stored)
	}

	// Something else takes the rest: a stop and a restart on a full disk
	// (0 bytes free) must neither die (SIGBUS in badger's memory-mapped
	// files) nor refuse to serve reads.
	fillTo(t, data, 0)
	p.stop()
	p = start(t, dir)
	admin = adminAddr(t, p)
	c = dial(t, p.addr)
	if err := c.pub("keep", record(nil, "refused")); !strings.HasPrefix(bizText(err), "disk almost full") {
		t.Errorf("pub after a restart below the watermark: %s", bizText(err))
	}
	if got := readAll(t, p.addr, "keep", stored); len(got) != stored {
		t.Fatalf("read %d of %d messages after a restart below the watermark", len(got), stored)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(20*time.Second, func() bool { return c.pub("keep", record(nil, "after")) == nil }) {
		t.Fatalf("writes did not resume with %d MiB free:\n%s", freeMiB(t, data), p.out.String())
	}
	if code, text := adminGet(t, admin, "", "/readyz"); code != 200 {
		t.Errorf("/readyz after space returned: %d %q", code, text)
	}
	waitMetric(t, admin, "smss_disk_writes_refused", 0)
	p.stop()
}

// TestSlaveDiskFullPausesReplication: a slave whose disk fills pauses
// replication and resumes when space returns (it used to stop for good and
// need a restart), ending byte-identical to its master.
func TestSlaveDiskFullPausesReplication(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	sdata := filepath.Join(sdir, "data")
	mountTmpfs(t, sdata, 48)
	mport := freePort(t)
	replConfig(t, mdir, mport, "")
	replConfig(t, sdir, 0, "")
	cfgPath := filepath.Join(sdir, "config.yaml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = []byte(strings.Replace(string(cfg), "  flushLevel: 1\n", "  flushLevel: 1\n  minFreeMB: 2\n", 1))
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	m := startArgs(t, mdir)
	c := dial(t, m.addr)
	if err := c.create("r", 0); err != nil {
		t.Fatal(err)
	}
	s := startReplSlave(t, sdir, mport, 0)
	waitReplicated(t, filepath.Join(mdir, "data"), sdata, s, 30*time.Second)

	// Leave 3 MiB; the master then stores 8 MiB, which the slave writes
	// twice (binlog and topic file): it runs out of space mid-stream.
	filler := fillTo(t, sdata, 3)
	body := strings.Repeat("s", 512<<10)
	for i := range 16 {
		if err := c.pub("r", record(nil, fmt.Sprintf("%02d%s", i, body))); err != nil {
			t.Fatal(err)
		}
	}
	if !waitUntil(30*time.Second, func() bool {
		return strings.Contains(s.out.String(), "disk almost full") || strings.Contains(s.out.String(), "replication paused")
	}) {
		t.Fatalf("the slave did not pause:\n%s", tail(s.out.String(), 4000))
	}
	if strings.Contains(s.out.String(), "REPLICATION STOPPED") {
		t.Fatalf("replication stopped for good:\n%s", tail(s.out.String(), 4000))
	}
	for _, line := range strings.Split(s.out.String(), "\n") {
		if strings.Contains(line, "disk almost full") || strings.Contains(line, "replication paused") {
			t.Logf("slave: %.200s", line)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitReplicated(t, filepath.Join(mdir, "data"), sdata, s, 60*time.Second)
	if a, b := subscribeAll(t, m.addr, "r"), subscribeAll(t, s.addr, "r"); fmt.Sprint(a) != fmt.Sprint(b) || len(a) != 16 {
		t.Fatalf("master has %d messages, slave %d (or they differ)", len(a), len(b))
	}
	select {
	case <-s.exited:
		t.Fatalf("slave exited: %v\n%s", s.err, tail(s.out.String(), 4000))
	default:
	}
	s.stop()
	m.stop()
}

// TestDiskFullStartWithoutReserve: a data directory that has no reserve
// file (the original server's, or one run with store.minFreeMB 0) on a disk
// filled to its last pages used to die at start with SIGBUS in badger's
// memory-mapped memtable. It is refused with an error naming the free
// space, and starts and serves reads once space is freed.
func TestDiskFullStartWithoutReserve(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	mountTmpfs(t, data, 32)
	writeConfig(t, dir, "  minFreeMB: 0\n")
	p := start(t, dir)
	c := dial(t, p.addr)
	if err := c.create("keep", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.pub("keep", record(nil, "kept")); err != nil {
		t.Fatal(err)
	}
	p.stop()
	if _, err := os.Stat(filepath.Join(data, "smss.reserve")); !os.IsNotExist(err) {
		t.Fatalf("a reserve file with the guard off: %v", err)
	}

	// Leave one page: badger's start needs more.
	filler := fillTo(t, data, 0)
	st, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, st.Size()-4096); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, dir, "  minFreeMB: 16\n")
	cmd := exec.Command(smssBin, "-config", filepath.Join(dir, "config.yaml"))
	cmd.Dir = dir
	done := make(chan struct{})
	var out []byte
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
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "disk full: ") || !strings.Contains(string(out), "KiB free") {
		t.Fatalf("start on a full disk: %v, want exit 1 naming the free space:\n%s", err, out)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	p = start(t, dir)
	if got := readAll(t, p.addr, "keep", 1); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("after space returned: %q", got)
	}
	p.stop()
}
