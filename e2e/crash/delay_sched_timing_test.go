package crash

import (
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/protocol"
)

// lateTolerance is how late a delayed message may arrive over TCP before
// the test calls it lost in the scheduler rather than in machine load.
const lateTolerance = 3 * time.Second

// TestDelayFiresOnTime: delayed messages sent over TCP reach a subscriber
// no earlier than their delay and shortly after it, in trigger order
// (delays of 1.5 s, 1.7 s and 1.6 s arrive as 1.5, 1.6, 1.7), each once.
func TestDelayFiresOnTime(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "")
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	if err := c.Create("dly", 0); err != nil {
		t.Fatal(err)
	}
	s := kit.Dial(t, p.Addr)
	if err := s.Sub("dly", "w", 0, 10, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	type sentDelay struct {
		body    string
		delay   time.Duration
		at      time.Time // before the request was sent
		replied time.Time // after its reply was read
	}
	var sent []sentDelay
	for _, d := range []struct {
		body string
		ms   int64
	}{{"a", 1500}, {"c", 1700}, {"b", 1600}} {
		at := time.Now()
		if err := c.Delay("dly", d.ms, kit.Record(nil, d.body)); err != nil {
			t.Fatalf("delay %s: %v", d.body, err)
		}
		sent = append(sent, sentDelay{d.body, time.Duration(d.ms) * time.Millisecond, at, time.Now()})
	}
	byBody := map[string]sentDelay{}
	for _, d := range sent {
		byBody[d.body] = d
	}
	var got []string
	for len(got) < 3 {
		u, err := s.NextData(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for delayed messages (got %v): %v\n%s", got, err, p.Out.String())
		}
		arrived := time.Now()
		if u.Code != protocol.StatusOK {
			t.Fatalf("unexpected %v", u)
		}
		for _, m := range u.Msgs {
			body := string(m.Body)
			d, ok := byBody[body]
			if !ok {
				t.Fatalf("unexpected message %q", body)
			}
			got = append(got, body)
			// The server's trigger is its receive time (>= at, in whole
			// ms) plus the delay: never before at+delay-1ms.
			wait := arrived.Sub(d.at)
			if wait < d.delay-time.Millisecond {
				t.Errorf("%s: arrived %v after the request, before its %v delay", body, wait, d.delay)
			}
			// Precision is measured by delay's precision test; over TCP on
			// a shared 2-core machine only gross lateness is an error.
			if wait > d.delay+lateTolerance {
				t.Errorf("%s: arrived %v after the request, long after its %v delay", body, wait, d.delay)
			}
			if m.Ts < d.at.UnixMilli()+d.delay.Milliseconds() {
				t.Errorf("%s: stored at %d, before its trigger time %d", body, m.Ts, d.at.UnixMilli()+d.delay.Milliseconds())
			}
			t.Logf("%s: delay %v, arrived after %v (%v late)", body, d.delay, wait.Round(time.Millisecond), (wait - d.delay).Round(time.Millisecond))
		}
		if err := s.Ack(0); err != nil {
			t.Fatal(err)
		}
	}
	// Trigger order: each trigger lies in [at, replied] + delay (at - 1ms
	// for the server's whole-ms clock). Requests answered at once give
	// a, b, c; one answered late on a loaded machine (c's reply more than
	// 100 ms after its request) may rightly let b's trigger pass c's, so
	// only an order the trigger windows rule out is an error.
	for i := range got {
		for j := i + 1; j < len(got); j++ {
			early, late := byBody[got[i]], byBody[got[j]]
			if late.replied.Add(late.delay).Before(early.at.Add(early.delay - time.Millisecond)) {
				t.Fatalf("arrival order %v: %s is due before %s", got, got[j], got[i])
			}
		}
	}
	if got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Logf("arrival order %v: the requests' replies were slow enough to allow it", got)
	}
	// Nothing more arrives (each delayed message is published once).
	if u, err := s.Next(300 * time.Millisecond); err == nil {
		t.Fatalf("unexpected %v after the three messages", u)
	}
}
