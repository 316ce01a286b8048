package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/admin/adminclient"
	"github.com/smssmq/smss/internal/smsstest"
)

const statsToken = "ctl-test-token-0123456789"

var adminRe = regexp.MustCompile(`msg="admin listening".*addr=(\S+)`)

// startAdminServer runs smss with the admin endpoint on a free loopback
// port protected by statsToken; it returns the client and admin addresses.
func startAdminServer(t *testing.T) (string, string) {
	t.Helper()
	addr, out := startServerWith(t, "admin:\n  listen: 127.0.0.1:0\n  token: "+statsToken+"\n")
	m := adminRe.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no admin address logged:\n%s", out.String())
	}
	return addr, m[1]
}

// startSub runs `smssctl sub` in the background until the test ends and
// waits for its first message.
func startSub(t *testing.T, addr, topic, who, first string) {
	t.Helper()
	cmd := exec.Command(ctlBin, "sub", topic, "--who", who)
	cmd.Env = append(os.Environ(), "SMSS_ADDR="+addr)
	out := &smsstest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	out.WaitContains(t, 20*time.Second, first)
}

func TestStatsAgainstServer(t *testing.T) {
	addr, adm := startAdminServer(t)
	ctl(t, addr, "", "topic", "create", "orders").expect(t, 0)
	for _, body := range []string{"one", "two", "three"} {
		ctl(t, addr, "", "pub", "orders", body).expect(t, 0)
	}
	startSub(t, addr, "orders", "billing", "\tthree")

	// No token: refused, and said so.
	r := ctl(t, addr, "", "stats", "--admin", adm)
	if r.code != 1 || !strings.Contains(r.stderr, "unauthorized") {
		t.Fatalf("stats without a token: %+v", r)
	}
	r = ctl(t, addr, "", "stats", "--admin", adm, "--token", "wrong-token-0123456789")
	if r.code != 1 || !strings.Contains(r.stderr, "unauthorized") {
		t.Fatalf("stats with a wrong token: %+v", r)
	}

	// The token from a file, by flag or environment; never with --token.
	tokFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokFile, []byte(statsToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl(t, addr, "", "stats", "--admin", adm, "--token-file", tokFile).expect(t, 0, "smss master")
	t.Setenv("SMSS_ADMIN_TOKEN_FILE", tokFile)
	t.Setenv("SMSS_ADMIN_TOKEN", "wrong-token-from-the-environment")
	ctl(t, addr, "", "stats", "--admin", adm).expect(t, 0, "smss master")
	if r := ctl(t, addr, "", "stats", "--admin", adm, "--token", statsToken); r.code != 2 || !strings.Contains(r.stderr, "exclusive") {
		t.Fatalf("--token with a token file: %+v", r)
	}
	t.Setenv("SMSS_ADMIN_TOKEN_FILE", "")

	t.Setenv("SMSS_ADMIN_TOKEN", statsToken)
	t.Setenv("SMSS_ADMIN_ADDR", adm)
	r = ctl(t, addr, "", "stats")
	r.expect(t, 0, "smss master", "TOPICS  1 live", "orders", "SUBSCRIBERS  1", "billing", "REPLICATION  master, 0 slave(s)", "DELAYED  0 pending")

	var st adminclient.Stats
	r = ctl(t, addr, "", "--json", "stats", "--admin", "http://"+adm)
	r.expect(t, 0)
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, r.stdout)
	}
	if st.Info.ListenAddr != addr || st.Info.Role != "master" || !st.Info.Ready || st.Info.LastEventID != 4 {
		t.Errorf("info %+v", st.Info)
	}
	if st.Info.Config["admin.token"] != "<redacted>" {
		t.Errorf("config shows admin.token as %v", st.Info.Config["admin.token"])
	}
	if len(st.Topics) != 1 {
		t.Fatalf("topics %+v", st.Topics)
	}
	tp := st.Topics[0]
	if tp.Name != "orders" || tp.Stats == nil || tp.Stats.FirstEventID != 2 || tp.Stats.LastEventID != 4 || tp.Stats.Bytes <= 0 ||
		tp.Counters == nil || tp.Counters.Messages != 3 || tp.Subscribers != 1 {
		t.Errorf("topic %+v stats %+v counters %+v", tp, tp.Stats, tp.Counters)
	}
	if len(st.Subscribers) != 1 || st.Subscribers[0].Who != "billing" || st.Subscribers[0].Delivered != 4 || st.Subscribers[0].RemoteAddr == "" {
		t.Errorf("subscribers %+v", st.Subscribers)
	}
}

func TestTopAgainstServer(t *testing.T) {
	addr, adm := startAdminServer(t)
	ctl(t, addr, "", "topic", "create", "orders").expect(t, 0)
	ctl(t, addr, "", "pub", "orders", "m").expect(t, 0)
	t.Setenv("SMSS_ADMIN_TOKEN", statsToken)
	start := time.Now()
	r := ctl(t, addr, "", "top", "--admin", adm, "--interval", "200ms", "--duration", "1500ms")
	r.expect(t, 0, "\x1b[H\x1b[2J", "orders", "IN/S", "SUBSCRIBERS")
	if frames := strings.Count(r.stdout, "\x1b[H\x1b[2J"); frames < 3 {
		t.Errorf("top drew %d frames in 1.5s at 200ms", frames)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("top --duration 1500ms ran %v", d)
	}
	for _, args := range [][]string{{"top", "--interval", "0s"}, {"top", "--duration", "0s"}, {"top", "extra"}, {"stats", "extra"}} {
		if r := ctl(t, addr, "", args...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, r.code, r.stderr)
		}
	}
	if r := ctl(t, addr, "", "top", "--admin", adm, "--token", "wrong-token-0123456789", "--duration", "5s"); r.code != 1 ||
		!strings.Contains(r.stderr, "unauthorized") {
		t.Errorf("top with a wrong token: %+v", r)
	}
}
