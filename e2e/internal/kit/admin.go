package kit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

// AdminToken protects the admin endpoints of these tests.
const AdminToken = "e2e-admin-token-0123456789"

// AdminConfig is the config tail that turns the admin endpoint on at a
// free loopback port.
func AdminConfig(token string) string {
	s := "admin:\n  listen: 127.0.0.1:0\n"
	if token != "" {
		s += "  token: " + token + "\n"
	}
	return s
}

var adminListenRe = regexp.MustCompile(`msg="admin listening".*addr=(\S+)`)

// AdminAddr returns the admin address the server logged.
func AdminAddr(t testing.TB, p *Proc) string {
	t.Helper()
	var addr string
	if !smsstest.Poll(10*time.Second, func() bool {
		if m := adminListenRe.FindStringSubmatch(p.Out.String()); m != nil {
			addr = m[1]
			return true
		}
		return false
	}) {
		t.Fatalf("no admin address logged:\n%s", p.Out.String())
	}
	return addr
}

// AdminHTTP is the client of the admin API calls; its timeout keeps a hung
// admin listener from hanging the test.
var AdminHTTP = &http.Client{Timeout: 10 * time.Second}

// AdminGet fetches path; token "" sends no Authorization header.
func AdminGet(t testing.TB, addr, token, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := AdminHTTP.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// AdminJSON fetches path with the token and decodes a 200 answer into v.
func AdminJSON(t testing.TB, addr, path string, v any) {
	t.Helper()
	code, body := AdminGet(t, addr, AdminToken, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

// Scrape returns the samples of a Prometheus text exposition as
// `name{labels}` → value (labels as exposed, sorted by the server).
func Scrape(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	code, body := AdminGet(t, addr, AdminToken, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("bad exposition line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad value in %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// WaitMetric scrapes until series has value want.
func WaitMetric(t testing.TB, addr, series string, want float64) {
	t.Helper()
	var got float64
	var ok bool
	if !smsstest.Poll(10*time.Second, func() bool {
		got, ok = Scrape(t, addr)[series]
		return ok && got == want
	}) {
		t.Fatalf("%s = %v (present %v), want %v", series, got, ok, want)
	}
}

// Series is a metric's name with its labels as the exposition format
// writes them, name{k="v",...}, the key Scrape's map uses.
func Series(name string, labels ...string) string {
	if len(labels) == 0 {
		return name
	}
	var kv []string
	for i := 0; i+1 < len(labels); i += 2 {
		kv = append(kv, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	return name + "{" + strings.Join(kv, ",") + "}"
}
