//go:build unix

package smsstest

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// ListenRe matches the line smss logs once it listens; its submatch is the
// address.
var ListenRe = regexp.MustCompile(`smss listening.*addr=(\S+)`)

// BinEnv names an environment variable that, when set, is the smss binary
// SmssBinary returns instead of building one (to test a release build).
const BinEnv = "SMSS_TEST_BIN"

type build struct {
	once sync.Once
	path string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*build{} // by package path relative to the module root
	buildDir string                // holds every binary built by this test binary
)

// Binary returns the path of a binary built from pkg, a package path
// relative to the module root ("./cmd/smss") or an import path the module
// requires. It is built once per test binary, into a temporary directory
// that Main or RemoveBinaries removes.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	buildsMu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.path, b.err = goBuild(pkg) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func goBuild(pkg string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	buildsMu.Lock()
	if buildDir == "" {
		buildDir, err = os.MkdirTemp("", "smsstest-bin")
	}
	dir := buildDir
	buildsMu.Unlock()
	if err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	sub, err := os.MkdirTemp(dir, "")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	bin := filepath.Join(sub, binaryName(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// binaryName is the name go build gives pkg's binary: its last path
// element, or the one before a major-version suffix (".../nats-server/v2").
func binaryName(pkg string) string {
	name := path.Base(pkg)
	if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		name = path.Base(path.Dir(pkg))
	}
	return name
}

// SmssBinary returns the smss binary under test: $SMSS_TEST_BIN if set,
// else Binary(t, "./cmd/smss").
func SmssBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(BinEnv); bin != "" {
		return bin
	}
	return Binary(t, "./cmd/smss")
}

// RemoveBinaries removes every binary Binary built. Tests must not run
// after it.
func RemoveBinaries() {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	buildDir = ""
	builds = map[string]*build{}
}

// Main runs the tests and removes the binaries built for them; call it
// from TestMain of a package that uses Binary.
func Main(m *testing.M) {
	code := m.Run()
	RemoveBinaries()
	os.Exit(code)
}

// ModuleRoot returns the directory of the go.mod of the working directory's
// module.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// WriteConfig writes dir/config.yaml for an smss whose data lives in
// dir/data, listening on 127.0.0.1:port (0: any free port, which the
// listening line then names), logging to stdout without sampling; extra is
// YAML appended as it is (top-level keys). It returns the file's path.
func WriteConfig(t testing.TB, dir string, port int, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf("host: 127.0.0.1\nport: %d\nlog:\n  path: stdout\n  sample: 0\nstore:\n  path: %s\n%s",
		port, filepath.Join(dir, "data"), extra)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// SmssCommand returns the command that runs smss on dir/config.yaml with
// args, in dir.
func SmssCommand(t testing.TB, dir string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(SmssBinary(t), append([]string{"-config", filepath.Join(dir, "config.yaml")}, args...)...)
	cmd.Dir = dir
	return cmd
}

// StartSmss runs smss on dir/config.yaml (see WriteConfig) with args and
// waits until it listens; the returned Proc's Addr is its address.
func StartSmss(t testing.TB, dir string, args ...string) *Proc {
	t.Helper()
	return StartProc(t, SmssCommand(t, dir, args...), ListenRe)
}
