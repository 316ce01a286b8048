package crash

import (
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// TestTopicLifetime (about 11 s: a create refuses lifetimes under 10 s)
// creates a topic that lives 10.8 s with two subscribers on it: at its
// expiry both get 255 within 1 s, publishing to it fails, and a topic
// re-created under the same name starts empty.
func TestTopicLifetime(t *testing.T) {
	t.Parallel() // long, mostly waiting on its faults; owns its ports and directories
	if testing.Short() {
		t.Skip("waits 10 s for a topic to expire")
	}
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "timeout:\n  server:\n    alive: 500\n")
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	// 800 ms over the 10 s minimum: the server checks against its own
	// clock when the request arrives, which a loaded machine can delay.
	expireAt := time.Now().UnixMilli() + 10_800
	if err := c.Create("life", expireAt); err != nil {
		t.Fatal(err)
	}
	if err := c.Pub("life", kit.Record(nil, "before")); err != nil {
		t.Fatal(err)
	}
	subs := []*kit.Client{kit.Dial(t, p.Addr), kit.Dial(t, p.Addr)}
	for i, s := range subs {
		if err := s.Sub("life", []string{"w1", "w2"}[i], 0, 10, 3*time.Second); err != nil {
			t.Fatal(err)
		}
		u, err := s.NextData(5 * time.Second)
		if err != nil || len(u.Msgs) != 1 || string(u.Msgs[0].Body) != "before" {
			t.Fatalf("subscriber %d: %v %v", i, u, err)
		}
		if err := s.Ack(0); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range subs {
		var u kit.Unit
		var err error
		for {
			// Alives every 500 ms until the end.
			u, err = s.Next(time.Until(time.UnixMilli(expireAt).Add(5 * time.Second)))
			if err != nil || u.Code != protocol.StatusAlive {
				break
			}
		}
		ended := time.Now().UnixMilli()
		if err != nil || u.Code != protocol.StatusSubEnd {
			t.Fatalf("subscriber %d at expiry: %v %v, want 255\n%s", i, u, err, p.Out.String())
		}
		if ended < expireAt || ended > expireAt+1000 {
			t.Errorf("subscriber %d got 255 %d ms from expireAt, want within 0..1000", i, ended-expireAt)
		}
		t.Logf("subscriber %d got 255 %d ms after expireAt", i, ended-expireAt)
	}
	if got := kit.BizText(c.Pub("life", kit.Record(nil, "after"))); got != "topic not exist" {
		t.Errorf("pub to the expired topic: %q", got)
	}
	if !smsstest.Poll(10*time.Second, func() bool { return strings.Contains(p.Out.String(), "expired topic deleted") }) {
		t.Errorf("no log line for the reap")
	}
	if err := c.Create("life", 0); err != nil {
		t.Fatalf("re-create: %v", err)
	}
	s := kit.Dial(t, p.Addr)
	if err := s.Sub("life", "w3", 0, 10, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if u, err := s.Next(3 * time.Second); err != nil || u.Code != protocol.StatusAlive {
		t.Fatalf("re-created topic: first unit %v %v, want an alive (no old messages)", u, err)
	}
}
