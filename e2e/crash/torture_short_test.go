package crash

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

var torturePass = regexp.MustCompile(`(?m)^smss-torture PASS .*$`)

// runTorture builds cmd/smss-torture and runs it against the smss binary
// the test kit built. The seed is random unless SMSS_TORTURE_SEED is set; it is
// printed in the tool's summary and failure lines, and a failing run keeps
// its work directory (named in the output) for inspection.
func runTorture(t *testing.T, timeout time.Duration, args ...string) {
	t.Helper()
	bin := smsstest.Binary(t, "./cmd/smss-torture")
	seed := os.Getenv("SMSS_TORTURE_SEED")
	if seed == "" {
		seed = strconv.FormatUint(uint64(time.Now().UnixNano()), 10)
	}
	dir, err := os.MkdirTemp("", "smss-torture-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := t.Deadline(); ok && time.Until(d) < timeout {
		timeout = time.Until(d) - 5*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-smss", smsstest.SmssBinary(t), "-dir", dir, "-seed", seed, "-v"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("smss-torture (seed %s, work dir %s): %v\n%s", seed, dir, err, kit.Tail(string(out), 8000))
	}
	line := torturePass.FindString(string(out))
	if line == "" {
		t.Fatalf("no summary line:\n%s", kit.Tail(string(out), 8000))
	}
	os.RemoveAll(dir)
	t.Log(line)
}

// TestTortureShort is the default-suite variant of the crash torture: five
// SIGKILLs of the master or the slave under mixed load, every check after
// each restart (see cmd/smss-torture). The opt-in long run is
// TestTortureLong.
func TestTortureShort(t *testing.T) {
	t.Parallel() // long, mostly waiting on its faults; owns its ports and directories
	runTorture(t, 2*time.Minute, "-cycles", "5", "-maxload", "800ms")
}

// TestTortureLong (SMSS_LONG=1) runs at least 100 cycles; SMSS_TORTURE_CYCLES
// raises it. Give go test a long -timeout, e.g.
//
//	SMSS_LONG=1 go test ./e2e/crash -run TestTortureLong -timeout 60m -v
func TestTortureLong(t *testing.T) {
	if os.Getenv("SMSS_LONG") == "" {
		t.Skip("set SMSS_LONG=1 to run the long crash torture")
	}
	cycles := 100
	if v, err := strconv.Atoi(os.Getenv("SMSS_TORTURE_CYCLES")); err == nil && v > cycles {
		cycles = v
	}
	runTorture(t, time.Duration(cycles)*30*time.Second, "-cycles", fmt.Sprint(cycles))
}
