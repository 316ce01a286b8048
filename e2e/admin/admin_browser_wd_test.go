package admin

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

// browser is a headless Chromium driven by chromedriver over the W3C
// WebDriver protocol (plain JSON over HTTP): just the commands the
// dashboard test needs, so no module is added for it.
type browser struct {
	base, session string
	hc            *http.Client
}

// browserBinaries finds chromedriver and Chromium (Debian packages
// chromium-driver and chromium, which .ci/run installs). Without them the
// test fails under CI=true, where their absence is a broken set-up, and is
// skipped elsewhere.
func browserBinaries(t *testing.T) (driver, chrome string) {
	t.Helper()
	driver, derr := exec.LookPath("chromedriver")
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			chrome = p
			break
		}
	}
	if derr == nil && chrome != "" {
		return driver, chrome
	}
	msg := "chromedriver and chromium not found (apt-get install chromium chromium-driver; .ci/run does it)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return "", ""
}

var driverPortRe = regexp.MustCompile(`started successfully on port (\d+)`)

// startBrowser starts chromedriver on a free loopback port and opens a
// session of headless Chromium with a fresh profile and a 1400x900 page.
// Everything it starts is gone when the test's cleanups have run, whether
// the test passed or not.
func startBrowser(t *testing.T, driverPath, chromePath string) *browser {
	t.Helper()
	// The profile directory is made first so that its removal (a cleanup)
	// runs after the processes that write into it are gone.
	profile := filepath.Join(t.TempDir(), "profile")

	// Port 0: chromedriver picks a free port and says which, so there is
	// no window in which another process can take it.
	out := &smsstest.SyncBuffer{}
	cmd := exec.Command(driverPath, "--port=0")
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: the browser processes it spawns stay in it,
	// so a kill of the group reaches them even if chromedriver is wedged.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromedriver: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { killBrowserProcs(t, cmd.Process.Pid, exited, profile) })

	var port string
	if !smsstest.Poll(20*time.Second, func() bool {
		if m := driverPortRe.FindStringSubmatch(out.String()); m != nil {
			port = m[1]
			return true
		}
		select {
		case <-exited:
			return true
		default:
			return false
		}
	}) || port == "" {
		t.Fatalf("chromedriver did not start:\n%s", out.String())
	}
	b := &browser{base: "http://127.0.0.1:" + port, hc: &http.Client{Timeout: 20 * time.Second}}

	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--window-size=1400,900", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run", "--no-default-browser-check", "--user-data-dir=" + profile}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome", "goog:chromeOptions": map[string]any{"binary": chromePath, "args": args}}}}
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(http.MethodPost, "/session", caps, &created); err != nil {
		t.Fatalf("new browser session: %v\n%s", err, out.String())
	}
	b.session = created.SessionID
	// Closing the session lets Chromium exit cleanly (its crash handlers
	// included) before the process group is killed.
	t.Cleanup(func() {
		hc := &http.Client{Timeout: 10 * time.Second}
		req, err := http.NewRequest(http.MethodDelete, b.base+"/session/"+b.session, nil)
		if err == nil {
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	})

	// --window-size counts the window frame: grow the window so the page
	// itself gets 1400x900.
	if v, err := b.exec(`return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]`); err == nil {
		if a, ok := v.([]any); ok && len(a) == 2 {
			fw, _ := a[0].(float64)
			fh, _ := a[1].(float64)
			if err := b.call(http.MethodPost, b.path("/window/rect"), map[string]any{"width": 1400 + fw, "height": 900 + fh}, nil); err != nil {
				t.Fatalf("resize window: %v", err)
			}
		}
	}
	return b
}

// killBrowserProcs ends chromedriver's process group and then makes sure
// no process that uses the test's profile directory is left (Chromium's
// crash handlers start their own sessions, outside the group; they exit
// with the browser, but not always at once).
func killBrowserProcs(t *testing.T, pgid int, exited <-chan struct{}, profile string) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("chromedriver (pid %d) did not exit after SIGKILL", pgid)
	}
	if smsstest.Poll(10*time.Second, func() bool { return len(profileProcs(profile)) == 0 }) {
		return
	}
	for _, pid := range profileProcs(profile) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if left := profileProcs(profile); len(left) > 0 {
		t.Errorf("browser processes %v still running after SIGKILL", left)
	}
}

// profileProcs lists the processes whose command line names profile
// (Linux /proc; elsewhere nothing is found).
func profileProcs(profile string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(profile)) {
			continue
		}
		// A zombie keeps its command line until reaped by its parent; it
		// runs nothing.
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && bytes.HasPrefix(st[i+1:], []byte(" Z")) {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

func (b *browser) path(p string) string { return "/session/" + b.session + p }

// call sends one command and decodes the "value" of the answer into out.
func (b *browser) call(method, path string, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return err
		}
	} else if method == http.MethodPost {
		payload = []byte("{}")
	}
	req, err := http.NewRequest(method, b.base+path, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return fmt.Errorf("webdriver %s %s: %s: %w", method, path, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("webdriver %s %s: %s: %s", method, path, resp.Status, env.Value)
	}
	if out != nil {
		return json.Unmarshal(env.Value, out)
	}
	return nil
}

func (b *browser) open(url string) error {
	return b.call(http.MethodPost, b.path("/url"), map[string]string{"url": url}, nil)
}

// exec runs script (a function body) in the page and returns its result.
func (b *browser) exec(script string, args ...any) (any, error) {
	if args == nil {
		args = []any{}
	}
	var v any
	err := b.call(http.MethodPost, b.path("/execute/sync"), map[string]any{"script": script, "args": args}, &v)
	return v, err
}

// screenshot returns a PNG of the page as displayed.
func (b *browser) screenshot() ([]byte, error) {
	var b64 string
	if err := b.call(http.MethodGet, b.path("/screenshot"), nil, &b64); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(b64)
}

// waitFor evaluates script until it returns true or within passes, calling
// step (when not nil) before each evaluation: that is how traffic keeps
// flowing while the page is watched.
func (b *browser) waitFor(t *testing.T, what, script string, within time.Duration, step func()) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last any
	var lastErr error
	for {
		if step != nil {
			step()
		}
		last, lastErr = b.exec(script)
		if ok, _ := last.(bool); ok && lastErr == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (last result %v, %v)", within, what, last, lastErr)
		}
		// The page cannot signal this process: poll it.
		<-time.After(100 * time.Millisecond)
	}
}

// dumpOnFailure logs what the page showed, for a failed test.
func (b *browser) dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if v, err := b.exec(`return document.body.innerText`); err == nil {
			s, _ := v.(string)
			t.Logf("page text at failure:\n%s", strings.TrimSpace(s[:min(len(s), 4000)]))
		} else {
			t.Logf("page text at failure: %v", err)
		}
	})
}
