package admin

import (
	"runtime"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
)

// TestEpollKillAndSigtermUnderLoad runs the crash and shutdown checks of
// crash_test.go with server.epoll on (issue 24): 16 publishers on the
// epoll loop, the server killed with SIGKILL three times at random loads
// and finally stopped with SIGTERM; after each restart nothing acknowledged
// is lost or duplicated and eventIds never repeat.
func TestEpollKillAndSigtermUnderLoad(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("server.epoll is Linux only")
	}
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "  flushLevel: 1\n  maxLogSize: 65536\nserver:\n  epoll: true\n")
	topics := []string{"t0", "t1"}
	p := kit.Start(t, dir)
	// The loop starts in Serve, after "smss listening" is logged: wait
	// for its own line (not "epoll loop not used", which also names it).
	p.Out.WaitContains(t, 10*time.Second, "serving plain connections on an epoll loop")
	c := kit.Dial(t, p.Addr)
	for _, name := range topics {
		if err := c.Create(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	var all []kit.Acked
	for cycle, target := range []int64{300, 1500, 700, 2000} {
		l := &kit.Load{}
		stop := make(chan struct{})
		l.Run(t, p.Addr, topics, 16, cycle, stop)
		deadline := time.Now().Add(20 * time.Second)
		for l.Count.Load() < target && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if l.Count.Load() == 0 {
			t.Fatalf("cycle %d: no publish acknowledged\n%s", cycle, p.Out.String())
		}
		last := cycle == 3
		if last {
			p.Term() // SIGTERM: the loop answers what it read, then hands its connections back to drain
		} else {
			p.Kill()
		}
		close(stop)
		l.Wg.Wait()
		all = append(all, l.Acked...)
		p = kit.Start(t, dir)
		kit.Verify(t, dir+"/data", topics, all)
	}
	p.Term()
	kit.Verify(t, dir+"/data", topics, all)
}
