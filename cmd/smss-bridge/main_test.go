package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bridge.yaml")
	os.WriteFile(cfg, []byte("master: [\"127.0.0.1:1\"]\nnats:\n  url: nats://127.0.0.1:1\n  replicas: 9\n"), 0o644)
	unknown := filepath.Join(dir, "unknown.yaml")
	os.WriteFile(unknown, []byte("mastr: x\n"), 0o644)
	cases := []struct {
		name string
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{"help", []string{"--help"}, 0, "--master HOST:PORT"},
		{"help lists flags", []string{"-h"}, 0, "-subject-prefix"},
		{"no master", []string{"--nats", "nats://x:1"}, 2, "master: at least one"},
		{"no target", []string{"--master", "h:1"}, 2, "nats.url or kafka.brokers"},
		{"both targets", []string{"--master", "h:1", "--nats", "nats://x:1", "--kafka", "k:1"}, 2, "one target per bridge"},
		{"bad pattern", []string{"--master", "h:1", "--nats", "nats://x:1", "--topics", "a*b"}, 2, "topics"},
		{"bad from", []string{"--master", "h:1", "--nats", "nats://x:1", "--from", "x"}, 2, "--from"},
		{"yaml key named", []string{"--config", cfg}, 2, "nats.replicas"},
		{"unknown yaml key", []string{"--config", unknown}, 2, "mastr"},
		{"stray argument", []string{"extra"}, 2, "unexpected argument"},
		{"bad mode", []string{"--master", "h:1", "--kafka", "k:1", "--kafka-topic-mode", "many"}, 2, "kafka.topicMode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(c.args, &out, &errb)
			if code != c.code || !strings.Contains(out.String()+errb.String(), c.out) {
				t.Fatalf("exit %d (want %d), output:\n%s%s\nwant it to contain %q", code, c.code, out.String(), errb.String(), c.out)
			}
		})
	}
}
