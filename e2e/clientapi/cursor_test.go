package clientapi

// Stored consumer positions (issue 22) on real processes: smss servers and
// smssctl consumers that are killed with SIGKILL.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
)

// consumer is an `smssctl sub --resume` process whose printed message
// bodies the test collects (only whole lines: a kill may cut one).
type consumer struct {
	cmd    *exec.Cmd
	out    *smsstest.SyncBuffer
	exited chan struct{}
}

func startConsumer(t *testing.T, addr string, args ...string) *consumer {
	t.Helper()
	c := &consumer{out: &smsstest.SyncBuffer{}, exited: make(chan struct{})}
	c.cmd = exec.Command(kit.CtlBinary(t), append([]string{"--addr", addr, "--timeout", "30s"}, args...)...)
	c.cmd.Stdout, c.cmd.Stderr = c.out, io.Discard
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(c.kill)
	return c
}

func (c *consumer) kill() {
	select {
	case <-c.exited:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// bodies returns the bodies of the whole lines printed ("id\ttime\theaders\tbody").
func (c *consumer) bodies() []string {
	s := c.out.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	} else {
		return nil
	}
	var out []string
	for _, line := range strings.Split(s, "\n") {
		f := strings.Split(line, "\t")
		out = append(out, f[len(f)-1])
	}
	return out
}

func cursorConfig(flushMs int) string {
	return fmt.Sprintf("cursor:\n  flushMs: %d\n", flushMs)
}

// A consumer killed with SIGKILL at random moments, and once the server
// too, and restarted with --resume each time, sees every message at least
// once: smssctl prints a message before it acknowledges it, so a printed
// line is "processed"; no message may be missing from the union of what
// the runs printed.
func TestCursorResumeAfterRandomKills(t *testing.T) {
	dir := t.TempDir()
	port := kit.FreePort(t)
	kit.ReplConfig(t, dir, port, cursorConfig(50))
	srv := kit.StartArgs(t, dir)
	addr := srv.Addr
	pub := kit.NewPublisher(t, addr)
	pub.Create("t")
	const total = 1500
	var pubMu sync.Mutex
	published := 0
	retried := map[string]bool{} // bodies published again after a failed try: maybe stored twice
	pubDone := make(chan struct{})
	pubErr := make(chan error, 1)
	go func() {
		defer close(pubDone)
		for i := 0; i < total; i++ {
			body := fmt.Sprintf("m%05d", i)
			again, err := retryPub(addr, "t", body)
			if err != nil {
				pubErr <- err
				return
			}
			pubMu.Lock()
			published++
			if again {
				retried[body] = true
			}
			pubMu.Unlock()
			time.Sleep(2 * time.Millisecond) // spread over several consumer runs
		}
	}()
	seen := map[string]int{}
	runs, dups, rewinds := 0, 0, 0
	serverKilled := false
	deadline := time.Now().Add(3 * time.Minute)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 22))
	const minRuns = 12
	for {
		finished := false
		select {
		case <-pubDone:
			finished = true
		default:
		}
		lastBody := fmt.Sprintf("m%05d", total-1)
		if finished && seen[lastBody] > 0 && runs >= minRuns {
			break // every message is published and the consumer reached the last one
		}
		runs++
		batch := []string{"1", "7", "255"}[rng.IntN(3)]
		c := startConsumer(t, addr, "sub", "t", "--who", "w", "--resume", "--batch", batch)
		if finished && runs >= minRuns {
			// Let this run reach the last message, then stop it.
			lastBody := fmt.Sprintf("m%05d", total-1)
			smsstest.Poll(60*time.Second, func() bool { bs := c.bodies(); return len(bs) > 0 && bs[len(bs)-1] == lastBody })
		} else {
			time.Sleep(time.Duration(30+rng.IntN(300)) * time.Millisecond)
		}
		pubMu.Lock()
		half := published > total/2
		pubMu.Unlock()
		restarted := false
		if half && !serverKilled {
			// The server dies too (kill -9) and comes back on the same
			// port; positions written before survive, the last
			// flushMs of acks may not (redelivery).
			serverKilled, restarted = true, true
			srv.Kill()
			srv = kit.StartArgs(t, dir)
		}
		c.kill()
		bs := c.bodies()
		pubMu.Lock()
		back, err := checkRun(bs, restarted, func(b string) bool { return seen[b] > 0 }, func(b string) bool { return retried[b] })
		pubMu.Unlock()
		if back {
			rewinds++
		}
		if err != nil {
			t.Fatalf("run %d: %v\n%s", runs, err, strings.Join(bs, " "))
		}
		for _, b := range bs {
			if seen[b] > 0 {
				dups++
			}
			seen[b]++
		}
		select {
		case err := <-pubErr:
			t.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d runs %d of %d messages seen", runs, len(seen), total)
		}
	}
	for i := 0; i < total; i++ {
		if seen[fmt.Sprintf("m%05d", i)] == 0 {
			t.Fatalf("m%05d was never delivered (skipped) in %d runs", i, runs)
		}
	}
	t.Logf("%d consumer runs (one server kill -9), %d messages, %d delivered again, %d runs stepped back after the restart", runs, total, dups, rewinds)
	if !serverKilled {
		t.Error("the server was never killed")
	}
}

// checkRun checks the bodies one consumer run printed (m00000, m00001, …
// in publish order). Each is the one after the one before, except where
// at-least-once delivery repeats what was printed already:
//   - a message whose publish was retried (retried) may be stored twice,
//     so it may follow itself;
//   - in a run during which the server was killed and restarted, the
//     subscriber reconnects and is given its unacknowledged tail again:
//     one step back, to a message delivered before (delivered, or earlier
//     in this run), from which the order goes on.
//
// A skip forward, a step back to a message never delivered, a second step
// back, or one in a run without a restart is an error.
//
// rewound says whether the run stepped back.
func checkRun(bs []string, restarted bool, delivered, retried func(string) bool) (rewound bool, err error) {
	num := func(b string) (int, error) {
		n, err := strconv.Atoi(strings.TrimPrefix(b, "m"))
		if err != nil || !strings.HasPrefix(b, "m") {
			return 0, fmt.Errorf("body %q is not a published one", b)
		}
		return n, nil
	}
	inRun := map[string]bool{}
	for i, b := range bs {
		n, err := num(b)
		if err != nil {
			return rewound, err
		}
		if i > 0 {
			prev, _ := num(bs[i-1])
			switch {
			case n == prev+1:
			case n == prev && retried(b):
			case n > prev:
				return rewound, fmt.Errorf("printed %s after %s: skipped %d", b, bs[i-1], n-prev-1)
			case !restarted:
				return rewound, fmt.Errorf("printed %s after %s without a server restart", b, bs[i-1])
			case rewound:
				return rewound, fmt.Errorf("printed %s after %s: a second step back in one restart", b, bs[i-1])
			case !inRun[b] && !delivered(b):
				return rewound, fmt.Errorf("printed %s after %s: back to a message never delivered", b, bs[i-1])
			default:
				rewound = true // the unacknowledged tail, again after the reconnect
			}
		}
		inRun[b] = true
	}
	return rewound, nil
}

// TestCheckRun: the order check of TestCursorResumeAfterRandomKills
// accepts what at-least-once delivery may repeat and nothing else.
func TestCheckRun(t *testing.T) {
	seenBefore := map[string]bool{"m00005": true, "m00006": true}
	delivered := func(b string) bool { return seenBefore[b] }
	retried := func(b string) bool { return b == "m00009" }
	for _, tc := range []struct {
		name      string
		bs        string
		restarted bool
		wantErr   string
	}{
		{"in order", "m00007 m00008 m00009 m00010", false, ""},
		{"empty", "", false, ""},
		{"redelivered tail after a restart", "m00007 m00008 m00009 m00008 m00009 m00010", true, ""},
		{"back to an earlier run's message", "m00007 m00008 m00006 m00007 m00008", true, ""},
		{"retried publish stored twice", "m00008 m00009 m00009 m00010", false, ""},
		{"tail again without a restart", "m00007 m00008 m00007", false, "without a server restart"},
		{"the failure of issue 34 without a restart", "m00008 m00008", false, "without a server restart"},
		{"skip", "m00007 m00009", false, "skipped 1"},
		{"skip after the redelivery", "m00007 m00008 m00007 m00009", true, "skipped 1"},
		{"reorder to a message never delivered", "m00007 m00008 m00004 m00005", true, "never delivered"},
		{"two steps back", "m00007 m00008 m00007 m00008 m00007", true, "second step back"},
		{"not a published body", "m00007 x", false, "not a published one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkRun(strings.Fields(tc.bs), tc.restarted, delivered, retried)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("correct delivery refused: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

// retryPub publishes one message, retrying while the server restarts; again
// says whether it was sent more than once (a try whose answer was lost may
// have been stored, so the message may be stored twice).
func retryPub(addr, topic, body string) (again bool, err error) {
	deadline := time.Now().Add(60 * time.Second)
	for tries := 0; ; tries++ {
		c, err := dialNoT(addr)
		if err == nil {
			err = c.Pub(topic, kit.Record(nil, body))
			c.C.Close()
			if err == nil {
				return tries > 0, nil
			}
		}
		if time.Now().After(deadline) {
			return tries > 0, fmt.Errorf("publish %s: %w", body, err)
		}
		time.Sleep(50 * time.Millisecond) // the pause between tries of a client
	}
}

// A consumer on the master stops; the master dies; the slave is promoted
// online (`smssctl promote`); the consumer resumes there after the position
// it had on the master.
func TestCursorResumeOnPromotedSlave(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	mport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, cursorConfig(100))
	kit.ReplConfig(t, sdir, 0, cursorConfig(100))
	master := kit.StartArgs(t, mdir)
	slave := kit.StartReplSlave(t, sdir, mport, 0)
	pub := kit.NewPublisher(t, master.Addr)
	pub.Create("t")
	for i := 0; i < 50; i++ {
		pub.Pub("t", kit.Record(nil, fmt.Sprintf("m%02d", i)))
	}
	out, errOut, code := kit.Smssctl(t, master.Addr, "sub", "t", "--who", "w", "--resume", "--count", "20", "--batch", "5")
	if code != 0 || len(strings.Split(strings.TrimSpace(out), "\n")) != 20 {
		t.Fatalf("first consumer: exit %d\n%s%s", code, out, errOut)
	}
	pos := lastEventID(t, out)
	// The position reaches the slave like any write.
	if !smsstest.Poll(30*time.Second, func() bool { return storedOn(t, slave.Addr, "t", "w") == pos }) {
		t.Fatalf("position %d not on the slave: %v\n%s", pos, cursorsOn(t, slave.Addr, "t"), kit.Tail(slave.Out.String(), 3000))
	}
	master.Kill()
	kit.WaitMasterGone(t, slave.Addr)
	if out, errOut, code := kit.Smssctl(t, slave.Addr, "promote"); code != 0 {
		t.Fatalf("promote: exit %d %s%s", code, out, errOut)
	}
	out, errOut, code = kit.Smssctl(t, slave.Addr, "sub", "t", "--who", "w", "--resume", "--count", "30", "--batch", "6")
	if code != 0 {
		t.Fatalf("consumer on the promoted slave: exit %d\n%s%s", code, out, errOut)
	}
	got := bodiesOf(out)
	for i, b := range got {
		if want := fmt.Sprintf("m%02d", 20+i); b != want {
			t.Fatalf("on the promoted slave message %d is %s, want %s (got %v)", i, b, want, got)
		}
	}
	// The promoted slave writes positions of its own.
	if !smsstest.Poll(10*time.Second, func() bool { return storedOn(t, slave.Addr, "t", "w") == lastEventID(t, out) }) {
		t.Fatalf("the promoted slave did not store the new position: %v", cursorsOn(t, slave.Addr, "t"))
	}
}

// Two whos keep independent positions; the lag of a consumer that is away
// stays in the metrics and grows; positions go with their topic; cursor
// set and reset take effect; the system topic is protected and not listed.
func TestCursorWhosLagDeleteAndCommands(t *testing.T) {
	dir := t.TempDir()
	adminPort := kit.FreePort(t)
	kit.ReplConfig(t, dir, 0, cursorConfig(100)+fmt.Sprintf("admin:\n  listen: 127.0.0.1:%d\n", adminPort))
	srv := kit.StartArgs(t, dir)
	pub := kit.NewPublisher(t, srv.Addr)
	pub.Create("t")
	for i := 0; i < 10; i++ {
		pub.Pub("t", kit.Record(nil, fmt.Sprintf("m%02d", i)))
	}
	sub := func(who string, n int) []string {
		t.Helper()
		out, errOut, code := kit.Smssctl(t, srv.Addr, "sub", "t", "--who", who, "--resume", "--count", strconv.Itoa(n), "--batch", "1")
		if code != 0 {
			t.Fatalf("sub %s: %d %s", who, code, errOut)
		}
		return bodiesOf(out)
	}
	if got := sub("a", 3); strings.Join(got, ",") != "m00,m01,m02" {
		t.Fatalf("a: %v", got)
	}
	if got := sub("b", 7); strings.Join(got, ",") != "m00,m01,m02,m03,m04,m05,m06" {
		t.Fatalf("b: %v", got)
	}
	if got := sub("a", 2); strings.Join(got, ",") != "m03,m04" {
		t.Fatalf("a resumed: %v", got)
	}
	metric := func(name, who string) float64 {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", adminPort))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		re := regexp.MustCompile(`(?m)^smss_` + name + `\{topic="t",who="` + who + `"\} (\S+)$`)
		m := re.FindSubmatch(body)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	if !smsstest.Poll(10*time.Second, func() bool { return metric("cursor_lag_messages", "a") == 5 && metric("cursor_lag_messages", "b") == 3 }) {
		t.Fatalf("lag a %v b %v, want 5 and 3", metric("cursor_lag_messages", "a"), metric("cursor_lag_messages", "b"))
	}
	for i := 10; i < 14; i++ {
		pub.Pub("t", kit.Record(nil, fmt.Sprintf("m%02d", i)))
	}
	if !smsstest.Poll(10*time.Second, func() bool { return metric("cursor_lag_messages", "a") == 9 }) {
		t.Fatalf("lag of a consumer that is away did not grow: %v", metric("cursor_lag_messages", "a"))
	}
	// /api/cursors lists both, largest lag first.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/cursors", adminPort))
	if err != nil {
		t.Fatal(err)
	}
	var api []struct {
		Who string `json:"who"`
		Lag int64  `json:"lag"`
	}
	json.NewDecoder(resp.Body).Decode(&api)
	resp.Body.Close()
	if len(api) != 2 || api[0].Who != "a" || api[0].Lag != 9 || api[1].Who != "b" {
		t.Fatalf("/api/cursors: %+v", api)
	}
	// set and reset.
	first := storedOn(t, srv.Addr, "t", "a")
	if out, errOut, code := kit.Smssctl(t, srv.Addr, "cursor", "set", "t", "b", strconv.FormatInt(first, 10)); code != 0 {
		t.Fatalf("cursor set: %s%s", out, errOut)
	}
	if got := sub("b", 1); got[0] != "m05" {
		t.Fatalf("b after set to a's position: %v", got)
	}
	if out, errOut, code := kit.Smssctl(t, srv.Addr, "cursor", "reset", "t", "b"); code != 0 {
		t.Fatalf("cursor reset: %s%s", out, errOut)
	}
	if got := sub("b", 1); got[0] != "m00" {
		t.Fatalf("b after reset: %v", got)
	}
	// The system topic: protected, not listed.
	if _, errOut, code := kit.Smssctl(t, srv.Addr, "pub", "__cursors", "x"); code != 1 || !strings.Contains(errOut, "reserved") {
		t.Fatalf("pub to __cursors: %d %s", code, errOut)
	}
	if _, errOut, code := kit.Smssctl(t, srv.Addr, "topic", "delete", "__cursors"); code != 1 || !strings.Contains(errOut, "reserved") {
		t.Fatalf("delete __cursors: %d %s", code, errOut)
	}
	if out, _, _ := kit.Smssctl(t, srv.Addr, "topic", "list"); strings.Contains(out, "__cursors") {
		t.Fatalf("topic list shows the system topic:\n%s", out)
	}
	// Deleting the topic removes its positions (and their metrics);
	// a re-created topic starts over, also after a restart.
	if _, errOut, code := kit.Smssctl(t, srv.Addr, "topic", "delete", "t"); code != 0 {
		t.Fatal(errOut)
	}
	if l := cursorsOn(t, srv.Addr, "t"); len(l) != 0 {
		t.Fatalf("positions of a deleted topic: %v", l)
	}
	if v := metric("cursor_lag_messages", "a"); v != -1 {
		t.Fatalf("lag metric of a deleted topic: %v", v)
	}
	pub.Create("t")
	pub.Pub("t", kit.Record(nil, "fresh"))
	srv.Term()
	srv = kit.StartArgs(t, dir)
	if l := cursorsOn(t, srv.Addr, "t"); len(l) != 0 {
		t.Fatalf("positions of the deleted incarnation came back after a restart: %v", l)
	}
	out, errOut, code := kit.Smssctl(t, srv.Addr, "sub", "t", "--who", "a", "--resume", "--count", "1")
	if code != 0 || strings.Join(bodiesOf(out), ",") != "fresh" {
		t.Fatalf("a on the re-created topic: %d %s %s", code, out, errOut)
	}
}

type cursorRow struct {
	Who     string `json:"who"`
	EventID int64  `json:"eventId"`
	Stored  int64  `json:"stored"`
	Lag     int64  `json:"lag"`
}

func cursorsOn(t *testing.T, addr, topic string) []cursorRow {
	t.Helper()
	out, errOut, code := kit.Smssctl(t, addr, "--json", "cursor", "list", topic)
	if code != 0 {
		t.Fatalf("cursor list: %d %s", code, errOut)
	}
	var rows []cursorRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("cursor list output %q: %v", out, err)
	}
	return rows
}

func storedOn(t *testing.T, addr, topic, who string) int64 {
	for _, r := range cursorsOn(t, addr, topic) {
		if r.Who == who {
			return r.Stored
		}
	}
	return -1
}

func bodiesOf(out string) []string {
	var bs []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		bs = append(bs, f[len(f)-1])
	}
	return bs
}

func lastEventID(t *testing.T, out string) int64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	id, err := strconv.ParseInt(strings.SplitN(lines[len(lines)-1], "\t", 2)[0], 10, 64)
	if err != nil {
		t.Fatalf("no eventId in %q", out)
	}
	return id
}

// dialNoT is kit.Dial for goroutines that must not call t.Fatal.
func dialNoT(addr string) (*kit.Client, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &kit.Client{C: c, R: bufio.NewReader(c)}, nil
}
