package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

// ctlBin is the smssctl binary under test, built from this package; the
// smss it talks to comes from the test kit.
var ctlBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "smssctl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctlBin = filepath.Join(dir, "smssctl")
	if out, err := exec.Command("go", "build", "-o", ctlBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build .: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	smsstest.RemoveBinaries()
	os.Exit(code)
}

// startServer runs smss on a free loopback port and returns its address.
func startServer(t *testing.T) string {
	t.Helper()
	addr, _ := startServerWith(t, "")
	return addr
}

// startServerWith is startServer with extra config lines; it also returns
// the server's output so far.
func startServerWith(t *testing.T, extra string) (string, *smsstest.SyncBuffer) {
	t.Helper()
	return startServerArgs(t, extra)
}

// startServerArgs is startServerWith with command-line arguments (e.g. the
// -role slave flags).
func startServerArgs(t *testing.T, extra string, args ...string) (string, *smsstest.SyncBuffer) {
	t.Helper()
	dir := t.TempDir()
	smsstest.WriteConfig(t, dir, 0, "timeout:\n  server:\n    alive: 200\n"+extra)
	p := smsstest.StartSmss(t, dir, args...)
	return p.Addr, p.Out
}

type result struct {
	code           int
	stdout, stderr string
}

// ctl runs the smssctl binary with SMSS_ADDR=addr.
func ctl(t *testing.T, addr, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(ctlBin, args...)
	cmd.Env = append(os.Environ(), "SMSS_ADDR="+addr)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("smssctl %v did not finish", args)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

func (r result) expect(t *testing.T, code int, stdoutHas ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stdoutHas {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
		}
	}
}

func TestHelpAndUsage(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"topic", "--help"}, {"topic", "create", "--help"},
		{"topic", "list", "-h"}, {"topic", "info", "--help"}, {"topic", "delete", "--help"}, {"pub", "--help"},
		{"sub", "--help"}, {"replica", "--help"}, {"ping", "--help"}, {"stats", "--help"}, {"top", "--help"}} {
		r := ctl(t, "127.0.0.1:1", "", args...)
		r.expect(t, 0, "usage: smssctl")
		// Commands with flags list them (topic's own help names its actions).
		if (len(args) > 1 && args[0] != "topic" || len(args) == 3) && !strings.Contains(r.stdout, "-addr") {
			t.Errorf("%v: flags not listed:\n%s", args, r.stdout)
		}
	}
	for _, args := range [][]string{{}, {"bogus"}, {"topic"}, {"topic", "bogus"}, {"topic", "create"},
		{"topic", "create", "a", "b"}, {"topic", "create", "x", "--ttl", "soon"}, {"topic", "create", "x", "--ttl", "1h", "--expire-at", "1"},
		{"pub"}, {"pub", "t", "--header", "novalue", "m"}, {"sub", "t"}, {"sub", "t", "--who", "w", "--batch", "0"},
		{"replica", "extra"}, {"ping", "--nope"}} {
		r := ctl(t, "127.0.0.1:1", "", args...)
		if r.code != 2 || r.stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 with a message", args, r.code, r.stderr)
		}
	}
}

func TestPingAndAddress(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "ping").expect(t, 0, "is alive")
	var v map[string]any
	r := ctl(t, addr, "", "ping", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v["alive"] != true {
		t.Errorf("ping --json: %q %v", r.stdout, err)
	}
	// --addr wins over SMSS_ADDR, before or after the command.
	ctl(t, "127.0.0.1:1", "", "--addr", addr, "ping").expect(t, 0)
	ctl(t, "127.0.0.1:1", "", "ping", "--addr", addr).expect(t, 0)
	r = ctl(t, "127.0.0.1:1", "", "ping", "--timeout", "2s")
	if r.code != 1 || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Errorf("ping of a closed port: %+v", r)
	}
}

func TestTopicCommands(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "topic", "create", "order").expect(t, 0, "created topic order (permanent)")
	r := ctl(t, addr, "", "topic", "create", "order")
	if r.code != 1 || !strings.Contains(r.stderr, "topic exist") {
		t.Errorf("duplicate create: %+v", r)
	}
	ctl(t, addr, "", "topic", "create", "life", "--ttl", "2h").expect(t, 0, "created topic life (expires ")
	ctl(t, addr, "", "topic", "create", "--json", "week", "--ttl", "7d").expect(t, 0, `"created": true`)
	ctl(t, addr, "", "topic", "create", "abs", "--expire-at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)).expect(t, 0)
	r = ctl(t, addr, "", "topic", "create", "short", "--ttl", "5s")
	if r.code != 1 || !strings.Contains(r.stderr, "expire") {
		t.Errorf("5s ttl: %+v", r)
	}

	r = ctl(t, addr, "", "topic", "list")
	r.expect(t, 0, "NAME", "CREATE EVENT", "order", "never", "life", "week", "abs")
	if !regexp.MustCompile(`life .*\(in (1h59m\d+s|2h0m0s)\)`).MatchString(r.stdout) {
		t.Errorf("life's remaining lifetime not shown:\n%s", r.stdout)
	}
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 5 {
		t.Errorf("list has %d lines:\n%s", len(lines), r.stdout)
	}
	var list []map[string]any
	r = ctl(t, addr, "", "--json", "topic", "list")
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 4 || list[0]["name"] != "abs" {
		t.Errorf("list --json: %v %q", err, r.stdout)
	}

	ctl(t, addr, "", "topic", "info", "order").expect(t, 0, "name:", "order", "expires:", "never", "create eventId:", "1", "state:", "normal")
	var info map[string]any
	r = ctl(t, addr, "", "topic", "info", "life", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info["name"] != "life" || info["expireAt"].(float64) == 0 {
		t.Errorf("info --json: %v %q", err, r.stdout)
	}
	r = ctl(t, addr, "", "topic", "info", "nope")
	if r.code != 1 || !strings.Contains(r.stderr, "topic not exist") {
		t.Errorf("info of a missing topic: %+v", r)
	}
	ctl(t, addr, "", "topic", "delete", "life").expect(t, 0, "deleted topic life")
	if r := ctl(t, addr, "", "topic", "delete", "life"); r.code != 1 {
		t.Errorf("second delete: %+v", r)
	}
	ctl(t, addr, "", "topic", "delete", "week").expect(t, 0)
	ctl(t, addr, "", "topic", "delete", "abs").expect(t, 0)
	ctl(t, addr, "", "topic", "delete", "order").expect(t, 0)
	ctl(t, addr, "", "topic", "list").expect(t, 0, "no topics")
	ctl(t, addr, "", "topic", "list", "--json").expect(t, 0, "[]")
}

func TestPubAndSub(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "topic", "create", "t").expect(t, 0)
	ctl(t, addr, "", "pub", "t", "--header", "k=v", "hello world", "--header", "a=b=c").expect(t, 0, "published 1 message (11 bytes) to t")
	ctl(t, addr, "from stdin\n", "pub", "t", "-").expect(t, 0, "(11 bytes)")
	ctl(t, addr, "piped", "pub", "--json", "t").expect(t, 0, `"published": 1`)
	if r := ctl(t, addr, "", "pub", "nope", "x"); r.code != 1 || !strings.Contains(r.stderr, "topic not exist") {
		t.Errorf("pub to a missing topic: %+v", r)
	}

	r := ctl(t, addr, "", "sub", "t", "--who", "w", "--count", "3", "--json")
	r.expect(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("sub printed %d lines:\n%s", len(lines), r.stdout)
	}
	var first, second struct {
		EventID int64
		Headers []struct{ Key, Value string }
		Body    string
	}
	json.Unmarshal([]byte(lines[0]), &first)
	json.Unmarshal([]byte(lines[1]), &second)
	// pub adds a random message id after the given headers.
	if first.EventID != 2 || first.Body != "hello world" || len(first.Headers) != 3 ||
		first.Headers[0].Key != "k" || first.Headers[1].Value != "b=c" || first.Headers[2].Key != "smss-msg-id" ||
		len(first.Headers[2].Value) != 32 || second.Body != "from stdin\n" {
		t.Errorf("sub --json: %+v %+v", first, second)
	}
	if !strings.Contains(r.stderr, "last acknowledged eventId 4") {
		t.Errorf("stderr: %s", r.stderr)
	}

	// Human output resumes after --from, one line per message.
	r = ctl(t, addr, "", "sub", "t", "--who", "w", "--from", "3", "--count", "1")
	r.expect(t, 0, "4\t", "\tpiped")
	if strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("sub printed:\n%s", r.stdout)
	}
	r = ctl(t, addr, "", "sub", "t", "--who", "w", "--count", "1")
	r.expect(t, 0, "k=v a=b=c smss-msg-id=", "\thello world")
	r = ctl(t, addr, "", "sub", "t", "--who", "w", "--from", "2", "--count", "1")
	r.expect(t, 0, `"from stdin\n"`)

	if r := ctl(t, addr, "", "sub", "nope", "--who", "w"); r.code != 1 || !strings.Contains(r.stderr, "topic not exist") {
		t.Errorf("sub to a missing topic: %+v", r)
	}
}

func TestSubEndsWhenTopicDeleted(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "topic", "create", "t").expect(t, 0)
	ctl(t, addr, "", "pub", "t", "m").expect(t, 0)
	cmd := exec.Command(ctlBin, "sub", "t", "--who", "w")
	cmd.Env = append(os.Environ(), "SMSS_ADDR="+addr)
	out, errb := &smsstest.SyncBuffer{}, &smsstest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	out.WaitContains(t, 20*time.Second, "\tm")
	ctl(t, addr, "", "topic", "delete", "t").expect(t, 0)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("sub did not end after the topic was deleted")
	}
	if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(errb.String(), "deleted") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

func TestSubStopsOnInterrupt(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "topic", "create", "t").expect(t, 0)
	cmd := exec.Command(ctlBin, "sub", "t", "--who", "w")
	cmd.Env = append(os.Environ(), "SMSS_ADDR="+addr)
	out, errb := &smsstest.SyncBuffer{}, &smsstest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	// Messages arrive as they are published (tail -f).
	for i, body := range []string{"one", "two"} {
		ctl(t, addr, "", "pub", "t", body).expect(t, 0)
		out.WaitContains(t, 20*time.Second, "\t"+body)
		if n := strings.Count(out.String(), "\n"); n != i+1 {
			t.Fatalf("%d lines after %d messages", n, i+1)
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("sub did not stop on SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(errb.String(), "--from 3") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

func TestReplica(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "topic", "create", "order").expect(t, 0)
	ctl(t, addr, "", "pub", "order", "hello").expect(t, 0)
	r := ctl(t, addr, "", "replica", "--count", "2")
	r.expect(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("replica printed:\n%s", r.stdout)
	}
	if f := strings.Split(lines[0], "\t"); len(f) != 6 || f[1] != "2" || f[2] != "1" || f[4] != "order" || f[5] != "9" {
		t.Errorf("create line %q", lines[0])
	}
	if f := strings.Split(lines[1], "\t"); len(f) != 6 || f[1] != "1" || f[2] != "2" || f[4] != "order" {
		t.Errorf("pub line %q", lines[1])
	}
	r = ctl(t, addr, "", "replica", "--from", "1", "--count", "1", "--json")
	var b map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &b); err != nil || b["cmdName"] != "pub" || b["eventId"] != 2.0 || b["messages"] != 1.0 {
		t.Errorf("replica --json: %v %q %q", err, r.stdout, r.stderr)
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{{"5s", 5 * time.Second, true}, {"2h", 2 * time.Hour, true}, {"7d", 7 * 24 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true}, {"500ms", 500 * time.Millisecond, true},
		{"d", 0, false}, {"xd", 0, false}, {"1dx", 0, false}, {"soon", 0, false}, {"", 0, false}, {"-1d", 0, false}} {
		got, err := parseDuration(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// TestSeveralAddresses: --addr with several servers finds the master for
// topic and pub, sub reads from the first reachable (here a slave), and
// pub --id sets the message id (refused locally above 128 bytes).
func TestSeveralAddresses(t *testing.T) {
	master := startServer(t)
	_, port, err := net.SplitHostPort(master)
	if err != nil {
		t.Fatal(err)
	}
	slave, _ := startServerArgs(t, "", "-role", "slave", "-host", "127.0.0.1", "-port", port, "-event", "0")
	dead := "127.0.0.1:1"
	all := strings.Join([]string{dead, slave, master}, ",")

	ctl(t, "", "", "--addr", all, "topic", "create", "t").expect(t, 0, "created topic t")
	ctl(t, "", "", "--addr", all, "pub", "t", "--id", "order-42", "hello").expect(t, 0, "published 1 message")
	ctl(t, "", "", "--addr", all, "pub", "t", "--no-id", "plain").expect(t, 0, "published 1 message")
	ctl(t, "", "", "--addr", all, "ping").expect(t, 0, "is alive")
	for _, bad := range [][]string{{"--id", strings.Repeat("x", 129)}, {"--id", ""}, {"--id", "a", "--no-id"}} {
		r := ctl(t, "", "", append([]string{"--addr", all, "pub", "t", "m"}, bad...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--id") {
			t.Errorf("pub %q: %+v", bad, r)
		}
	}

	// The slave has the messages once it caught up; sub skips the dead
	// address and reads them there.
	var r result
	smsstest.Poll(30*time.Second, func() bool {
		r = ctl(t, "", "", "--addr", dead+","+slave, "sub", "t", "--who", "w", "--count", "2", "--json", "--timeout", "2s")
		return r.code == 0
	})
	r.expect(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var first, second struct {
		Headers []struct{ Key, Value string }
		Body    string
	}
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &first) != nil || json.Unmarshal([]byte(lines[1]), &second) != nil {
		t.Fatalf("sub printed:\n%s\n%s", r.stdout, r.stderr)
	}
	if first.Body != "hello" || len(first.Headers) != 1 || first.Headers[0].Key != "smss-msg-id" || first.Headers[0].Value != "order-42" ||
		second.Body != "plain" || len(second.Headers) != 0 {
		t.Errorf("sub on the slave: %+v %+v", first, second)
	}
}
