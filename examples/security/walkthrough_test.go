// Package security holds the security worked example of docs/security.md as a script
// (walkthrough.sh) and the test that runs it against real servers.
package security

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

// freePorts returns n distinct ports reserved for this test process
// (smsstest.FreePort): the script's servers bind them a moment later.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		ports = append(ports, smsstest.FreePort(t))
	}
	return ports
}

// TestWalkthrough runs walkthrough.sh with freshly built smss and smssctl
// in a temporary directory: every step must succeed (set -e).
func TestWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and starts two servers")
	}
	for _, tool := range []string{"bash", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "../../cmd/smss", "../../cmd/smssctl")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ports := freePorts(t, 3)
	demo := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "walkthrough.sh")
	cmd.Env = append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"SMSS_DEMO_DIR="+demo,
		"SMSS_PORT="+strconv.Itoa(ports[0]),
		"SMSS_TLS_PORT="+strconv.Itoa(ports[1]),
		"SMSS_SLAVE_PORT="+strconv.Itoa(ports[2]),
		"SMSS_ADDR=", "SMSS_USER=", "SMSS_PASSWORD=", "SMSS_USERS_FILE=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		for _, log := range []string{"smss.log", "slave.log"} {
			if b, rerr := os.ReadFile(filepath.Join(demo, log)); rerr == nil {
				out = append(out, "\n--- "+log+"\n"...)
				out = append(out, b...)
			}
		}
		t.Fatalf("walkthrough.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"published 1 message", "hello", `user "intern" is disabled`, "authentication required", "== done"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestReadmeWorkedExample checks that every command docs/security.md shows
// in its "Worked example" shell blocks is a line of walkthrough.sh, so the
// documentation cannot drift from what TestWalkthrough runs.
func TestReadmeWorkedExample(t *testing.T) {
	script, err := os.ReadFile("walkthrough.sh")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for l := range strings.SplitSeq(string(script), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	readme, err := os.Open("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	defer readme.Close()
	sc := bufio.NewScanner(readme)
	inSection, inShell, checked := false, false, 0
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "#"):
			inSection = strings.TrimSpace(strings.TrimLeft(l, "#")) == "Worked example"
		case !inSection:
		case strings.HasPrefix(l, "```sh"):
			inShell = true
		case strings.HasPrefix(l, "```"):
			inShell = false
		case inShell:
			cmd := strings.TrimSpace(l)
			if cmd == "" || strings.HasPrefix(cmd, "#") {
				continue
			}
			checked++
			if !lines[cmd] {
				t.Errorf("docs/security.md worked example line is not in walkthrough.sh: %q", cmd)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("found only %d command lines under docs/security.md's \"## Worked example\"", checked)
	}
}
