package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

const waitLimit = 15 * time.Second

// sink collects output and lets a test wait for a line to appear.
type sink struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newSink() *sink { return &sink{changed: make(chan struct{}, 1)} }

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (s *sink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitLine returns the first line containing substr, failing the test after
// waitLimit.
func (s *sink) waitLine(t *testing.T, substr string) string {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	for {
		for _, line := range strings.Split(s.String(), "\n") {
			if strings.Contains(line, substr) {
				return line
			}
		}
		select {
		case <-s.changed:
		case <-timer.C:
			t.Fatalf("no line containing %q; output:\n%s", substr, s.String())
		}
	}
}

type instance struct {
	out, errOut *sink
	sig         chan os.Signal
	done        chan int
	addr        string
	dir         string
}

func writeConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	path := filepath.Join(dir, "smss.yaml")
	body := "port: 0\nstore:\n  path: " + strconv.Quote(filepath.Join(dir, "data")) + "\n" + extra
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var addrRe = regexp.MustCompile(`addr=(\S+)`)

// start runs the server with a fresh data directory and waits until it
// listens.
func start(t *testing.T, extraConfig string, args ...string) *instance {
	t.Helper()
	dir := t.TempDir()
	writeConfig(t, dir, extraConfig)
	return launch(t, dir, args...)
}

// launch runs the server with the config file in dir and waits until it
// listens. The test's cleanup stops it if the test did not.
func launch(t *testing.T, dir string, args ...string) *instance {
	t.Helper()
	in := &instance{out: newSink(), errOut: newSink(), sig: make(chan os.Signal, 2), done: make(chan int, 1), dir: dir}
	args = append([]string{"-config", filepath.Join(dir, "smss.yaml")}, args...)
	go func() {
		in.done <- run(args, in.out, in.errOut, in.sig)
		close(in.done) // later receives return at once
	}()
	t.Cleanup(func() {
		select {
		case <-in.done:
		default:
			in.sig <- syscall.SIGTERM
			<-in.done
		}
	})
	m := addrRe.FindStringSubmatch(in.out.waitLine(t, `msg="smss listening"`))
	if m == nil {
		t.Fatalf("listening line without addr:\n%s", in.out.String())
	}
	in.addr = m[1]
	return in
}

// stop signals the instance and returns its exit status.
func (in *instance) stop(t *testing.T, s os.Signal) int {
	t.Helper()
	in.sig <- s
	select {
	case code := <-in.done:
		return code
	case <-time.After(waitLimit):
		t.Fatalf("run did not return after %v; output:\n%s", s, in.out.String())
		return -1
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(waitLimit)); err != nil {
		t.Fatal(err)
	}
	return c
}

func roundTrip(t *testing.T, c net.Conn, req []byte, err error) error {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	_, rerr := protocol.ReadReply(c, protocol.ReplyPlain, 0)
	return rerr
}

func TestServeAndGracefulShutdown(t *testing.T) {
	in := start(t, "log:\n  sample: 1\n")
	if line := in.out.waitLine(t, `msg="smss listening"`); !strings.Contains(line, "role=master") ||
		!strings.Contains(line, "data="+filepath.Join(in.dir, "data")) {
		t.Errorf("listening line lacks role/data dir: %s", line)
	}
	in.out.waitLine(t, `msg="config in effect"`)
	if strings.Contains(in.out.String(), "remote clients can connect") {
		t.Error("loopback listener reported as exposed")
	}

	c := dial(t, in.addr)
	alive, err := protocol.AppendAlive(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(alive); err != nil {
		t.Fatal(err)
	}
	var reply [10]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		t.Fatal(err)
	}
	if want := [10]byte{0xc9}; reply != want {
		t.Fatalf("alive reply % x, want % x", reply, want)
	}
	create, err := protocol.AppendCreate(nil, []byte("order"), nil, 0)
	if err := roundTrip(t, c, create, err); err != nil {
		t.Fatalf("create: %v", err)
	}
	pub, err := protocol.AppendPub(nil, []byte("order"), nil, record("hello"))
	if err := roundTrip(t, c, pub, err); err != nil {
		t.Fatalf("pub: %v", err)
	}

	if code := in.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM; output:\n%s", code, in.out.String())
	}
	in.out.waitLine(t, `msg="smss stopped"`)
	if _, err := os.Stat(filepath.Join(in.dir, "data")); err != nil {
		t.Fatalf("data dir: %v", err)
	}
	// The data survives a restart on the same directory.
	again := launch(t, in.dir)
	c = dial(t, again.addr)
	if err := roundTrip(t, c, create, nil); err == nil || !strings.Contains(err.Error(), "exist") {
		t.Fatalf("re-create after restart: %v, want topic exists", err)
	}
	if code := again.stop(t, syscall.SIGINT); code != 0 {
		t.Fatalf("exit %d after SIGINT", code)
	}
}

// record encodes one message record (docs/protocol.md §1.4) without headers.
func record(body string) []byte {
	b := make([]byte, 8, 8+len(body))
	b[0], b[1], b[2], b[3] = byte(len(body)), byte(len(body)>>8), byte(len(body)>>16), byte(len(body)>>24)
	return append(b, body...)
}

func TestSlaveRoleRefusesWritesAndSaysSo(t *testing.T) {
	// A loopback port nothing listens on: the slave keeps retrying.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	masterPort := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	in := start(t, "", "-role", "slave", "-host", "127.0.0.1", "-port", masterPort, "-event", "7")
	if line := in.out.waitLine(t, `msg="smss listening"`); !strings.Contains(line, "role=slave") {
		t.Errorf("listening line: %s", line)
	}
	line := in.out.waitLine(t, "replication interrupted; retrying")
	if !strings.Contains(line, "127.0.0.1:"+masterPort) {
		t.Errorf("retry line does not name the master: %s", line)
	}
	c := dial(t, in.addr)
	create, err := protocol.AppendCreate(nil, []byte("t"), nil, 0)
	err = roundTrip(t, c, create, err)
	var biz *protocol.BizError
	if !errors.As(err, &biz) {
		t.Fatalf("create on a slave: %v, want a 400 business error", err)
	}
	if code := in.stop(t, syscall.SIGINT); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestMasterIgnoresSlaveFlags(t *testing.T) {
	in := start(t, "", "-host", "10.0.0.1")
	in.out.waitLine(t, "-host, -port and -event apply to -role slave only")
}

func TestMasterIgnoresRejoin(t *testing.T) {
	in := start(t, "", "-rejoin")
	in.out.waitLine(t, "-rejoin applies to -role slave only")
}

func TestAllInterfacesWarning(t *testing.T) {
	in := start(t, "host: 0.0.0.0\n")
	line := in.out.waitLine(t, "remote clients can connect")
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "all interfaces") {
		t.Errorf("warning line: %s", line)
	}
}

func TestLogDirectory(t *testing.T) {
	dir := t.TempDir()
	logDir := filepath.Join(dir, "logs")
	out, errOut := newSink(), newSink()
	sig, done := make(chan os.Signal, 1), make(chan int, 1)
	args := []string{"-config", writeConfig(t, dir, "log:\n  path: "+strconv.Quote(logDir)+"\n")}
	go func() { done <- run(args, out, errOut, sig) }()

	// Nothing goes to the console; wait for the file to show the line.
	deadline := time.Now().Add(waitLimit)
	for {
		data, _ := os.ReadFile(filepath.Join(logDir, "out.log"))
		if bytes.Contains(data, []byte(`msg="smss listening"`)) {
			break
		}
		if time.Now().After(deadline) {
			sig <- syscall.SIGTERM
			<-done
			t.Fatalf("out.log never showed the listening line; it holds:\n%s", data)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sig <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
	if out.String() != "" || errOut.String() != "" {
		t.Errorf("console output with a log directory: %q %q", out.String(), errOut.String())
	}
}

func TestStartupErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)

	for _, tc := range []struct {
		name   string
		config string // appended to a valid base; "" = base only
		args   []string
		code   int
		stderr string // expected in stderr
		stdout string // expected in stdout (the log)
	}{
		{name: "invalid value", config: "worker:\n  buffSize: 0\n", code: 2, stderr: "config: worker.buffSize must be >= 1 (got 0)"},
		{name: "unknown key", config: "stor:\n  path: x\n", code: 2, stderr: `unknown key "stor"`},
		{name: "alive too long", config: "timeout:\n  server:\n    alive: 35000\n", code: 2, stderr: "timeout.server.alive"},
		{name: "missing config file", args: []string{"-config", "/nonexistent/smss.yaml"}, code: 2, stderr: "nonexistent"},
		{name: "unknown flag", args: []string{"-nope"}, code: 2, stderr: "-nope"},
		{name: "negative event", args: []string{"-event", "-1"}, code: 2, stderr: "-event must be >= 0"},
		{name: "bad master port", args: []string{"-port", "70000"}, code: 2, stderr: "-port must be between"},
		{name: "unknown role", args: []string{"-role", "slav"}, code: 2, stderr: `smss: -role must be master, slave or auto (got "slav")`},
		{name: "stray argument", args: []string{"extra"}, code: 2, stderr: `unexpected argument "extra"`},
		{name: "help", args: []string{"-h"}, code: 0, stderr: "usage: smss"},
		{name: "port in use", config: "port: " + busyPort + "\n", code: 1, stdout: "cannot listen"},
		{name: "admin port in use", config: "admin:\n  listen: 127.0.0.1:" + busyPort + "\n", code: 1, stdout: "cannot start the admin endpoint"},
		{name: "admin token short", config: "admin:\n  listen: 127.0.0.1:0\n  token: abc\n", code: 2, stderr: "admin.token must be at least 16 characters (got 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "smss.yaml")
			body := "store:\n  path: " + strconv.Quote(filepath.Join(dir, "data")) + "\n" + tc.config
			if !strings.Contains(tc.config, "port:") {
				body = "port: 0\n" + body
			}
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"-config", path}, tc.args...)
			out, errOut := newSink(), newSink()
			code := run(args, out, errOut, make(chan os.Signal))
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q; stdout %q", code, tc.code, errOut.String(), out.String())
			}
			if !strings.Contains(errOut.String(), tc.stderr) {
				t.Errorf("stderr %q lacks %q", errOut.String(), tc.stderr)
			}
			if !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout %q lacks %q", out.String(), tc.stdout)
			}
		})
	}
}
