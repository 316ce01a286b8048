package config

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestEmbeddedSampleEqualsDefault(t *testing.T) {
	got, err := Parse(sample)
	if err != nil {
		t.Fatalf("embedded sample does not parse: %v", err)
	}
	if want := Default(); !reflect.DeepEqual(got, want) {
		t.Fatalf("embedded sample differs from Default():\n got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

// Every key must be spelled out in the sample (with a comment), not merely
// defaulted: the sample is the documentation.
func TestSampleMentionsEveryKeyWithComment(t *testing.T) {
	lines := strings.Split(string(sample), "\n")
	for _, kv := range Default().Summary()[1:] {
		key := kv.(slog.Attr).Key
		leaf := key[strings.LastIndex(key, ".")+1:]
		re := regexp.MustCompile(`^\s*` + regexp.QuoteMeta(leaf) + `:`)
		found := false
		for i, l := range lines {
			if re.MatchString(l) {
				found = true
				if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
					t.Errorf("key %s (line %d) has no comment above it", key, i+1)
				}
				if !strings.Contains(lines[i-1], "Default:") {
					t.Errorf("key %s: the comment line right above it must state the default", key)
				}
			}
		}
		if !found {
			t.Errorf("key %s missing from config.yaml", key)
		}
	}
}

func TestSummaryListsEveryKey(t *testing.T) {
	c := Default()
	c.Source = "x.yaml"
	s := c.Summary()
	keys := map[string]any{}
	for _, a := range s {
		attr := a.(slog.Attr)
		keys[attr.Key] = attr.Value.Any()
	}
	for key, want := range map[string]any{
		"config.source":             "x.yaml",
		"host":                      "127.0.0.1",
		"port":                      int64(12301),
		"log.rotate.maxAge":         int64(14),
		"store.noCache":             false,
		"timeout.server.alive":      int64(30000),
		"delay.maxDelay":            int64(2592000000),
		"worker.maxGroupBytes":      int64(4194304),
		"worker.groupWaitUs":        int64(500),
		"worker.inlineDeliveries":   int64(4),
		"store.maxSlaveKeepFiles":   int64(64),
		"admin.listen":              "",
		"admin.token":               "",
		"timeout.net.request":       int64(60000),
		"replication.lingerMs":      int64(5),
		"replication.syncSlaves":    int64(0),
		"replication.syncTimeoutMs": int64(2000),
		"replication.onSyncTimeout": "fail",
		"dedupe.window":             int64(120000),
		"dedupe.maxIds":             int64(1000000),
		"limit.maxFrameBytes":       int64(16777216),
		"cursor.enabled":            true,
		"cursor.flushMs":            int64(1000),
		"queue.enabled":             true,
		"queue.maxGroups":           int64(1000),
		"server.epoll":              true,
		"server.epollMinConns":      int64(8),
		"server.maxProcs":           int64(0),
	} {
		if got, ok := keys[key]; !ok || got != want {
			t.Errorf("summary %s = %v (%T), want %v", key, got, got, want)
		}
	}
	if got := keys["replication.rejoinMaxProbes"]; got != int64(64) {
		t.Errorf("summary replication.rejoinMaxProbes = %v (%T), want 64", got, got)
	}
	// 46 keys (with dedupe.*, the three capacity keys of issue 23 and
	// limit.maxDiscard) + 21 security/replication keys (security.go, with the
	// three semi-sync keys and rejoinMaxProbes) + 10 hardening keys of issue
	// 18 + 5 cursor keys of issue 22 + server.epoll and
	// worker.inlineDeliveries and server.maxProcs and server.epollMinConns
	// of issue 24 + 10 cluster keys of issue 31 + replication.readCommitted
	// of issue 32 + replication.promoteQuietMs of issue 35 + 4 queue keys
	// of issue 33 + source
	if len(s) != 103 {
		t.Errorf("summary has %d entries, want 103", len(s))
	}
}

// Secrets never reach the start-up log or the admin API's config view.
func TestSummaryRedactsSecrets(t *testing.T) {
	c := Default()
	c.Admin.Listen, c.Admin.Token = "127.0.0.1:0", "s3cret-token-0123456789"
	found := false
	for _, a := range c.Summary() {
		attr := a.(slog.Attr)
		if strings.Contains(attr.Value.String(), "s3cret") {
			t.Errorf("summary %s shows the secret", attr.Key)
		}
		if attr.Key == "admin.token" {
			found = true
			if attr.Value.String() != Redacted {
				t.Errorf("admin.token summarised as %q, want %q", attr.Value, Redacted)
			}
		}
	}
	if !found {
		t.Error("admin.token missing from the summary")
	}
}

func TestLoadAdminSection(t *testing.T) {
	c, err := Parse([]byte("admin:\n  listen: 127.0.0.1:12380\n  token: abcdefghijklmnopqrstuvwxyz\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Listen != "127.0.0.1:12380" || c.Admin.Token != "abcdefghijklmnopqrstuvwxyz" {
		t.Fatalf("admin section %+v", c.Admin)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse([]byte("admin:\n  tokn: x\n")); err == nil || !strings.Contains(err.Error(), `unknown key "admin.tokn"`) {
		t.Fatalf("misspelt admin key: %v", err)
	}
}

func TestDurations(t *testing.T) {
	c := Default()
	for name, tc := range map[string]struct{ got, want time.Duration }{
		"IdleWake":           {c.IdleWake(), time.Second},
		"AliveInterval":      {c.AliveInterval(), 30 * time.Second},
		"AliveWriteTimeout":  {c.AliveWriteTimeout(), time.Second},
		"ReadTimeout":        {c.ReadTimeout(), 5 * time.Second},
		"ReplyTimeout":       {c.ReplyTimeout(), 5 * time.Second},
		"IdleTimeout":        {c.IdleTimeout(), 30 * time.Minute},
		"MaxAckTimeout":      {c.MaxAckTimeout(), 10 * time.Minute},
		"DefaultAckTimeout":  {c.DefaultAckTimeout(), 3 * time.Second},
		"MaxDelay":           {c.MaxDelay(), 30 * 24 * time.Hour},
		"ClearInterval":      {c.ClearInterval(), 2 * time.Hour},
		"WaitDelLockTimeout": {c.WaitDelLockTimeout(), 3 * time.Second},
		"DefaultScan":        {c.DefaultScan(), 2 * time.Hour},
		"FirstExec":          {c.FirstExec(), time.Second},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", name, tc.got, tc.want)
		}
	}
	for _, v := range []int{0, -3} {
		c.Background.FirstExecSecond = v
		if got := c.FirstExec(); got != 5*time.Second {
			t.Errorf("FirstExec with firstExecSecond %d = %v, want 5s", v, got)
		}
	}
	c.Host, c.Port = "::1", 0
	if got := c.ListenAddr(); got != "[::1]:0" {
		t.Errorf("ListenAddr = %q", got)
	}
}

func TestLoadPartialFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeFile(t, path, "port: 4000\nstore:\n  folderCount: 20\nlog:\n  rotate:\n    maxAge: 3\n")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Port = 4000
	want.Store.FolderCount = 20
	want.Log.Rotate.MaxAge = 3
	want.Source = path
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
}

func TestLoadEmptyAndEmptySection(t *testing.T) {
	for name, body := range map[string]string{
		"empty":         "",
		"comments only": "# nothing\n",
		"empty section": "store:\n  # path: elsewhere\nlog:\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c, Default()) {
				t.Fatalf("got %+v, want defaults", c)
			}
		})
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown top key", "porrt: 1\n", []string{`line 1`, `unknown key "porrt"`}},
		{"unknown nested key", "log:\n  rotate:\n    maxsize: 3\n",
			[]string{`line 3`, `unknown key "log.rotate.maxsize"`, `did you mean "log.rotate.maxSize"`}},
		{"unknown section", "storage:\n  path: x\n", []string{`unknown key "storage"`}},
		{"wrong type", "store:\n  folderCount: ten\n", []string{`line 2`, `"store.folderCount"`, `must be an integer (got "ten")`}},
		{"quoted number", "port: \"80\"\n", []string{`"port"`, `must be an integer (got "80")`}},
		{"bool", "store:\n  noCache: maybe\n", []string{`"store.noCache"`, `not a valid bool`}},
		{"overflow", "port: 99999999999999999999999\n", []string{`"port"`}},
		{"null leaf", "port:\n", []string{`"port" has no value`}},
		{"section as scalar", "store: data\n", []string{`store must be a section`}},
		{"leaf as mapping", "port:\n  x: 1\n", []string{`"port" must be a single int value`}},
		{"duplicate", "port: 1\nport: 2\n", []string{`line 2`, `"port" set twice (first on line 1)`}},
		{"not a mapping", "- 1\n- 2\n", []string{`must be a mapping`}},
		{"two documents", "port: 1\n---\nport: 2\n", []string{`more than one YAML document`}},
		{"syntax", "port: [1\n", []string{`config: input:`}},
		{"unknown key via merge", "base: &b {port: 1}\n", []string{`unknown key "base"`}},
		{"float port", "port: 22051.5\n", []string{`line 1`, `"port" must be an integer (got "22051.5")`}},
		{"exponent size", "store:\n  maxLogSize: 1.5e9\n", []string{`line 2`, `"store.maxLogSize" must be an integer (got "1.5e9")`}},
		{"whole float", "limit:\n  maxConns: 100.0\n", []string{`"limit.maxConns" must be an integer (got "100.0")`}},
		{"float ms", "delay:\n  maxDelay: 1e12\n", []string{`"delay.maxDelay" must be an integer`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.body))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Errorf("error %q lacks the config: prefix", err)
			}
		})
	}
}

func TestLoadErrorNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeFile(t, path, "store:\n  maxLogsize: 5\n")
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path+":2: unknown key \"store.maxLogsize\"") {
		t.Fatalf("got %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("missing explicit file: no error")
	}
}

func TestAliasesAreFollowed(t *testing.T) {
	c, err := Parse([]byte("store:\n  folderCount: &f 20\nworker:\n  maxGroup: *f\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.FolderCount != 20 || c.Worker.MaxGroup != 20 {
		t.Fatalf("aliases not applied: %+v", c)
	}
}

// Load("") uses ./config/config.yaml when present, else the embedded sample.
// The test changes the working directory, so it must not run in parallel.
func TestLoadDefaultPath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)

	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Source != SourceEmbedded {
		t.Fatalf("source %q, want embedded", c.Source)
	}
	c.Source = ""
	if !reflect.DeepEqual(c, Default()) {
		t.Fatalf("embedded load differs from defaults")
	}

	if err := os.Mkdir("config", 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join("config", "config.yaml"), "port: 5555\n")
	c, err = Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 5555 || c.Source != DefaultPath {
		t.Fatalf("port %d source %q", c.Port, c.Source)
	}
}

func TestSampleIsACopy(t *testing.T) {
	s := Sample()
	s[0] ^= 0xff
	if Sample()[0] == s[0] {
		t.Fatal("Sample returned the embedded slice itself")
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
