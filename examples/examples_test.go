// Package examples holds runnable programs (one main package per
// directory) and the test that builds each and runs it against a real
// smss server (and a real redis-server for redisgroup).
package examples

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/internal/smsstest"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "smss-examples")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "../cmd/smss",
		"./quickstart/publisher", "./quickstart/subscriber", "./delayed", "./redisgroup", "./tlsauth", "./workqueue")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon starts a long-running process, ended when the test ends, and
// waits until its output matches ready; the first group of the match is
// returned (the address it listens on).
func daemon(t *testing.T, ready *regexp.Regexp, name string, args ...string) (string, *smsstest.SyncBuffer) {
	t.Helper()
	p := smsstest.StartProc(t, exec.Command(name, args...), ready)
	return p.Addr, p.Out
}

// startSmss runs smss with a config in a temporary directory and returns
// the plain address, and the TLS address when extra configures tls.listen.
func startSmss(t *testing.T, extra string) (plain, tlsAddr string) {
	t.Helper()
	dir := t.TempDir()
	path := smsstest.WriteConfig(t, dir, 0, extra)
	plain, out := daemon(t, regexp.MustCompile(`smss listening.*addr=(\S+)`), filepath.Join(bin, "smss"), "-config", path)
	if m := regexp.MustCompile(`listening \(TLS\)"? addr=(\S+)`).FindStringSubmatch(out.String()); m != nil {
		tlsAddr = m[1]
	}
	return plain, tlsAddr
}

// example runs one example program to its end and returns its stdout.
func example(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\nstdout: %s\nstderr: %s", name, args, err, out.String(), errb.String())
	}
	return out.String()
}

func TestQuickstart(t *testing.T) {
	addr, _ := startSmss(t, "")
	got := example(t, nil, "publisher", "-addr", addr, "-topic", "order", "-n", "3")
	if !strings.Contains(got, "published 3 messages to order") {
		t.Fatalf("publisher: %q", got)
	}
	got = example(t, nil, "subscriber", "-addr", addr, "-topic", "order", "-who", "billing", "-count", "3")
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 3 {
		t.Fatalf("subscriber printed %d lines, want 3:\n%s", len(lines), got)
	}
	for i, l := range lines {
		if want := fmt.Sprintf(`created {"order":%d}`, i+1); !strings.HasSuffix(l, want) {
			t.Errorf("line %d = %q, want suffix %q", i, l, want)
		}
	}
}

func TestDelayed(t *testing.T) {
	addr, _ := startSmss(t, "")
	start := time.Now()
	got := example(t, nil, "delayed", "-addr", addr, "-delay", "1s")
	if !regexp.MustCompile(`(?m)^delivered reminder-\d+ after `).MatchString(got) {
		t.Fatalf("delayed: %q", got)
	}
	if el := time.Since(start); el < time.Second {
		t.Fatalf("delayed message delivered after %s, before its 1 s delay", el)
	}
}

// Two group members run at once on the same (topic, who): between them
// every message is printed exactly once, whichever held the lock first.
func TestRedisGroup(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is required in CI: %v", err)
		}
		t.Skipf("redis-server not installed: %v", err)
	}
	port := smsstest.FreePort(t)
	daemon(t, regexp.MustCompile(`(?i)(ready to accept connections)`), "redis-server",
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	redisAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	addr, _ := startSmss(t, "")
	example(t, nil, "publisher", "-addr", addr, "-topic", "order", "-n", "3")

	var wg sync.WaitGroup
	outs := make([]string, 2)
	for i, count := range []string{"2", "1"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = example(t, nil, "redisgroup", "-addr", addr, "-redis", redisAddr, "-topic", "order",
				"-who", "billing", "-batch", "1", "-count", count)
		}()
	}
	wg.Wait()
	var bodies []string
	for _, l := range strings.Split(strings.TrimSpace(strings.Join(outs, "\n")), "\n") {
		if _, body, ok := strings.Cut(l, " "); ok {
			bodies = append(bodies, body)
		}
	}
	sort.Strings(bodies)
	if got, want := strings.Join(bodies, ","), `{"order":1},{"order":2},{"order":3}`; got != want {
		t.Fatalf("group members printed %s, want %s (each once):\n%s\n---\n%s", got, want, outs[0], outs[1])
	}
}

func TestTLSAuth(t *testing.T) {
	pki := authtest.NewPKI(t)
	users := filepath.Join(t.TempDir(), "users.json")
	authtest.WriteUsers(t, users, authtest.User{Name: "billing", Password: "billing-pw",
		Publish: []string{"order"}, Manage: []string{"order"}})
	_, tlsAddr := startSmss(t, fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\ntls:\n  listen: 127.0.0.1:0\n  cert: %s\n  key: %s\n",
		users, pki.ServerCert, pki.ServerKey))
	if tlsAddr == "" {
		t.Fatal("the server did not log its TLS address")
	}
	env := []string{"SMSS_PASSWORD=billing-pw"}
	args := []string{"-addr", tlsAddr, "-ca", pki.CAFile, "-user", "billing", "-topic", "order", "-forbidden", "payroll"}
	got := example(t, env, "tlsauth", append(args, "-create")...)
	for _, want := range []string{"published to order as billing", "refused as expected", `may not publish to "payroll"`} {
		if !strings.Contains(got, want) {
			t.Errorf("tlsauth output lacks %q:\n%s", want, got)
		}
	}
	// A wrong password ends in the login error, not in a publish.
	cmd := exec.Command(filepath.Join(bin, "tlsauth"), args...)
	cmd.Env = append(os.Environ(), "SMSS_PASSWORD=wrong")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "login refused") {
		t.Fatalf("wrong password: %v\n%s", err, out)
	}
}

// TestWorkQueue: two workqueue processes share a group: every job is
// processed once, by one of them, the failing one is tried max-deliver
// times and then listed as a dead letter with its headers.
func TestWorkQueue(t *testing.T) {
	addr, _ := startSmss(t, "")
	var wg sync.WaitGroup
	outs := make([]string, 2)
	// The first queues the jobs; both work until the group finished them.
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []string{"-addr", addr, "-name", fmt.Sprintf("w%d", i), "-until", "21"}
			if i == 0 {
				args = append(args, "-publish", "20")
			}
			outs[i] = example(t, nil, "workqueue", args...)
		}()
	}
	wg.Wait()
	all := outs[0] + outs[1]
	for i := 1; i <= 20; i++ {
		if n := strings.Count(all, fmt.Sprintf("processed job-%d (", i)); n != 1 {
			t.Errorf("job-%d processed %d times:\n%s", i, n, all)
		}
	}
	for a := 1; a <= 3; a++ {
		if !strings.Contains(all, fmt.Sprintf("failed fail-bad-input (attempt %d)", a)) {
			t.Errorf("no attempt %d of the failing job:\n%s", a, all)
		}
	}
	if strings.Contains(all, "(attempt 4)") {
		t.Errorf("a job tried 4 times:\n%s", all)
	}
	got := example(t, nil, "workqueue", "-addr", addr, "-dead")
	if want := "dead letter fail-bad-input: from jobs/resize eventId "; !strings.Contains(got, want) || !strings.Contains(got, "after 3 attempts (maxDeliver)") {
		t.Fatalf("dead letters: %q", got)
	}
}
