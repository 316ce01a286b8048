package security

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// hostileReadTimeout is timeout.net.read of the hostile-client servers:
// short, so that stalled requests are closed quickly.
const hostileReadTimeout = 500 * time.Millisecond

func hostileServer(t *testing.T) *kit.Proc {
	t.Helper()
	dir := t.TempDir()
	// Every test client comes from 127.0.0.1: the per-address cap
	// (limit.maxConnsPerIP, its own tests in security_hardening_test.go) is
	// raised so that these tests measure the server's capacity as a whole.
	kit.WriteConfig(t, dir, fmt.Sprintf("timeout:\n  net:\n    read: %d\n  server:\n    alive: 300\nlimit:\n  maxConnsPerIP: 5000\n",
		hostileReadTimeout.Milliseconds()))
	return kit.Start(t, dir)
}

// rssKB reads a process's resident set size from /proc.
func rssKB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// bystander publishes and subscribes on its own topic for as long as a
// test throws hostile input at the server; every one of its requests must
// succeed.
type bystander struct {
	stop     chan struct{}
	done     chan struct{}
	pubs     atomic.Int64
	received atomic.Int64
	mu       sync.Mutex
	err      error
}

func startBystander(t *testing.T, addr string) *bystander {
	t.Helper()
	b := &bystander{stop: make(chan struct{}), done: make(chan struct{})}
	pc, sc := kit.Dial(t, addr), kit.Dial(t, addr)
	if err := pc.Create("keep", 0); err != nil {
		t.Fatal(err)
	}
	if err := sc.Sub("keep", "bystander", 0, 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-b.stop:
				return
			default:
			}
			if err := pc.Pub("keep", kit.Record(nil, fmt.Sprintf("keep-%d", i))); err != nil {
				b.fail(fmt.Errorf("bystander pub %d: %w", i, err))
				return
			}
			b.pubs.Add(1)
		}
	}()
	go func() {
		defer wg.Done()
		for {
			u, err := sc.Next(5 * time.Second)
			select {
			case <-b.stop:
				return
			default:
			}
			if err != nil {
				b.fail(fmt.Errorf("bystander subscriber: %w", err))
				return
			}
			if u.Code == protocol.StatusOK {
				b.received.Add(int64(len(u.Msgs)))
				if err := sc.Ack(0); err != nil {
					b.fail(err)
					return
				}
			}
		}
	}()
	go func() {
		wg.Wait()
		close(b.done)
	}()
	t.Cleanup(b.halt)
	return b
}

func (b *bystander) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
}

func (b *bystander) halt() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
}

// check fails the test if the bystander failed, or made no progress since
// the counts given.
func (b *bystander) check(t *testing.T, pubs, received int64) {
	t.Helper()
	if !smsstest.Poll(5*time.Second, func() bool { return b.pubs.Load() > pubs && b.received.Load() > received }) {
		t.Fatalf("bystander stalled: %d publishes, %d messages received", b.pubs.Load(), b.received.Load())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		t.Fatal(b.err)
	}
}

// hostileCase is one malformed request and what the server must do: send
// a 400 whose text starts with reply (none if reply is ""), and then close
// the connection or keep serving it.
type hostileCase struct {
	name    string
	send    []byte
	valid   bool // send starts with a valid alive request, answered first
	halfEnd bool // half-close after sending (the client hangs up)
	reply   string
	closes  bool
}

func req(cmd protocol.Command, area [16]byte, topic string, body []byte) []byte {
	return kit.Must(protocol.AppendRequest(nil, cmd, area, []byte(topic), nil, body))
}

func hostileCases() []hostileCase {
	rec := kit.Record(nil, "a body of some length")
	pubHdr := func(size uint32, topic string) []byte {
		return req(protocol.CmdPub, protocol.PayloadArea(size), topic, nil)
	}
	subBody := func(eventID int64, whoLen uint32) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(eventID))
		b = binary.LittleEndian.AppendUint64(b, uint64(time.Second))
		return binary.LittleEndian.AppendUint32(b, whoLen)
	}
	many := bytes.Repeat(kit.Record(nil, "m"), protocol.DefaultMaxRecords+1)
	alive := kit.Must(protocol.AppendAlive(nil, nil))
	cases := []hostileCase{
		{name: "unknown command 90", send: req(90, [16]byte{}, "", nil), reply: "don't support action", closes: true},
		{name: "unknown command 255 with a body", send: req(255, [16]byte{}, "keep", []byte("body")), reply: "don't support action", closes: true},
		{name: "delay apply 101 from the network", send: req(protocol.CmdDelayApply, protocol.PayloadArea(uint32(len(rec))), "keep", rec), reply: "don't support action", closes: true},
		{name: "truncated header, then hang up", send: pubHdr(uint32(len(rec)), "keep")[:11], halfEnd: true, closes: true},
		{name: "truncated header, then silence", send: pubHdr(uint32(len(rec)), "keep")[:11], closes: true},
		{name: "payload shorter than announced, then hang up", send: append(pubHdr(1000, "keep"), make([]byte, 100)...), halfEnd: true, closes: true},
		{name: "payload shorter than announced, then silence", send: append(pubHdr(1000, "keep"), make([]byte, 100)...), closes: true},
		{name: "topic shorter than announced", send: pubHdr(uint32(len(rec)), "keep")[:20], closes: true},
		{name: "pub announcing 4 GiB", send: pubHdr(0xFFFFFFFF, "keep"), reply: "payload of 4294967295 bytes exceeds limit.maxPayload", closes: true},
		{name: "delay announcing 4 GiB", send: req(protocol.CmdDelay, protocol.PayloadArea(0xFFFFFFFF), "keep", nil), reply: "payload of 4294967295 bytes exceeds limit.maxPayload", closes: true},
		{name: "sub with a who of 4 GiB", send: req(protocol.CmdSub, protocol.SubArea(1, true), "keep", subBody(0, 0xFFFFFFFF)), reply: "who of 4294967295 bytes exceeds limit.maxWho", closes: true},
		{name: "pub of 8 bytes", send: req(protocol.CmdPub, protocol.PayloadArea(8), "keep", make([]byte, 8)), reply: "invalid request, payload size must be more than 8"},
		{name: "record with contentSize 0", send: req(protocol.CmdPub, protocol.PayloadArea(16), "keep", make([]byte, 16)), reply: "invalid pub payload"},
		{name: "record longer than the payload", send: req(protocol.CmdPub, protocol.PayloadArea(uint32(len(rec)-1)), "keep", rec[:len(rec)-1]), reply: "invalid pub payload"},
		{name: "3 bytes after the last record", send: req(protocol.CmdPub, protocol.PayloadArea(uint32(len(rec)+3)), "keep", append(append([]byte(nil), rec...), 1, 2, 3)), reply: "invalid pub payload"},
		{name: "more records than limit.maxRecords", send: req(protocol.CmdPub, protocol.PayloadArea(uint32(len(many))), "keep", many), reply: "more than 10000 records"},
		{name: "create with a 65535-byte name", send: req(protocol.CmdCreate, [16]byte{}, strings.Repeat("n", 65535), make([]byte, 8)), reply: "invalid topic name: longer than 128 bytes"},
		// -1 asks for the stored position (docs/protocol.md §12.5).
		{name: "sub with eventId -2", send: req(protocol.CmdSub, protocol.SubArea(1, true), "keep", subBody(-2, 0)), reply: "invalid eventId -2"},
		{name: "sub beyond the last eventId", send: req(protocol.CmdSub, protocol.SubArea(1, true), "keep", subBody(1<<62, 0)), reply: "eventId 4611686018427387904 is beyond the last eventId"},
		{name: "replica with eventId -1", send: req(protocol.CmdReplica, [16]byte{}, "", binary.LittleEndian.AppendUint64(nil, ^uint64(0))), reply: "invalid replica eventId"},
		{name: "garbage after a valid request", valid: true, send: append(append([]byte(nil), alive...), 0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef), reply: "don't support action", closes: true},
		{name: "valid request, then half a header", valid: true, send: append(append([]byte(nil), alive...), pubHdr(9, "keep")[:7]...), closes: true},
	}
	for _, name := range []string{"", ".", "..", "../escape", "a b", "tab\there", "nul\x00", "del\x7f", "back\\slash", strings.Repeat("x", 129)} {
		cases = append(cases, hostileCase{name: fmt.Sprintf("pub to topic %q", name), send: kit.Must(protocol.AppendPub(nil, []byte(name), nil, rec)), reply: "invalid topic name"})
	}
	return cases
}

// TestHostileRequests sends each malformed request of hostileCases on its
// own connection while a bystander publishes and subscribes: every one is
// answered with its 400 (or closed), the connection is closed or stays
// usable as the case says, the bystander never notices, and the server's
// memory stays bounded.
func TestHostileRequests(t *testing.T) {
	p := hostileServer(t)
	pid := p.Cmd.Process.Pid
	by := startBystander(t, p.Addr)
	by.check(t, 0, 0)
	before := rssKB(t, pid)
	for _, tc := range hostileCases() {
		pubs, received := by.pubs.Load(), by.received.Load()
		c := kit.Dial(t, p.Addr)
		c.C.SetDeadline(time.Now().Add(20 * time.Second))
		// Large requests are written while the server may already refuse
		// them: write from a goroutine, never block the reading side.
		written := make(chan error, 1)
		go func() {
			_, err := c.C.Write(tc.send)
			if err == nil && tc.halfEnd {
				err = c.C.(*net.TCPConn).CloseWrite()
			}
			written <- err
		}()
		if tc.valid {
			if _, err := protocol.ReadReply(c.R, protocol.ReplyPlain, 0); err != nil {
				t.Fatalf("%s: reply to the valid request: %v", tc.name, err)
			}
		}
		if tc.reply != "" {
			if _, err := protocol.ReadReply(c.R, protocol.ReplyPlain, 0); !strings.HasPrefix(kit.BizText(err), tc.reply) {
				t.Fatalf("%s: reply %q, want a 400 starting %q", tc.name, kit.BizText(err), tc.reply)
			}
		}
		if tc.closes {
			start := time.Now()
			if err := c.ExpectEOF(3 * time.Second); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if d := time.Since(start); !tc.halfEnd && tc.reply == "" && d > hostileReadTimeout+2*time.Second {
				t.Fatalf("%s: closed after %v, read timeout %v", tc.name, d, hostileReadTimeout)
			}
		} else if err := c.InSync(); err != nil {
			t.Fatalf("%s: connection not usable after the refusal: %v", tc.name, err)
		}
		if err := <-written; err != nil && !tc.closes {
			t.Fatalf("%s: write: %v", tc.name, err)
		}
		c.C.Close()
		by.check(t, pubs, received)
	}

	// Claims of 4 GiB, and requests at the payload cap abandoned after
	// their header, from many connections at once: what the server holds
	// is bounded by what clients actually send, not by what they claim.
	var conns []*kit.Client
	for i := 0; i < 100; i++ {
		c := kit.Dial(t, p.Addr)
		c.C.Write(req(protocol.CmdPub, protocol.PayloadArea(0xFFFFFFFF), "keep", nil))
		conns = append(conns, c)
		c = kit.Dial(t, p.Addr)
		c.C.Write(req(protocol.CmdPub, protocol.PayloadArea(protocol.DefaultMaxPayload), "keep", nil))
		conns = append(conns, c)
	}
	for _, c := range conns {
		// A 400 and the close for a claim over the cap, the close after
		// the read timeout for an abandoned request.
		c.C.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c.R); err != nil {
			t.Fatalf("abandoned request not closed: %v", err)
		}
	}
	by.check(t, by.pubs.Load(), by.received.Load())
	after := rssKB(t, pid)
	t.Logf("%d hostile requests; server RSS %d KiB before, %d KiB after; bystander %d publishes, %d messages received",
		len(hostileCases())+200, before, after, by.pubs.Load(), by.received.Load())
	if after-before > 64<<10 {
		t.Fatalf("server RSS grew from %d KiB to %d KiB", before, after)
	}
	if strings.Contains(p.Out.String(), "panic") {
		t.Fatalf("the server logged a panic:\n%s", kit.Tail(p.Out.String(), 4000))
	}
}
