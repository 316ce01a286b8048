package logging

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/config"
)

func TestConsole(t *testing.T) {
	for _, stream := range []string{"stdout", "stderr"} {
		var out, errOut bytes.Buffer
		log, closer, err := NewTo(config.Log{Path: stream}, &out, &errOut)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("hello", "k", 1)
		if err := closer.Close(); err != nil {
			t.Fatal(err)
		}
		got, other := out.String(), errOut.String()
		if stream == "stderr" {
			got, other = other, got
		}
		if !strings.Contains(got, "msg=hello k=1") || other != "" {
			t.Fatalf("%s: got %q, other stream %q", stream, got, other)
		}
	}
}

func TestEmptyPathRejected(t *testing.T) {
	if _, _, err := New(config.Log{}); err == nil {
		t.Fatal("empty log.path accepted")
	}
}

func TestFileOutputAndRotation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs", "nested") // created by New
	cfg := config.Log{Path: dir, Rotate: config.Rotate{MaxSize: 1, MaxBackups: 1, MaxAge: 1}}
	log, closer, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()

	log.Info("first line", "n", 0)
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "msg=\"first line\" n=0") {
		t.Fatalf("out.log holds %q", data)
	}

	// ~3.5 MB through a 1 MB limit: at least three rotations, of which
	// maxBackups=1 keeps one backup (pruned asynchronously by lumberjack).
	pad := strings.Repeat("x", 1000)
	for i := range 3500 {
		log.Info("filler", "i", i, "pad", pad)
	}
	// The pruning goroutine may be slow to run on a loaded machine: the
	// deadline only bounds a failure.
	deadline := time.Now().Add(20 * time.Second)
	for {
		backups := backupsIn(t, dir)
		if len(backups) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backups %v, want exactly 1 (maxBackups=1)", backups)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 1<<20 || st.Size() == 0 {
		t.Fatalf("out.log is %d bytes, want 1..%d", st.Size(), 1<<20)
	}
}

func backupsIn(t *testing.T, dir string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, "out-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	return matches
}

func TestUnwritableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root can write anywhere")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	if _, _, err := New(config.Log{Path: filepath.Join(dir, "logs"), Rotate: config.Rotate{MaxSize: 1}}); err == nil {
		t.Fatal("no error for an unwritable log directory")
	}
}

func TestPathIsAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := New(config.Log{Path: file, Rotate: config.Rotate{MaxSize: 1}})
	if err == nil || !strings.Contains(err.Error(), "log directory") {
		t.Fatalf("got %v, want a log directory error", err)
	}
}
