package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// e2eParallel is how many of the suite's parallel tests run at once when
// -parallel is not given. Those tests spend most of their time waiting on
// the faults they inject (a restart, an expiry, a failover), so more of them
// than the machine has cores share it well; -parallel N still overrides.
const e2eParallel = 3

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit && runtime.GOMAXPROCS(0) < e2eParallel {
		if err := flag.Set("test.parallel", strconv.Itoa(e2eParallel)); err != nil {
			panic(err) // the testing package always defines the flag
		}
	}
	code := m.Run()
	smsstest.RemoveBinaries()
	os.Exit(code)
}

// proc is an smss process of a test, started by the test kit. Its fields
// are the kit's, under the names the suite's tests use.
type proc struct {
	*smsstest.Proc
	t      *testing.T // nil for a benchmark's server
	cmd    *exec.Cmd
	out    *smsstest.SyncBuffer
	addr   string
	dir    string
	exited <-chan struct{}
}

// writeConfig writes a config file for a server whose data lives in dir.
func writeConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	return smsstest.WriteConfig(t, dir, 0, extra)
}

// start runs the server on dir's config and waits until it listens.
func start(t *testing.T, dir string) *proc {
	t.Helper()
	return startCmd(t, dir, smsstest.SmssCommand(t, dir))
}

// startCmd runs cmd, an smss on dir's config (perhaps wrapped, or with its
// own environment), and waits until it listens.
func startCmd(t testing.TB, dir string, cmd *exec.Cmd) *proc {
	t.Helper()
	sp := smsstest.StartProc(t, cmd, smsstest.ListenRe)
	p := &proc{Proc: sp, cmd: sp.Cmd, out: sp.Out, addr: sp.Addr, dir: dir, exited: sp.Exited()}
	if tt, ok := t.(*testing.T); ok {
		p.t = tt
	}
	return p
}

// stacks ends a stuck server with SIGQUIT and returns its output.
func (p *proc) stacks() string { return p.Stacks() }

// kill ends the server with SIGKILL.
func (p *proc) kill() { p.Kill() }

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	p.Term()
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
