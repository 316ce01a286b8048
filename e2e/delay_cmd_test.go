package e2e

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

func (c *client) delay(topic string, delayMs int64, records []byte) error {
	_, err := c.roundTrip(must(protocol.AppendDelay(nil, []byte(topic), []byte("dt"), delayMs, records)), protocol.ReplyPlain)
	return err
}

// rawDelay sends a delay request whose header announces size record bytes
// (the body still carries the 8-byte delay and body bytes).
func (c *client) rawDelay(topic string, size uint32, delayMs int64, body []byte) error {
	b := binary.LittleEndian.AppendUint64(nil, uint64(delayMs))
	b = append(b, body...)
	_, err := c.roundTrip(must(protocol.AppendRequest(nil, protocol.CmdDelay, protocol.PayloadArea(size), []byte(topic), nil, b)), protocol.ReplyPlain)
	return err
}

// TestDelayRequests checks the delay pub (16) replies of §1.5.5, in the
// order of its checks, with delay.maxDelay set low.
func TestDelayRequests(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "delay:\n  maxDelay: 5000\n")
	p := start(t, dir)
	c := dial(t, p.addr)
	if err := c.create("d", 0); err != nil {
		t.Fatal(err)
	}
	rec := record([][2]string{{"traceId", "x1"}}, "later")
	bad := append(append([]byte(nil), rec...), 1, 0, 0) // 3 trailing bytes
	for _, tc := range []struct {
		name string
		send func() error
		want string // "" = accepted
	}{
		{"1.5 s", func() error { return c.delay("d", 1500, rec) }, ""},
		{"two records", func() error { return c.delay("d", 1500, append(append([]byte(nil), rec...), rec...)) }, ""},
		{"exactly 1 s", func() error { return c.delay("d", 1000, rec) }, ""},
		{"exactly the max", func() error { return c.delay("d", 5000, rec) }, ""},
		{"missing topic", func() error { return c.delay("nope", 1500, rec) }, "topic not exist"},
		{"bad topic name", func() error { return c.delay("a b", 1500, rec) }, "invalid topic name"},
		{"under 1 s", func() error { return c.delay("d", 999, rec) }, "delay time must be more than 1 second"},
		{"negative", func() error { return c.delay("d", -5000, rec) }, "delay time must be more than 1 second"},
		{"over the max", func() error { return c.delay("d", 5001, rec) }, "delay of 5001 ms exceeds delay.maxDelay 5000"},
		{"huge", func() error { return c.delay("d", 1<<62, rec) }, "delay of 4611686018427387904 ms exceeds delay.maxDelay 5000"},
		{"bad records", func() error { return c.delay("d", 1500, bad) }, "invalid delay request"},
		{"8 record bytes", func() error { return c.rawDelay("d", 8, 1500, make([]byte, 8)) }, "invalid delay request"},
		{"8 record bytes beats short delay", func() error { return c.rawDelay("d", 8, 10, make([]byte, 8)) }, "invalid delay request"},
		{"short delay beats bad records", func() error { return c.delay("d", 10, bad) }, "delay time must be more than 1 second"},
		{"bad records beat the max", func() error { return c.delay("d", 9000, bad) }, "invalid delay request"},
		{"the max beats a missing topic", func() error { return c.delay("nope", 9000, rec) }, "delay of 9000 ms exceeds delay.maxDelay 5000"},
	} {
		got := bizText(tc.send())
		if tc.want == "" && got != "<nil>" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// Every refusal left the connection in sync.
	if err := c.inSync(); err != nil {
		t.Fatal(err)
	}
}

// TestDelayOnSlave: a slave refuses delay pubs before looking at them.
func TestDelayOnSlave(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "")
	master := start(t, dir)
	c := dial(t, master.addr)
	if err := c.create("d", 0); err != nil {
		t.Fatal(err)
	}
	master.stop()

	p := startArgs(t, dir, "-role", "slave", "-host", "127.0.0.1", "-port", "1")
	s := dial(t, p.addr)
	rec := record(nil, "x")
	for _, send := range []func() error{
		func() error { return s.delay("d", 1500, rec) },
		func() error { return s.delay("nope", 10, rec) },
		func() error { return s.rawDelay("d", 8, 1500, make([]byte, 8)) },
		func() error { return s.delay("d", 1<<40, rec) },
	} {
		if got := bizText(send()); got != "just master can pub message" {
			t.Errorf("slave delay: %q", got)
		}
	}
	if err := s.inSync(); err != nil {
		t.Fatal(err)
	}
}

// startArgs is start with extra command-line flags, for tests and
// benchmarks.
func startArgs(t testing.TB, dir string, args ...string) *proc {
	t.Helper()
	return startCmd(t, dir, smsstest.SmssCommand(t, dir, args...))
}

// TestDelayDelivered: a 1.5 s delay pub is published when due, with the
// records verbatim and the eventIds after the delay command's own.
func TestDelayDelivered(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, streamConfig(1<<20, 200))
	p := start(t, dir)
	c := dial(t, p.addr)
	if err := c.create("dd", 0); err != nil { // eventId 1
		t.Fatal(err)
	}
	sub := dial(t, p.addr)
	if err := sub.sub("dd", "w", 0, 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if u, err := sub.next(unitWait); err != nil || u.code != protocol.StatusAlive {
		t.Fatalf("subscriber not waiting: %v %v", u, err)
	}
	recs := [][]byte{record([][2]string{{"traceId", "d1"}}, "first"), record(nil, "second")}
	sentAt := time.Now()
	if err := c.delay("dd", 1500, append(append([]byte(nil), recs[0]...), recs[1]...)); err != nil { // eventId 2
		t.Fatal(err)
	}
	u, err := sub.nextData(5 * time.Second)
	if err != nil {
		t.Fatalf("delayed messages not delivered: %v", err)
	}
	after := time.Since(sentAt)
	t.Logf("delivered %v after the delay request", after)
	// The server's trigger is its ms clock + 1500; allow for ms rounding.
	if after < 1490*time.Millisecond || after > 3*time.Second {
		t.Fatalf("delivered %v after a 1.5 s delay", after)
	}
	if len(u.msgs) != 2 {
		t.Fatalf("got %v, want both records in one frame", u)
	}
	for i, m := range u.msgs {
		if m.EventID != int64(3+i) || string(m.Raw) != string(recs[i]) {
			t.Fatalf("message %d: eventId %d record %q", i, m.EventID, m.Raw)
		}
	}
}
