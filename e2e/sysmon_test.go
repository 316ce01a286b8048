package e2e

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The real binary re-executes itself once with GODEBUG schedtrace set
// (runtime.keepSysmonAwake, cmd/smss/sysmon.go): same process, so the pid
// a supervisor or kill -9 uses stays right, and it serves as usual. With
// the key off it runs as started.
func TestKeepSysmonAwakeReexecutes(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		want        bool
	}{
		{"default", "", true},
		{"off", "runtime:\n  keepSysmonAwake: false\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeConfig(t, dir, tc.extra)
			p := start(t, dir)
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.cmd.Process.Pid))
			if err != nil {
				t.Skipf("no /proc environ: %v", err)
			}
			var godebug string
			for _, kv := range bytes.Split(environ, []byte{0}) {
				if v, ok := strings.CutPrefix(string(kv), "GODEBUG="); ok {
					godebug = v
					break
				}
			}
			if got := strings.Contains(godebug, "schedtrace=2147483647"); got != tc.want {
				t.Fatalf("server pid %d runs with GODEBUG=%q; want schedtrace set: %v", p.cmd.Process.Pid, godebug, tc.want)
			}
			if n := strings.Count(p.out.String(), "config in effect"); n != 1 {
				t.Fatalf("%d start-ups logged (the re-execution must happen before logging), output:\n%s", n, p.out.String())
			}
			c := dial(t, p.addr)
			if err := c.create("sysmon", 0); err != nil {
				t.Fatal(err)
			}
			if err := c.pub("sysmon", record(nil, "hello")); err != nil {
				t.Fatal(err)
			}
			p.stop()
		})
	}
}
