package layering

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/smssmq/smss/"

// goList runs go list with a format over the given packages and returns
// one line per package.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not available:", err)
	}
	cmd := exec.Command(gotool, append([]string{"list"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("go list %v listed nothing", args)
	}
	return lines
}

// TestCodecsAndFilesApart: the block codecs stay free of the file layer and
// the file layer free of any block format; what they share (the one
// ErrIncomplete callers branch on) is the leaf package codec, which imports
// nothing of this module.
func TestCodecsAndFilesApart(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		forbidden []string // module packages pkg must not depend on, even indirectly
	}{
		{"segment", []string{"binlog", "topicblock"}},
		{"binlog", []string{"segment", "topicblock"}},
		{"topicblock", []string{"segment", "binlog"}},
		{"codec", nil}, // nil: nothing of the module at all
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			deps := goList(t, "-deps", module+tc.pkg)
			for _, d := range deps {
				rel, ours := strings.CutPrefix(d, module)
				if !ours || d == module+tc.pkg {
					continue
				}
				if tc.forbidden == nil {
					t.Errorf("%s depends on %s", tc.pkg, rel)
				}
				for _, f := range tc.forbidden {
					if rel == f {
						t.Errorf("%s depends on %s", tc.pkg, rel)
					}
				}
			}
		})
	}
}

// TestOnlyBrokerImportsMsgcount: the message counts are the broker's; their
// Source interface is written for it alone.
func TestOnlyBrokerImportsMsgcount(t *testing.T) {
	for _, line := range goList(t, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if imp == module+"broker/msgcount" && f[0] != module+"broker" {
				t.Errorf("%s imports broker/msgcount", f[0])
			}
		}
	}
}
