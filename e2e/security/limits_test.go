package security

// Issue 23 ("running out of things"): operator typos and signals against a
// real smss process.

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
)

// TestUnknownRoleRefused: a typo in -role must not start a writable master
// (split brain); the process exits 2 with one line naming the valid roles.
func TestUnknownRoleRefused(t *testing.T) {
	for _, role := range []string{"slav", "primary", "Slave", ""} {
		t.Run(role, func(t *testing.T) {
			dir := t.TempDir()
			kit.WriteConfig(t, dir, "")
			code, out := kit.RunToExit(t, dir, 30*time.Second, "-role", role)
			if code != 2 {
				t.Fatalf("exit %d, want 2; output:\n%s", code, out)
			}
			want := `smss: -role must be master, slave or auto (got "` + role + `")`
			if strings.TrimSpace(out) != want {
				t.Errorf("output %q, want the single line %q", out, want)
			}
		})
	}
}

// TestSIGHUPWithoutReloadables: a logrotate-style kill -HUP on a server
// with no auth, TLS or replication files must be logged and ignored, not
// end the process.
func TestSIGHUPWithoutReloadables(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "")
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	if err := c.Create("hup", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Pub("hup", kit.Record(nil, "before")); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // twice: the handler must stay installed
		if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if !smsstest.Poll(15*time.Second, func() bool {
			select {
			case <-p.Exited():
				return true
			default:
				return strings.Count(p.Out.String(), "SIGHUP: nothing to reload") > i
			}
		}) || strings.Count(p.Out.String(), "SIGHUP: nothing to reload") <= i {
			select {
			case <-p.Exited():
				t.Fatalf("server ended on SIGHUP: %v\n%s", p.Err(), p.Out.String())
			default:
				t.Fatalf("SIGHUP %d not logged:\n%s", i+1, p.Out.String())
			}
		}
	}
	if err := c.Pub("hup", kit.Record(nil, "after")); err != nil {
		t.Fatalf("publish after SIGHUP: %v\n%s", err, p.Out.String())
	}
	p.Term()
}

// TestNonIntegerConfigRefused: numbers that are not integers used to be
// truncated (port: 22051.5 listened on 22051); a key beyond what a request
// may ask (delay.maxDelay over 100 years) used to be accepted.
func TestNonIntegerConfigRefused(t *testing.T) {
	for _, tc := range []struct{ name, config, want string }{
		{"float port", "", `key "port" must be an integer (got "22051.5")`},
		{"exponent", "  maxLogSize: 1.5e9\n", `key "store.maxLogSize" must be an integer (got "1.5e9")`},
		{"maxDelay", "delay:\n  maxDelay: 3153600000001\n", "delay.maxDelay must be between 1000 and 3153600000000 (got 3153600000001)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			kit.WriteConfig(t, dir, tc.config)
			if tc.name == "float port" {
				// kit.WriteConfig writes port: 0 and a duplicate key is
				// refused, so replace the line.
				path := filepath.Join(dir, "config.yaml")
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(strings.Replace(string(b), "port: 0", "port: 22051.5", 1)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			code, out := kit.RunToExit(t, dir, 30*time.Second)
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want 2 with %q; output:\n%s", code, tc.want, out)
			}
		})
	}
}

// TestFolderCountRecorded: changing store.folderCount used to hide every
// existing topic's messages (looked for in other directories). The value is
// recorded at the first start and a different one refused, naming both; a
// directory without the record (the original's) is checked against where
// its topics are.
func TestFolderCountRecorded(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	const n = 100
	kit.WriteConfig(t, dir, "  folderCount: 10\n")
	p := kit.Start(t, dir)
	if !strings.Contains(p.Out.String(), "recorded store.folderCount in meta") {
		t.Errorf("first start did not record folderCount:\n%s", p.Out.String())
	}
	c := kit.Dial(t, p.Addr)
	if err := c.Create("fc", 0); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := c.Pub("fc", kit.Record(nil, fmt.Sprintf("m%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	p.Term()

	kit.WriteConfig(t, dir, "  folderCount: 20\n")
	code, out := kit.RunToExit(t, dir, 30*time.Second)
	if want := "store.folderCount is 20 but this data directory was laid out with 10"; code != 1 || !strings.Contains(out, want) {
		t.Fatalf("restart with folderCount 20: exit %d, want 1 with %q; output:\n%s", code, want, out)
	}

	// The original server never writes the record: drop it, as an
	// original directory laid out with 10 would be.
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(data, "meta")).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.DropPrefix([]byte("smss@folderCount")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, out = kit.RunToExit(t, dir, 30*time.Second)
	if want := "the directory was probably laid out with store.folderCount 10"; code != 1 ||
		!strings.Contains(out, want) || !strings.Contains(out, `topic \"fc\" is in topic/`) {
		t.Fatalf("original directory with folderCount 20: exit %d, want 1 with %q; output:\n%s", code, want, out)
	}

	kit.WriteConfig(t, dir, "  folderCount: 10\n")
	p = kit.Start(t, dir)
	if !strings.Contains(p.Out.String(), "recorded store.folderCount in meta") {
		t.Errorf("original directory: folderCount not recorded:\n%s", p.Out.String())
	}
	if got := kit.ReadAll(t, p.Addr, "fc", n); len(got) != n {
		t.Fatalf("delivered %d of %d messages", len(got), n)
	}
	p.Term()
}

// waitStopped waits until the process is in the stopped state (SIGSTOP).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/stat", pid)
	if !smsstest.Poll(10*time.Second, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		// pid (comm) S ...: the state follows the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		return i >= 0 && i+2 < len(s) && (s[i+2] == 'T' || s[i+2] == 't')
	}) {
		t.Fatalf("process %d did not stop", pid)
	}
}

// TestShutdownDrains: requests the server has received when SIGTERM comes
// (waiting in the socket or pipelined behind another) get their reply, a
// success or a clear refusal, before the connection closes; every success
// is stored. The server is stopped (SIGSTOP) while the clients send, so
// that SIGTERM finds the connections idle with requests pending.
func TestShutdownDrains(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "")
	p := kit.Start(t, dir)
	const conns, perConn = 40, 3
	cs := make([]*kit.Client, conns)
	for i := range cs {
		cs[i] = kit.Dial(t, p.Addr)
		if i == 0 {
			if err := cs[i].Create("drain", 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := cs[i].Pub("drain", kit.Record(nil, fmt.Sprintf("warm-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	pid := p.Cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	waitStopped(t, pid)
	for i, c := range cs {
		var reqs []byte
		for j := range perConn {
			reqs = append(reqs, kit.Must(protocol.AppendPub(nil, []byte("drain"), []byte("trace"),
				kit.Record(nil, fmt.Sprintf("m-%d-%d", i, j))))...)
		}
		c.C.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.C.Write(reqs); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var acked []string
	var lost []string
	for i, c := range cs {
		for j := range perConn {
			_, err := protocol.ReadReply(c.R, protocol.ReplyPlain, 1<<20)
			var be *protocol.BizError
			switch {
			case err == nil:
				acked = append(acked, fmt.Sprintf("m-%d-%d", i, j))
			case errors.As(err, &be):
				t.Logf("connection %d request %d refused: %s", i, j, be.Msg)
			default:
				lost = append(lost, fmt.Sprintf("connection %d request %d: %v", i, j, err))
			}
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d requests got no reply:\n%s", len(lost), conns*perConn, strings.Join(lost[:min(len(lost), 9)], "\n"))
		defer func() { t.Logf("server output:\n%s", kit.Tail(p.Out.String(), 6000)) }()
	}
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not exit after SIGTERM:\n%s", p.Out.String())
	}
	if p.Err() != nil {
		t.Fatalf("exit: %v\n%s", p.Err(), p.Out.String())
	}
	t.Logf("%d of %d requests acknowledged during the drain", len(acked), conns*perConn)

	p = kit.Start(t, dir)
	got := map[string]bool{}
	for _, b := range kit.ReadAll(t, p.Addr, "drain", conns+len(acked)) {
		got[b] = true
	}
	for _, a := range acked {
		if !got[a] {
			t.Errorf("acknowledged %s is not stored", a)
		}
	}
	p.Term()
}

// TestSubscriptionFrameBytes: frames are bounded by limit.maxFrameBytes,
// not only by the batch count (64 messages of 8 MiB made one 512 MiB
// frame); a message larger than the bound still goes alone.
func TestSubscriptionFrameBytes(t *testing.T) {
	dir := t.TempDir()
	const limit = 1 << 20
	kit.WriteConfig(t, dir, fmt.Sprintf("limit:\n  maxFrameBytes: %d\n", limit))
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	if err := c.Create("big", 0); err != nil {
		t.Fatal(err)
	}
	sizes := make([]int, 0, 41)
	for i := range 40 {
		sizes = append(sizes, 200<<10)
		if i == 20 {
			sizes = append(sizes, 3<<20) // larger than a frame: alone
		}
	}
	for i, n := range sizes {
		body := fmt.Sprintf("%04d", i) + strings.Repeat("x", n-4)
		if err := c.Pub("big", kit.Record(nil, body)); err != nil {
			t.Fatal(err)
		}
	}
	s := kit.Dial(t, p.Addr)
	if err := s.Sub("big", "w", 0, 255, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got, frames := 0, 0
	for got < len(sizes) {
		u, err := s.NextData(20 * time.Second)
		if err != nil {
			t.Fatalf("after %d messages: %v", got, err)
		}
		if u.Code != protocol.StatusOK {
			t.Fatalf("after %d messages: %v", got, u)
		}
		bytes := 0
		for j, m := range u.Msgs {
			bytes += protocol.SubMessageFixedSize + len(m.Raw)
			if want := fmt.Sprintf("%04d", got+j); !strings.HasPrefix(string(m.Body), want) || len(m.Body) != sizes[got+j] {
				t.Fatalf("message %d: %.8q of %d bytes", got+j, m.Body, len(m.Body))
			}
		}
		if len(u.Msgs) > 1 && bytes > limit {
			t.Errorf("frame %d: %d messages in about %d bytes > limit.maxFrameBytes %d", frames, len(u.Msgs), bytes, limit)
		}
		got += len(u.Msgs)
		frames++
		if err := s.Ack(0); err != nil {
			t.Fatal(err)
		}
	}
	// 40 × 200 KiB at 5 per frame, the 3 MiB one alone.
	if frames < 9 {
		t.Errorf("%d messages in %d frames", got, frames)
	}
	p.Term()
}

// TestManyTopicsFewDescriptors: every topic written used to keep two files
// open until shutdown, so with ulimit -n 128 publishing failed after about
// 55 topics ("too many open files"). The open topic files are now an LRU
// sized from the file limit: 400 topics are written, then read back.
func TestManyTopicsFewDescriptors(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "")
	p := startLimited(t, dir, 128)
	c := kit.Dial(t, p.Addr)
	const topics = 400
	for i := range topics {
		name := fmt.Sprintf("many-%03d", i)
		if err := c.Create(name, 0); err != nil {
			t.Fatalf("create topic %d: %v", i, err)
		}
		if err := c.Pub(name, kit.Record(nil, name)); err != nil {
			t.Fatalf("publish to topic %d: %v", i, err)
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d descriptors open after writing %d topics", len(fds), topics)
	for _, i := range []int{0, 199, 399} {
		name := fmt.Sprintf("many-%03d", i)
		if got := kit.ReadAll(t, p.Addr, name, 1); len(got) != 1 || got[0] != name {
			t.Fatalf("topic %s: %q", name, got)
		}
		if err := c.Pub(name, kit.Record(nil, "again")); err != nil {
			t.Fatalf("publish again to %s: %v", name, err)
		}
	}
	p.Term()

	// Recovery replays every topic (the checkpoint put back to the start,
	// as after a crash long after it): it used to hold a reader per topic
	// and failed with "too many open files"; it keeps to
	// store.maxOpenTopics too.
	ms, err := meta.Open(meta.Options{Dir: filepath.Join(dir, "data", "meta"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mb := ms.NewBatch()
	mb.SetCheckpoint(meta.Checkpoint{NextEventID: 1})
	if err := ms.Commit(mb); err != nil {
		t.Fatal(err)
	}
	if err := ms.Close(); err != nil {
		t.Fatal(err)
	}
	p = startLimited(t, dir, 128)
	if !strings.Contains(p.Out.String(), "binlog replayed") {
		t.Fatalf("no replay at the restart:\n%s", p.Out.String())
	}
	for _, i := range []int{0, 199, 399} {
		name := fmt.Sprintf("many-%03d", i)
		if got := kit.ReadAll(t, p.Addr, name, 2); len(got) != 2 || got[0] != name || got[1] != "again" {
			t.Fatalf("topic %s after the replay: %q", name, got)
		}
	}
	p.Term()
}

// startLimited starts the server on dir's config under ulimit -n nofile
// and waits until it listens.
func startLimited(t *testing.T, dir string, nofile int) *kit.Proc {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `ulimit -n "$2" && exec "$0" -config "$1"`, smsstest.SmssBinary(t), filepath.Join(dir, "config.yaml"), fmt.Sprint(nofile))
	cmd.Dir = dir
	return kit.StartCmd(t, dir, cmd)
}

// TestDescriptorLimitAnswers: a server at its descriptor limit must go on
// answering the connections it has, refuse only what needs a new file (with
// the error naming why), not leave new clients hanging in the listen
// backlog, and recover when descriptors are freed. Idle connections under
// ulimit -n 64 take every descriptor.
func TestDescriptorLimitAnswers(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "")
	p := startLimited(t, dir, 64)
	c := kit.Dial(t, p.Addr)
	for i := range 3 {
		name := fmt.Sprintf("fd-%d", i)
		if err := c.Create(name, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Pub(name, kit.Record(nil, "before")); err != nil {
			t.Fatal(err)
		}
	}
	alive := kit.Must(protocol.AppendAlive(nil, []byte("trace")))
	info := kit.Must(protocol.AppendTopicInfo(nil, []byte("fd-0"), []byte("trace")))

	// Open idle connections until the server has accepted all it can: more
	// than the limit, so the rest wait in the listen backlog.
	var idle []net.Conn
	defer func() {
		for _, ic := range idle {
			ic.Close()
		}
	}()
	for range 80 {
		ic, err := net.DialTimeout("tcp", p.Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, ic)
	}
	fdCount := func() int {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(fds)
	}
	if !smsstest.Poll(20*time.Second, func() bool { return strings.Contains(p.Out.String(), "too many open files") }) {
		t.Fatalf("server never reached its descriptor limit (%d open):\n%s", fdCount(), p.Out.String())
	}
	t.Logf("%d descriptors open at the limit", fdCount())

	// The connection it has is answered: alive, info, a write to a topic
	// whose files are open; a write that needs a new file is refused with
	// the reason, and the connection stays usable.
	if _, err := c.RoundTrip(alive, protocol.ReplyPlain); err != nil {
		t.Fatalf("alive at the limit: %v", err)
	}
	if _, err := c.RoundTrip(info, protocol.ReplyJSON); err != nil {
		t.Fatalf("info at the limit: %v", err)
	}
	if err := c.Pub("fd-1", kit.Record(nil, "at limit")); err != nil {
		t.Fatalf("publish to an open topic at the limit: %v", err)
	}
	err := c.Create("fd-new", 0)
	if err != nil && !strings.Contains(err.Error(), "too many open files") {
		t.Fatalf("create at the limit: %v, want success or \"too many open files\"", err)
	}
	t.Logf("create at the limit: %v", err)
	err = c.Pub("fd-new", kit.Record(nil, "new"))
	if err != nil && (!strings.Contains(err.Error(), "too many open files: the server is at its descriptor limit") || strings.Contains(err.Error(), dir)) {
		t.Fatalf("publish needing a new file at the limit: %v, want success or a refusal naming the descriptor limit (and no server path)", err)
	}
	t.Logf("publish needing a new file at the limit: %v", err)
	if _, err := c.RoundTrip(alive, protocol.ReplyPlain); err != nil {
		t.Fatalf("alive after a refused write: %v", err)
	}

	// A new client is answered or closed at once, never left hanging in
	// the backlog.
	nc, err := net.DialTimeout("tcp", p.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(alive); err == nil {
		_, err = protocol.ReadReply(bufio.NewReader(nc), protocol.ReplyPlain, 1<<20)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("a new connection at the descriptor limit hangs: %v", err)
		}
		t.Logf("new connection at the limit: %v", err)
	}
	nc.Close()

	// Descriptors freed: everything works again, new connections included.
	for _, ic := range idle {
		ic.Close()
	}
	idle = nil
	var c2 *kit.Client
	if !smsstest.Poll(20*time.Second, func() bool {
		nc, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err != nil {
			return false
		}
		cc := &kit.Client{C: nc, R: bufio.NewReader(nc)}
		if _, err := cc.RoundTrip(alive, protocol.ReplyPlain); err != nil {
			nc.Close()
			return false
		}
		c2 = cc
		return true
	}) {
		t.Fatalf("no new connection answered after the idle ones closed:\n%s", p.Out.String())
	}
	defer c2.C.Close()
	if err := c2.Pub("fd-new", kit.Record(nil, "after")); err != nil {
		t.Fatalf("publish to a new topic after recovery: %v", err)
	}
	if err := c.Pub("fd-2", kit.Record(nil, "after")); err != nil {
		t.Fatalf("publish on the old connection after recovery: %v", err)
	}
	p.Term()
}
