package replication

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// slaveStreamOf is the stream part of smssctl status --json on addr.
func slaveStreamOf(t *testing.T, addr string) *protocol.SlaveStream {
	t.Helper()
	out, errOut, code := kit.Smssctl(t, addr, "status", "--json")
	var st struct {
		Stream *protocol.SlaveStream `json:"stream"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("smssctl status of %s: exit %d\n%s%s", addr, code, out, errOut)
	}
	return st.Stream
}

// migrationSub consumes topic as an original client does: from the last
// eventId it acknowledged, at the address it is given, recording every
// message handed to it.
type migrationSub struct {
	t          *testing.T
	topic, who string
	last       int64
	got        map[string]int // body → times handed
	order      []int64        // eventIds in the order handed
}

// consume subscribes at addr after s.last and acknowledges batches until
// it holds want messages in all.
func (s *migrationSub) consume(addr string, want int) {
	s.t.Helper()
	c := kit.Dial(s.t, addr)
	defer c.C.Close()
	if err := c.Sub(s.topic, s.who, s.last, 50, 10*time.Second); err != nil {
		s.t.Fatal(err)
	}
	for len(s.order) < want {
		u, err := c.NextData(20 * time.Second)
		if err != nil || u.Code != protocol.StatusOK {
			s.t.Fatalf("subscriber at %s after eventId %d, %d of %d messages: %v %v", addr, s.last, len(s.order), want, u, err)
		}
		for _, m := range u.Msgs {
			s.got[string(m.Body)]++
			s.order = append(s.order, m.EventID)
			s.last = m.EventID
		}
		if err := c.Ack(0); err != nil { // 0: go on
			s.t.Fatal(err)
		}
	}
}

// The migration of docs/upgrading.md, step by step on
// real processes, with publishers that send no message ids (the original
// client) and a subscriber that keeps its own eventId: the old master (a
// stand-in speaking the original's replication stream, syncSlaves 0) feeds
// the new node as a slave; a promote while the master streams writes is
// refused; writes stop; status says the stream caught up; the promote then
// goes through without --force; writes and the subscriber move to the new
// node. Every acknowledged message is on the new node exactly once and
// the subscriber is handed each exactly once.
func TestMigrationStepsLoseNothing(t *testing.T) {
	const topic = "orders"
	mdir, sdir := t.TempDir(), t.TempDir()
	mport := kit.FreePort(t)
	// Like the original, the stand-in stores no positions: its readers
	// write nothing (docs/upgrading.md: cursor.enabled false while original nodes
	// remain).
	kit.ReplConfig(t, mdir, mport, "cursor:\n  enabled: false\n")
	master := kit.StartArgs(t, mdir, "-role", "master")
	kit.ReplConfig(t, sdir, kit.FreePort(t), "replication:\n  promoteQuietMs: 1000\n")
	if err := kit.Dial(t, master.Addr).Create(topic, 0); err != nil {
		t.Fatal(err)
	}
	slave := kit.StartReplSlave(t, sdir, mport, 0)

	var mu sync.Mutex
	acked := map[string]bool{}
	publish := func(addr string, phase string, stop <-chan struct{}, n int) {
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := kit.Dial(t, addr)
				defer c.C.Close()
				for i := 0; n == 0 || i < n; i++ {
					select {
					case <-stop:
						return
					default:
					}
					body := fmt.Sprintf("%s-p%d-%d", phase, g, i)
					if err := c.Pub(topic, kit.Record(nil, body)); err != nil {
						errs <- fmt.Errorf("publish %s at %s: %w", body, addr, err)
						return
					}
					mu.Lock()
					acked[body] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }

	// Writes flow to the old master; the new node replicates them.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); publish(master.Addr, "old", stop, 0) }()
	if !smsstest.Poll(30*time.Second, func() bool { return count() >= 400 }) {
		t.Fatalf("only %d messages published to the old master", count())
	}
	if st := slaveStreamOf(t, slave.Addr); st == nil || st.CaughtUp || st.State != "streaming" {
		t.Fatalf("status of the new node while writes stream: %+v, want streaming, not caught up", st)
	}
	out, errOut, code := kit.Smssctl(t, slave.Addr, "promote")
	if code == 0 || !strings.Contains(out+errOut, "its master is still streaming writes") {
		t.Fatalf("promote while the master streams writes: exit %d\n%s%s", code, out, errOut)
	}
	// Step: stop writes; wait until status says the stream caught up.
	close(stop)
	<-done
	if !smsstest.Poll(30*time.Second, func() bool { st := slaveStreamOf(t, slave.Addr); return st != nil && st.CaughtUp }) {
		t.Fatalf("the new node never reported caught up: %+v", slaveStreamOf(t, slave.Addr))
	}
	// The subscriber has read part of the history on the old master.
	sub := &migrationSub{t: t, topic: topic, who: "migrating", got: map[string]int{}}
	sub.consume(master.Addr, count()/2)
	// Step: promote (no --force needed now), stop the old master, move
	// writes and the subscriber.
	if out, errOut, code := kit.Smssctl(t, slave.Addr, "promote"); code != 0 {
		t.Fatalf("promote after the stream caught up: exit %d\n%q%q\n%s", code, out, errOut, kit.Tail(slave.Out.String(), 2000))
	}
	master.Term()
	publish(slave.Addr, "new", nil, 100)
	total := count()
	sub.consume(slave.Addr, total)

	all := &migrationSub{t: t, topic: topic, who: "check", got: map[string]int{}}
	all.consume(slave.Addr, total)
	held := all.got
	mu.Lock()
	defer mu.Unlock()
	for body := range acked {
		if held[body] != 1 {
			t.Errorf("acknowledged %q is held %d times on the new master", body, held[body])
		}
		if sub.got[body] != 1 {
			t.Errorf("acknowledged %q was handed to the subscriber %d times", body, sub.got[body])
		}
	}
	if len(held) != len(acked) || len(sub.order) != len(acked) {
		t.Errorf("the new master holds %d messages, the subscriber was handed %d, %d were acknowledged", len(held), len(sub.order), len(acked))
	}
	for i := 1; i < len(sub.order); i++ {
		if sub.order[i] <= sub.order[i-1] {
			t.Fatalf("the subscriber was handed eventId %d after %d", sub.order[i], sub.order[i-1])
		}
	}
}
