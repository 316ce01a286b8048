//go:build unix

package docrun

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/smssmq/smss/internal/smsstest"
)

// The suite's own long runs (fuzzing for a minute, the crash torture's
// hundred cycles, the opt-in long tests) are not run by the walk: they
// are what the suite runs short, and would take its whole budget. Their
// lines are checked instead against the code they name, so that a
// renamed test, fuzz target, package, flag or knob fails here rather
// than in a reader's terminal.

func TestTestingDocCommands(t *testing.T) { runDoc(t, "docs/testing.md", 11) }

// envAssign is a leading VAR=value of a command line.
var envAssign = regexp.MustCompile(`^([A-Z_][A-Z0-9_]*)=\S*\s+`)

// suiteCommand reports whether line is one of the suite's own commands:
// `go test ...` or `go run ./cmd/smss-torture ...`, after any VAR=value.
func suiteCommand(line string) bool {
	for m := envAssign.FindString(line); m != ""; m = envAssign.FindString(line) {
		line = line[len(m):]
	}
	return strings.HasPrefix(line, "go test ") || strings.HasPrefix(line, "go run ./cmd/smss-torture")
}

// funcDecl finds the top-level functions of a Go file.
var funcDecl = regexp.MustCompile(`(?m)^func (\w+)\(`)

// checkSuite checks a suite command against the module: its packages
// exist; every -run, -fuzz and -bench pattern (other than '^$') matches a
// test, fuzz target or benchmark of those packages; every VAR= it sets is
// read by them or by the test kits; every flag given to a command it runs
// is declared by that command (a flag or FlagSet call naming it).
func (w *walk) checkSuite(where, line string) {
	t := w.t
	t.Helper()
	root, err := smsstest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for m := envAssign.FindStringSubmatch(line); m != nil; m = envAssign.FindStringSubmatch(line) {
		env = append(env, m[1])
		line = line[len(m[0]):]
	}
	f := strings.Fields(line)
	var pkgs []string
	for _, a := range f[2:] {
		if strings.HasPrefix(a, "./") {
			pkgs = append(pkgs, strings.TrimSuffix(strings.TrimSuffix(a, "/..."), "/"))
		}
	}
	if len(pkgs) == 0 {
		t.Fatalf("%s: names no package (./...)", where)
	}
	for _, p := range pkgs {
		if st, err := os.Stat(filepath.Join(root, p)); err != nil || !st.IsDir() {
			t.Fatalf("%s: package %s does not exist", where, p)
		}
	}
	if f[1] == "run" {
		// go run ./cmd/X FLAGS: every flag is one of X's.
		src := goSources(t, filepath.Join(root, pkgs[0]), false)
		for _, a := range f[3:] {
			if !strings.HasPrefix(a, "-") {
				continue
			}
			name := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
			if !regexp.MustCompile(`\b\w+\.\w+\((?:&?[\w.]+,\s*)?"` + regexp.QuoteMeta(name) + `",`).MatchString(src) {
				t.Fatalf("%s: %s declares no flag -%s", where, pkgs[0], name)
			}
		}
	} else {
		tests := ""
		for _, p := range pkgs {
			tests += goSources(t, filepath.Join(root, p), true)
		}
		var names []string
		for _, m := range funcDecl.FindAllStringSubmatch(tests, -1) {
			names = append(names, m[1])
		}
		for i := 2; i+1 < len(f); i++ {
			kinds, ok := map[string][]string{"-run": {"Test", "Fuzz", "Example"}, "-fuzz": {"Fuzz"}, "-bench": {"Benchmark"}}[f[i]]
			if !ok {
				continue
			}
			pat := strings.Trim(f[i+1], `'"`)
			if pat == "^$" {
				continue
			}
			re, err := regexp.Compile(strings.SplitN(pat, "/", 2)[0])
			if err != nil {
				t.Fatalf("%s: %s %q: %v", where, f[i], pat, err)
			}
			found := false
			for _, n := range names {
				for _, k := range kinds {
					found = found || strings.HasPrefix(n, k) && re.MatchString(n)
				}
			}
			if !found {
				t.Fatalf("%s: %s %q matches no %s function of %s", where, f[i], pat, strings.Join(kinds, "/"), strings.Join(pkgs, ", "))
			}
		}
	}
	// Every knob set is read somewhere: the packages or the test kits.
	kits := goSources(t, filepath.Join(root, "internal/smsstest"), true) + goSources(t, filepath.Join(root, "internal/smsstest"), false)
	if st, err := os.Stat(filepath.Join(root, "e2e/internal/kit")); err == nil && st.IsDir() {
		kits += goSources(t, filepath.Join(root, "e2e/internal/kit"), false)
	}
	for _, v := range env {
		all := kits
		for _, p := range pkgs {
			all += goSources(t, filepath.Join(root, p), true) + goSources(t, filepath.Join(root, p), false)
		}
		if !strings.Contains(all, `"`+v+`"`) {
			t.Fatalf("%s: %s is read by none of %s or the test kits", where, v, strings.Join(pkgs, ", "))
		}
	}
}

// goSources returns the Go files of dir (not its subdirectories), the
// tests or the rest, concatenated.
func goSources(t *testing.T, dir string, tests bool) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") != tests {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}
