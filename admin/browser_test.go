package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/smssmq/smss/admin/internal/sim"
	"github.com/smssmq/smss/metrics"
)

// TestDashboardInBrowser loads the dashboard in headless Chromium through
// chromedriver (Debian packages chromium and chromium-driver; .ci/run
// installs them): it signs in with the token, waits for the topic table,
// starts traffic and waits for the throughput chart and the topic rates to
// show it. Set SMSS_DASHBOARD_SCREENSHOT=path.png to keep a screenshot.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	driverPath, err := exec.LookPath("chromedriver")
	if err != nil {
		t.Skip("chromedriver not installed (apt-get install chromium chromium-driver)")
	}

	// SMSS_DASHBOARD_SOAK=2m lets the charts fill before a screenshot; it
	// samples at the production rate then.
	soak, _ := time.ParseDuration(os.Getenv("SMSS_DASHBOARD_SOAK"))
	interval := 250 * time.Millisecond
	if soak > 0 {
		interval = DefaultSampleInterval
	}
	s := sim.New(metrics.RoleMaster)
	srv, err := New(Options{Listen: "127.0.0.1:0", Token: testToken, Metrics: s.Metrics, Source: s.Source,
		Logger: quietLogger(), SampleInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()

	wd := startDriver(t, driverPath)
	if err := wd.open("http://" + srv.Addr() + "/"); err != nil {
		t.Fatal(err)
	}
	wd.waitFor(t, "the login prompt", `return !document.getElementById("login").hidden`, 20*time.Second)
	if _, err := wd.exec(`document.getElementById("login-token").value = arguments[0];
		document.getElementById("login-form").requestSubmit(); return true`, testToken); err != nil {
		t.Fatal(err)
	}
	wd.waitFor(t, "the topic table", `
		const rows = [...document.querySelectorAll("#topics tbody tr td.name")].map((td) => td.textContent);
		return document.getElementById("login").hidden && rows.includes("orders") && rows.includes("payments.settlement")`, 20*time.Second)
	wd.waitFor(t, "subscribers and replication", `
		return document.querySelectorAll("#subs tbody tr").length >= 5 &&
			document.getElementById("repl").textContent.includes("10.0.0.6:40112")`, 20*time.Second)
	before, err := wd.exec(`return Number(document.getElementById("c-tput").dataset.points)`)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, interval/5)
	wd.waitFor(t, "the throughput chart to update", fmt.Sprintf(`
		const n = Number(document.getElementById("c-tput").dataset.points);
		return n >= %v + 3 && /^[1-9]/.test(document.getElementById("k-in").textContent)`, before), 30*time.Second)
	wd.waitFor(t, "topic rates in the table", `
		const row = [...document.querySelectorAll("#topics tbody tr")].find((tr) => tr.querySelector("td.name").textContent === "orders");
		return row && /^[1-9]/.test(row.children[4].textContent)`, 30*time.Second)

	if path := os.Getenv("SMSS_DASHBOARD_SCREENSHOT"); path != "" {
		if soak > 0 {
			<-time.After(soak)
		}
		png, err := wd.screenshot()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", path)
	}
}

// webDriver is the little of the W3C WebDriver protocol the test needs.
type webDriver struct {
	base, session string
	hc            *http.Client
}

func startDriver(t *testing.T, path string) *webDriver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(path, "--port="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromedriver: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	wd := &webDriver{base: "http://127.0.0.1:" + strconv.Itoa(port), hc: &http.Client{Timeout: 60 * time.Second}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st struct {
			Ready bool `json:"ready"`
		}
		if err := wd.call(http.MethodGet, "/status", nil, &st); err == nil && st.Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("chromedriver did not become ready")
		}
		waitABit()
	}
	args := []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--window-size=1400,900", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run", "--user-data-dir=" + filepath.Join(t.TempDir(), "profile")}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome", "goog:chromeOptions": map[string]any{"args": args}}}}
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := wd.call(http.MethodPost, "/session", caps, &created); err != nil {
		t.Fatalf("new browser session: %v", err)
	}
	wd.session = created.SessionID
	t.Cleanup(func() { _ = wd.call(http.MethodDelete, "/session/"+wd.session, nil, nil) })
	// --window-size counts the window frame: grow the window so the page
	// itself gets 1400x900, a laptop screen.
	var inner []float64
	if v, err := wd.exec(`return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]`); err == nil {
		if a, ok := v.([]any); ok && len(a) == 2 {
			for _, x := range a {
				f, _ := x.(float64)
				inner = append(inner, f)
			}
			_ = wd.call(http.MethodPost, "/session/"+wd.session+"/window/rect",
				map[string]any{"width": 1400 + inner[0], "height": 900 + inner[1]}, nil)
		}
	}
	return wd
}

// call sends one command and decodes the "value" of the answer into out.
func (wd *webDriver) call(method, path string, body, out any) error {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	} else if method == http.MethodPost {
		rd = bytes.NewReader([]byte("{}"))
	}
	var req *http.Request
	var err error
	if rd != nil {
		req, err = http.NewRequest(method, wd.base+path, rd)
	} else {
		req, err = http.NewRequest(method, wd.base+path, nil)
	}
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := wd.hc.Do(req)
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

func (wd *webDriver) open(url string) error {
	return wd.call(http.MethodPost, "/session/"+wd.session+"/url", map[string]string{"url": url}, nil)
}

func (wd *webDriver) exec(script string, args ...any) (any, error) {
	if args == nil {
		args = []any{}
	}
	var v any
	err := wd.call(http.MethodPost, "/session/"+wd.session+"/execute/sync", map[string]any{"script": script, "args": args}, &v)
	return v, err
}

func (wd *webDriver) screenshot() ([]byte, error) {
	var b64 string
	if err := wd.call(http.MethodGet, "/session/"+wd.session+"/screenshot", nil, &b64); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(b64)
}

// waitFor polls script until it returns true or the deadline passes.
func (wd *webDriver) waitFor(t *testing.T, what, script string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last any
	var lastErr error
	for time.Now().Before(deadline) {
		last, lastErr = wd.exec(script)
		if ok, _ := last.(bool); ok && lastErr == nil {
			return
		}
		waitABit()
	}
	t.Fatalf("timed out waiting for %s (last result %v, %v)", what, last, lastErr)
}

// waitABit is the polling period of conditions that live in another
// process (chromedriver, the page), which cannot signal us.
func waitABit() { <-time.After(100 * time.Millisecond) }
