package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// readTopic reads every message of topic on addr from the start, until
// the server's first alive (200 ms in these servers' configs).
func readTopic(t *testing.T, addr, topic string) []protocol.SubMessage {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req, err := protocol.AppendSub(nil, []byte(topic), nil, 0, 255, 10*time.Second, []byte(fmt.Sprintf("check-%d", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(req); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(nc)
	var out []protocol.SubMessage
	for {
		nc.SetDeadline(time.Now().Add(20 * time.Second))
		f, err := protocol.ReadSubFrame(r, 64<<20)
		if err != nil {
			t.Fatalf("read %s on %s: %v", topic, addr, err)
		}
		if f.Code == protocol.StatusAlive {
			return out
		}
		msgs, err := protocol.ParseSubMessages(f.Body, f.Count)
		if err != nil {
			t.Fatal(err)
		}
		for i := range msgs {
			m := msgs[i]
			m.Body = bytes.Clone(m.Body)
			out = append(out, m)
		}
		if _, err := nc.Write([]byte{0, 0}); err != nil {
			t.Fatal(err)
		}
	}
}

func bodies(ms []protocol.SubMessage) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	slices.Sort(out)
	return out
}

func lastEventID(t *testing.T, addr string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{HealthCheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.LastEventID
}

func publish(t *testing.T, addr, topic, body, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{HealthCheckInterval: -1, DisableMessageIDs: id == ""})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := client.NewMessage([]byte(body))
	if id != "" {
		m.SetHeader(client.MessageIDHeader, id)
	}
	if err := c.Publish(ctx, topic, m); err != nil {
		t.Fatalf("publish %q to %s: %v", body, addr, err)
	}
}

// TestDivergedRepublishReal: a real divergence. Master A and slave B; B
// is frozen while A takes writes only it has (messages with ids, one
// without, a stored consumer position in __cursors), then both die. B is
// restarted as the master (dedupe off, so nothing but the check keeps a
// duplicate out) and takes two of A's lost writes again with their ids, as
// a client retrying on the new master does, and one of its own. A rejoins
// as B's slave with -rejoin, which moves its tail into diverged/.
// smssctl diverged --republish then leaves every message on B exactly
// once, __cursors untouched; a second run republishes nothing; a server
// without the common prefix is refused unless --no-check.
func TestDivergedRepublishReal(t *testing.T) {
	const alive = "timeout:\n  server:\n    alive: 200\n"
	adir, bdir := t.TempDir(), t.TempDir()
	aport, bport := smsstest.FreePort(t), smsstest.FreePort(t)
	smsstest.WriteConfig(t, adir, aport, alive)
	smsstest.WriteConfig(t, bdir, bport, alive+"dedupe:\n  window: 0\n")
	a := smsstest.StartSmss(t, adir)
	ctl(t, a.Addr, "", "topic", "create", "t").expect(t, 0)
	for i := range 4 {
		publish(t, a.Addr, "t", "shared-"+strconv.Itoa(i), "shared-"+strconv.Itoa(i))
	}
	b := smsstest.StartSmss(t, bdir, "-role", "slave", "-host", "127.0.0.1", "-port", strconv.Itoa(aport), "-event", "0")
	smsstest.WaitFor(t, 30*time.Second, "B in sync", func() bool { return lastEventID(t, b.Addr) == lastEventID(t, a.Addr) })

	b.Stop()
	smsstest.WaitFor(t, 10*time.Second, "B stopped", func() bool { return procState(b.Pid()) == 'T' })
	for i := range 4 {
		publish(t, a.Addr, "t", "tail-"+strconv.Itoa(i), "tail-"+strconv.Itoa(i))
	}
	publish(t, a.Addr, "t", "tail-noid", "")
	// A consumer with a stored position: the ended subscription writes it
	// to __cursors at once.
	before := lastEventID(t, a.Addr)
	ctl(t, a.Addr, "", "sub", "t", "--who", "w", "--resume", "--batch", "1", "--count", "1").expect(t, 0)
	if !smsstest.Poll(10*time.Second, func() bool { return lastEventID(t, a.Addr) > before }) {
		t.Fatalf("no position stored (last eventId %d):\n%s", lastEventID(t, a.Addr), a.Out.String())
	}
	a.Kill()
	b.Kill()

	b = smsstest.StartSmss(t, bdir)
	publish(t, b.Addr, "t", "tail-1", "tail-1")
	publish(t, b.Addr, "t", "tail-3", "tail-3")
	publish(t, b.Addr, "t", "fresh", "fresh")

	a = smsstest.StartSmss(t, adir, "-role", "slave", "-host", "127.0.0.1", "-port", strconv.Itoa(bport), "-event", "0", "-rejoin")
	ents, err := os.ReadDir(filepath.Join(adir, "data", "diverged"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("diverged directory: %v %v\n%s", ents, err, a.Out.String())
	}
	moved := filepath.Join(adir, "data", "diverged", ents[0].Name())

	list := ctl(t, b.Addr, "", "diverged", moved)
	list.expect(t, 0, "pub __cursors: 1 message(s); republish: skip", `body "tail-noid"`)

	// Another server, without the common prefix: refused, unless --no-check.
	other := startServer(t)
	r := ctl(t, other, "", "diverged", moved, "--republish", "--create-topics")
	if r.code != 1 || !strings.Contains(r.stderr, "does not hold the common prefix") || !strings.Contains(r.stderr, "--no-check") {
		t.Fatalf("republish to a server without the prefix: %+v", r)
	}
	ctl(t, other, "", "diverged", moved, "--republish", "--create-topics", "--no-check").expect(t, 0, "republished 5 message(s)")

	ctl(t, b.Addr, "", "diverged", moved, "--republish").expect(t, 0,
		"republished 3 message(s) in 3 block(s); 2 block(s) skipped as already on the master")
	want := []string{"fresh", "shared-0", "shared-1", "shared-2", "shared-3", "tail-0", "tail-1", "tail-2", "tail-3", "tail-noid"}
	got := readTopic(t, b.Addr, "t")
	if !slices.Equal(bodies(got), want) {
		t.Fatalf("t on the master holds %q, want each of %q once", bodies(got), want)
	}
	for _, m := range got {
		if string(m.Body) == "tail-noid" {
			continue
		}
		if id, _ := headerValue(m, client.MessageIDHeader); id != string(m.Body) {
			t.Fatalf("message %q carries id %q, want its original id", m.Body, id)
		}
	}
	// Run again: everything is on the master already.
	ctl(t, b.Addr, "", "diverged", moved, "--republish").expect(t, 0,
		"republished 0 message(s) in 0 block(s); 5 block(s) skipped as already on the master")
	if got := readTopic(t, b.Addr, "t"); !slices.Equal(bodies(got), want) {
		t.Fatalf("after a second run t holds %q", bodies(got))
	}
	if lastEventID(t, a.Addr) == 0 {
		t.Fatal("the rejoined node holds nothing")
	}

}

func headerValue(m protocol.SubMessage, key string) (string, bool) {
	for _, kv := range m.Headers {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// procState is the state letter of a process (Linux /proc), 0 if unknown.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
