package clientapi

import (
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/protocol"
)

// TestDelayRequests checks the delay pub (16) replies of §1.5.5, in the
// order of its checks, with delay.maxDelay set low.
func TestDelayRequests(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "delay:\n  maxDelay: 5000\n")
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	if err := c.Create("d", 0); err != nil {
		t.Fatal(err)
	}
	rec := kit.Record([][2]string{{"traceId", "x1"}}, "later")
	bad := append(append([]byte(nil), rec...), 1, 0, 0) // 3 trailing bytes
	for _, tc := range []struct {
		name string
		send func() error
		want string // "" = accepted
	}{
		{"1.5 s", func() error { return c.Delay("d", 1500, rec) }, ""},
		{"two records", func() error { return c.Delay("d", 1500, append(append([]byte(nil), rec...), rec...)) }, ""},
		{"exactly 1 s", func() error { return c.Delay("d", 1000, rec) }, ""},
		{"exactly the max", func() error { return c.Delay("d", 5000, rec) }, ""},
		{"missing topic", func() error { return c.Delay("nope", 1500, rec) }, "topic not exist"},
		{"bad topic name", func() error { return c.Delay("a b", 1500, rec) }, "invalid topic name"},
		{"under 1 s", func() error { return c.Delay("d", 999, rec) }, "delay time must be more than 1 second"},
		{"negative", func() error { return c.Delay("d", -5000, rec) }, "delay time must be more than 1 second"},
		{"over the max", func() error { return c.Delay("d", 5001, rec) }, "delay of 5001 ms exceeds delay.maxDelay 5000"},
		{"huge", func() error { return c.Delay("d", 1<<62, rec) }, "delay of 4611686018427387904 ms exceeds delay.maxDelay 5000"},
		{"bad records", func() error { return c.Delay("d", 1500, bad) }, "invalid delay request"},
		{"8 record bytes", func() error { return c.RawDelay("d", 8, 1500, make([]byte, 8)) }, "invalid delay request"},
		{"8 record bytes beats short delay", func() error { return c.RawDelay("d", 8, 10, make([]byte, 8)) }, "invalid delay request"},
		{"short delay beats bad records", func() error { return c.Delay("d", 10, bad) }, "delay time must be more than 1 second"},
		{"bad records beat the max", func() error { return c.Delay("d", 9000, bad) }, "invalid delay request"},
		{"the max beats a missing topic", func() error { return c.Delay("nope", 9000, rec) }, "delay of 9000 ms exceeds delay.maxDelay 5000"},
	} {
		got := kit.BizText(tc.send())
		if tc.want == "" && got != "<nil>" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// Every refusal left the connection in sync.
	if err := c.InSync(); err != nil {
		t.Fatal(err)
	}
}

// TestDelayOnSlave: a slave refuses delay pubs before looking at them.
func TestDelayOnSlave(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "")
	master := kit.Start(t, dir)
	c := kit.Dial(t, master.Addr)
	if err := c.Create("d", 0); err != nil {
		t.Fatal(err)
	}
	master.Term()

	p := kit.StartArgs(t, dir, "-role", "slave", "-host", "127.0.0.1", "-port", "1")
	s := kit.Dial(t, p.Addr)
	rec := kit.Record(nil, "x")
	for _, send := range []func() error{
		func() error { return s.Delay("d", 1500, rec) },
		func() error { return s.Delay("nope", 10, rec) },
		func() error { return s.RawDelay("d", 8, 1500, make([]byte, 8)) },
		func() error { return s.Delay("d", 1<<40, rec) },
	} {
		if got := kit.BizText(send()); got != "just master can pub message" {
			t.Errorf("slave delay: %q", got)
		}
	}
	if err := s.InSync(); err != nil {
		t.Fatal(err)
	}
}

// TestDelayDelivered: a 1.5 s delay pub is published when due, with the
// records verbatim and the eventIds after the delay command's own.
func TestDelayDelivered(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, streamConfig(1<<20, 200))
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	if err := c.Create("dd", 0); err != nil { // eventId 1
		t.Fatal(err)
	}
	sub := kit.Dial(t, p.Addr)
	if err := sub.Sub("dd", "w", 0, 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if u, err := sub.Next(kit.UnitWait); err != nil || u.Code != protocol.StatusAlive {
		t.Fatalf("subscriber not waiting: %v %v", u, err)
	}
	recs := [][]byte{kit.Record([][2]string{{"traceId", "d1"}}, "first"), kit.Record(nil, "second")}
	sentAt := time.Now()
	if err := c.Delay("dd", 1500, append(append([]byte(nil), recs[0]...), recs[1]...)); err != nil { // eventId 2
		t.Fatal(err)
	}
	u, err := sub.NextData(5 * time.Second)
	if err != nil {
		t.Fatalf("delayed messages not delivered: %v", err)
	}
	after := time.Since(sentAt)
	t.Logf("delivered %v after the delay request", after)
	// The server's trigger is its ms clock + 1500; allow for ms rounding.
	if after < 1490*time.Millisecond || after > 3*time.Second {
		t.Fatalf("delivered %v after a 1.5 s delay", after)
	}
	if len(u.Msgs) != 2 {
		t.Fatalf("got %v, want both records in one frame", u)
	}
	for i, m := range u.Msgs {
		if m.EventID != int64(3+i) || string(m.Raw) != string(recs[i]) {
			t.Fatalf("message %d: eventId %d record %q", i, m.EventID, m.Raw)
		}
	}
}
