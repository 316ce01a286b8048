package kit

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// parallel is how many of a package's parallel tests run at once when
// -parallel is not given. Those tests spend most of their time waiting on
// the faults they inject (a restart, an expiry, a failover), so more of them
// than the machine has cores share it well; -parallel N still overrides.
const parallel = 3

// Main is the TestMain of every end-to-end package: it sets -parallel to
// parallel unless the command line gave it, runs the tests and removes the
// binaries the test kit built for them (one build per package's test
// binary, shared by its tests).
func Main(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit && runtime.GOMAXPROCS(0) < parallel {
		if err := flag.Set("test.parallel", strconv.Itoa(parallel)); err != nil {
			panic(err) // the testing package always defines the flag
		}
	}
	code := m.Run()
	smsstest.RemoveBinaries()
	os.Exit(code)
}

// Proc is an smss process of a test, started by the test kit
// (smsstest.Proc: Cmd, Out, Addr, Exited, Kill, Term, Stacks, ...), with the
// data directory its config names, which the tests reopen and inspect.
type Proc struct {
	*smsstest.Proc
	Dir string
}

// WriteConfig writes a config file for a server whose data lives in dir.
func WriteConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	return smsstest.WriteConfig(t, dir, 0, extra)
}

// Start runs the server on dir's config and waits until it listens.
func Start(t *testing.T, dir string) *Proc {
	t.Helper()
	return StartCmd(t, dir, smsstest.SmssCommand(t, dir))
}

// StartCmd runs cmd, an smss on dir's config (perhaps wrapped, or with its
// own environment), and waits until it listens.
func StartCmd(t testing.TB, dir string, cmd *exec.Cmd) *Proc {
	t.Helper()
	sp := smsstest.StartProc(t, cmd, smsstest.ListenRe)
	return &Proc{Proc: sp, Dir: dir}
}

// Client is a raw protocol connection.
type Client struct {
	C net.Conn
	R *bufio.Reader
}

// Dial opens a raw protocol connection to addr, closed when the test ends.
func Dial(t testing.TB, addr string) *Client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &Client{C: c, R: bufio.NewReader(c)}
}

// RoundTrip writes req and reads one reply of kind, with a 20 s deadline
// so that a server that stops answering fails the test instead of hanging it.
func (c *Client) RoundTrip(req []byte, kind protocol.ReplyKind) ([]byte, error) {
	c.C.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.C.Write(req); err != nil {
		return nil, err
	}
	return protocol.ReadReply(c.R, kind, 64<<20)
}

// Must returns v, panicking on err: for encoders that fail only on a
// test's own mistake.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Record encodes a message record with headers and body.
func Record(headers [][2]string, body string) []byte {
	r := protocol.Record{Body: []byte(body)}
	for _, h := range headers {
		r.Headers = append(r.Headers, protocol.KV{Key: h[0], Value: h[1]})
	}
	return Must(protocol.AppendRecord(nil, r))
}

// Pub publishes records to topic and waits for the reply.
func (c *Client) Pub(topic string, records ...[]byte) error {
	_, err := c.RoundTrip(Must(protocol.AppendPub(nil, []byte(topic), []byte("trace"), bytes.Join(records, nil))), protocol.ReplyPlain)
	return err
}

// Create creates topic, expiring at expireAt (unix ms; 0: never).
func (c *Client) Create(topic string, expireAt int64) error {
	_, err := c.RoundTrip(Must(protocol.AppendCreate(nil, []byte(topic), nil, expireAt)), protocol.ReplyPlain)
	return err
}

// Del deletes topic.
func (c *Client) Del(topic string) error {
	_, err := c.RoundTrip(Must(protocol.AppendDelete(nil, []byte(topic), nil)), protocol.ReplyPlain)
	return err
}

// Stored is what a data directory holds, read straight from the files.
type Stored struct {
	Binlog []binlog.Block
	Topics map[string][]topicblock.Block
}

// BinlogDecode is the segment.Decoder of binlog files.
func BinlogDecode(buf []byte) (int64, int64, int, error) {
	b, n, err := binlog.DecodeBlock(buf)
	return b.EventID, b.EventID, n, err
}

// TopicDecode is the segment.Decoder of topic files.
func TopicDecode(buf []byte) (int64, int64, int, error) {
	b, n, err := topicblock.DecodeBlock(buf)
	return b.EventID, b.EventID, n, err
}

// ScanLog calls fn with every block of the segment log in dir, read
// straight from the files (a missing dir has none).
func ScanLog(t *testing.T, dir string, decode segment.Decoder, fn func(raw []byte) error) {
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

// ReadStore reads the binlog and the named topics of the data directory
// dataDir from its files, as the tests check what a server kept.
func ReadStore(t *testing.T, dataDir string, topics []string) Stored {
	t.Helper()
	s := Stored{Topics: map[string][]topicblock.Block{}}
	ScanLog(t, filepath.Join(dataDir, "binlog"), BinlogDecode, func(raw []byte) error {
		b, _, err := binlog.DecodeBlock(raw)
		s.Binlog = append(s.Binlog, b)
		return err
	})
	for _, name := range topics {
		ScanLog(t, topicblock.Dir(filepath.Join(dataDir, "topic"), []byte(name), 10), TopicDecode, func(raw []byte) error {
			b, _, err := topicblock.DecodeBlock(raw)
			s.Topics[name] = append(s.Topics[name], b)
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

// Delay sends a delay request for records to topic, due delayMs later.
func (c *Client) Delay(topic string, delayMs int64, records []byte) error {
	_, err := c.RoundTrip(Must(protocol.AppendDelay(nil, []byte(topic), []byte("dt"), delayMs, records)), protocol.ReplyPlain)
	return err
}

// RawDelay sends a delay request whose header announces size record bytes
// (the body still carries the 8-byte delay and body bytes).
func (c *Client) RawDelay(topic string, size uint32, delayMs int64, body []byte) error {
	b := binary.LittleEndian.AppendUint64(nil, uint64(delayMs))
	b = append(b, body...)
	_, err := c.RoundTrip(Must(protocol.AppendRequest(nil, protocol.CmdDelay, protocol.PayloadArea(size), []byte(topic), nil, b)), protocol.ReplyPlain)
	return err
}

// StartArgs is start with extra command-line flags, for tests and
// benchmarks.
func StartArgs(t testing.TB, dir string, args ...string) *Proc {
	t.Helper()
	return StartCmd(t, dir, smsstest.SmssCommand(t, dir, args...))
}

// BizText is the message of a business error (the server's 400 text),
// so that a test can compare refusals; other errors are marked non-biz.
func BizText(err error) string {
	var be *protocol.BizError
	if errors.As(err, &be) {
		return be.Msg
	}
	if err == nil {
		return "<nil>"
	}
	return "non-biz: " + err.Error()
}

// RunToExit runs smss with args and waits for it to exit by itself.
func RunToExit(t *testing.T, dir string, timeout time.Duration, args ...string) (int, string) {
	t.Helper()
	out := &smsstest.SyncBuffer{}
	cmd := smsstest.SmssCommand(t, dir, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String()
	case <-time.After(timeout):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("smss %v did not exit within %v:\n%s", args, timeout, Tail(out.String(), 4000))
		return 0, ""
	}
}

// ProcState is the state letter of a process (Linux /proc), 0 if unknown.
func ProcState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ...: comm may hold spaces, so look after the ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// ProcCPU returns the user+system CPU time p has used so far, 0 where
// /proc is not available.
func ProcCPU(p *Proc) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name: state is field 3,
	// utime and stime are fields 14 and 15, in clock ticks (USER_HZ 100
	// on Linux).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * (time.Second / 100)
}
