package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

var smssBin string

func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "smss-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	smssBin = filepath.Join(tmp, "smss")
	build := exec.Command("go", "build", "-o", smssBin, "../cmd/smss")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build smss:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	removeBuiltBinaries()
	os.Exit(code)
}

// syncBuffer collects a process's output for the test to search.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	out    *syncBuffer
	addr   string
	dir    string
	exited chan struct{}
	err    error
}

var listenRe = regexp.MustCompile(`smss listening.*addr=(\S+)`)

// writeConfig writes a config file for a server whose data lives in dir.
func writeConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf("host: 127.0.0.1\nport: 0\nlog:\n  path: stdout\n  sample: 0\nstore:\n  path: %s\n%s", filepath.Join(dir, "data"), extra)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// start runs the server on dir's config and waits until it listens.
func start(t *testing.T, dir string) *proc {
	t.Helper()
	p := &proc{t: t, out: &syncBuffer{}, dir: dir, exited: make(chan struct{})}
	p.cmd = exec.Command(smssBin, "-config", filepath.Join(dir, "config.yaml"))
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.kill() })
	deadline := time.After(30 * time.Second)
	for {
		if m := listenRe.FindStringSubmatch(p.out.String()); m != nil {
			p.addr = m[1]
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("server exited during start-up: %v\n%s", p.err, p.out.String())
		case <-deadline:
			t.Fatalf("server did not listen within 30 s:\n%s", p.stacks())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// stacks ends a stuck server with SIGQUIT, whose goroutine dump shows
// where it hangs, and returns its output.
func (p *proc) stacks() string {
	p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
	}
	return p.out.String()
}

func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("server did not stop within 30 s after SIGTERM:\n%s", p.out.String())
	}
	if p.err != nil {
		p.t.Fatalf("server exit after SIGTERM: %v\n%s", p.err, p.out.String())
	}
}

// client is a raw protocol connection.
type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

func (c *client) roundTrip(req []byte, kind protocol.ReplyKind) ([]byte, error) {
	c.c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.c.Write(req); err != nil {
		return nil, err
	}
	return protocol.ReadReply(c.r, kind, 64<<20)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func record(headers [][2]string, body string) []byte {
	r := protocol.Record{Body: []byte(body)}
	for _, h := range headers {
		r.Headers = append(r.Headers, protocol.KV{Key: h[0], Value: h[1]})
	}
	return must(protocol.AppendRecord(nil, r))
}

func (c *client) pub(topic string, records ...[]byte) error {
	_, err := c.roundTrip(must(protocol.AppendPub(nil, []byte(topic), []byte("trace"), bytes.Join(records, nil))), protocol.ReplyPlain)
	return err
}

func (c *client) create(topic string, expireAt int64) error {
	_, err := c.roundTrip(must(protocol.AppendCreate(nil, []byte(topic), nil, expireAt)), protocol.ReplyPlain)
	return err
}

func (c *client) del(topic string) error {
	_, err := c.roundTrip(must(protocol.AppendDelete(nil, []byte(topic), nil)), protocol.ReplyPlain)
	return err
}

// stored is what a data directory holds, read straight from the files.
type stored struct {
	binlog []binlog.Block
	topics map[string][]topicblock.Block
}

func binlogDecode(buf []byte) (int64, int64, int, error) {
	b, n, err := binlog.DecodeBlock(buf)
	return b.EventID, b.EventID, n, err
}

func topicDecode(buf []byte) (int64, int64, int, error) {
	b, n, err := topicblock.DecodeBlock(buf)
	return b.EventID, b.EventID, n, err
}

func scanLog(t *testing.T, dir string, decode segment.Decoder, fn func(raw []byte) error) {
	t.Helper()
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return
	}
	l, err := segment.Open(segment.Options{Dir: dir, Decode: decode})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Scan(segment.Position{}, func(_ segment.Position, _, _ int64, raw []byte) error {
		return fn(append([]byte(nil), raw...))
	}); err != nil {
		t.Fatalf("scan %s: %v", dir, err)
	}
}

func readStore(t *testing.T, dataDir string, topics []string) stored {
	t.Helper()
	s := stored{topics: map[string][]topicblock.Block{}}
	scanLog(t, filepath.Join(dataDir, "binlog"), binlogDecode, func(raw []byte) error {
		b, _, err := binlog.DecodeBlock(raw)
		s.binlog = append(s.binlog, b)
		return err
	})
	for _, name := range topics {
		scanLog(t, topicblock.Dir(filepath.Join(dataDir, "topic"), []byte(name), 10), topicDecode, func(raw []byte) error {
			b, _, err := topicblock.DecodeBlock(raw)
			s.topics[name] = append(s.topics[name], b)
			return err
		})
	}
	return s
}

// parseRecord returns the body of a stored message record.
func parseRecord(rec []byte) ([]byte, int, error) {
	r, n, err := protocol.ParseRecord(rec)
	return r.Body, n, err
}
