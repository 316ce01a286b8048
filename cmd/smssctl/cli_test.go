package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/internal/smsstest"
)

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(smsstest.FreePort(t)))
}

func TestHelpPrintsOnce(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"sub", "--help"}, {"pub", "-h"}, {"topic", "create", "--help"},
		{"user", "add", "--help"}, {"top", "--help"}} {
		r := ctl(t, "127.0.0.1:1", "", args...)
		r.expect(t, 0, "usage: smssctl")
		if n := strings.Count(r.stdout, "usage: smssctl"); n != 1 {
			t.Errorf("%v: usage printed %d times:\n%s", args, n, r.stdout)
		}
		if n := strings.Count(r.stdout, "flags:"); n != 1 {
			t.Errorf("%v: flag list printed %d times", args, n)
		}
	}
}

func TestWrongFlagIsOneLine(t *testing.T) {
	for _, args := range [][]string{{"--bogus", "ping"}, {"sub", "t", "--who", "w", "--bogus"}, {"pub", "--delay", "x", "t", "m"},
		{"topic", "create", "t", "--nope"}} {
		r := ctl(t, "127.0.0.1:1", "", args...)
		r.expect(t, 2)
		if r.stdout != "" {
			t.Errorf("%v: stdout %q, want nothing", args, r.stdout)
		}
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "smssctl: ") || !strings.Contains(lines[1], "--help") {
			t.Errorf("%v: stderr is not the error and a --help hint:\n%s", args, r.stderr)
		}
	}
}

// jsonError decodes stderr as the one JSON error object of --json.
func jsonError(t *testing.T, r result) (msg string, code int) {
	t.Helper()
	var e struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exitCode"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stderr)), &e); err != nil || e.Error == "" {
		t.Fatalf("stderr is not one JSON error (%v):\n%s", err, r.stderr)
	}
	if e.ExitCode != r.code {
		t.Errorf("JSON exitCode %d, process exit %d", e.ExitCode, r.code)
	}
	return e.Error, e.ExitCode
}

func TestJSONErrors(t *testing.T) {
	addr := startServer(t)
	cases := []struct {
		args []string
		code int
		has  string
	}{
		{[]string{"--json", "topic", "info", "nosuch"}, 1, "not exist"},
		{[]string{"topic", "info", "nosuch", "--json"}, 1, "not exist"},
		{[]string{"--json", "sub", "t"}, 2, "--who is required"},
		{[]string{"--bogus", "--json", "ping"}, 2, "flag provided but not defined"},
		{[]string{"--json", "--addr", closedAddr(t), "ping"}, 1, "connection refused"},
	}
	for _, c := range cases {
		r := ctl(t, addr, "", c.args...)
		if r.code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, r.code, c.code, r.stderr)
			continue
		}
		if msg, _ := jsonError(t, r); !strings.Contains(msg, c.has) {
			t.Errorf("%v: error %q lacks %q", c.args, msg, c.has)
		}
	}
}

// A subscription that never connected fails fast with the reason; it
// does not retry for ever nor print a resume hint.
func TestSubNothingListening(t *testing.T) {
	dead := closedAddr(t)
	for _, args := range [][]string{{"sub", "t", "--who", "w"}, {"--addr", dead + "," + closedAddr(t), "sub", "t", "--who", "w"}} {
		start := time.Now()
		r := ctl(t, dead, "", args...)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%v: took %v", args, d)
		}
		if r.code != 1 || !strings.Contains(r.stderr, "connection refused") {
			t.Errorf("%v: exit %d, stderr %s", args, r.code, r.stderr)
		}
		if strings.Contains(r.stderr, "--from") {
			t.Errorf("%v: a resume hint without a subscription:\n%s", args, r.stderr)
		}
	}
	r := ctl(t, dead, "", "--json", "sub", "t", "--who", "w")
	jsonError(t, r)
}

// Once subscribed, a lost server is waited for: the subscription resumes
// when it is reachable again, and the resume hint is printed at the end.
func TestSubRetriesAfterEstablished(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "topic", "create", "t").expect(t, 0)
	ctl(t, addr, "", "pub", "t", "one").expect(t, 0)
	px := smsstest.NewProxy(t, addr)
	cmd := exec.Command(ctlBin, "sub", "t", "--who", "w", "--count", "2")
	cmd.Env = append(os.Environ(), "SMSS_ADDR="+px.Addr())
	var outb, errb smsstest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &outb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	if !smsstest.Poll(20*time.Second, func() bool { return strings.Contains(outb.String(), "one") }) {
		t.Fatalf("first message not printed:\n%s%s", outb.String(), errb.String())
	}
	px.Cut()
	// Unreachable for longer than a first connection may fail.
	select {
	case err := <-done:
		t.Fatalf("sub ended while its server was unreachable: %v\n%s", err, errb.String())
	case <-time.After(3 * time.Second):
	}
	px.Restore()
	ctl(t, addr, "", "pub", "t", "two").expect(t, 0)
	select {
	case err := <-done:
		if err != nil || !strings.Contains(outb.String(), "two") || !strings.Contains(errb.String(), "resume with --from") {
			t.Fatalf("sub after the server came back: %v\nstdout: %s\nstderr: %s", err, outb.String(), errb.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("sub did not resume:\n%s", errb.String())
	}
}

func TestPlainClientOnTLSPort(t *testing.T) {
	pki := authtest.NewPKI(t)
	addr, out := startServerWith(t, fmt.Sprintf("tls:\n  listen: 127.0.0.1:0\n  cert: %s\n  key: %s\n", pki.ServerCert, pki.ServerKey))
	m := tlsListenRe.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no TLS address in the log:\n%s", out.String())
	}
	tlsAddr := m[1]
	for _, args := range [][]string{{"ping"}, {"topic", "list"}, {"sub", "t", "--who", "w"}} {
		r := ctl(t, tlsAddr, "", args...)
		if r.code != 1 || !strings.Contains(r.stderr, "is a TLS listener") || !strings.Contains(r.stderr, "--tls") {
			t.Errorf("%v on the TLS port: exit %d, stderr %s", args, r.code, r.stderr)
		}
	}
	// TLS on the plain port says that it is not TLS.
	r := ctl(t, addr, "", "--ca", pki.CAFile, "ping")
	if r.code != 1 || !strings.Contains(r.stderr, "does not speak TLS") {
		t.Errorf("TLS to the plain port: exit %d, stderr %s", r.code, r.stderr)
	}
	// The right way works.
	ctl(t, tlsAddr, "", "--ca", pki.CAFile, "ping").expect(t, 0)
	// Refusals of a reachable plain server get no hint.
	if r := ctl(t, addr, "", "topic", "info", "nosuch"); strings.Contains(r.stderr, "TLS") {
		t.Errorf("hint on a server refusal: %s", r.stderr)
	}
}

func TestTopQuitsOnQ(t *testing.T) {
	addr, adm := startAdminServer(t)
	t.Setenv("SMSS_ADMIN_TOKEN", statsToken)
	cmd := exec.Command(ctlBin, "top", "--admin", adm, "--interval", "100ms")
	cmd.Env = append(os.Environ(), "SMSS_ADDR="+addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var outb smsstest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &outb, &outb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if !smsstest.Poll(20*time.Second, func() bool { return strings.Contains(outb.String(), "SUBSCRIBERS") }) {
		cmd.Process.Kill()
		t.Fatalf("top drew nothing:\n%s", outb.String())
	}
	io.WriteString(stdin, "q")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("top after q: %v\n%s", err, outb.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("top did not quit on q")
	}
}
