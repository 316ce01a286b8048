package crash

import (
	"bytes"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
)

var repairRe = regexp.MustCompile(`topicBlocksAppended=[1-9]`)

// TestCrashKill9 kills a server under load from 16 publishers at a random
// moment, 20 times in a row, and checks after every restart that nothing
// acknowledged was lost or duplicated and that eventIds never repeat.
func TestCrashKill9(t *testing.T) {
	cycles := 20
	if testing.Short() {
		cycles = 5
	}
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "  flushLevel: 1\n  maxLogSize: 65536\n")
	topics := []string{"t0", "t1", "t2", "t3"}
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	for _, name := range topics {
		if err := c.Create(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	var all []kit.Acked
	repaired := 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for cycle := 0; cycle < cycles; cycle++ {
		l := &kit.Load{}
		stop := make(chan struct{})
		l.Run(t, p.Addr, topics, 16, cycle, stop)
		// Kill at a random moment once some writes were acknowledged.
		target := int64(50 + rng.IntN(2000))
		deadline := time.Now().Add(20 * time.Second)
		for l.Count.Load() < target && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if l.Count.Load() == 0 {
			t.Fatalf("cycle %d: no publish acknowledged\n%s", cycle, p.Out.String())
		}
		p.Kill()
		close(stop)
		l.Wg.Wait()
		all = append(all, l.Acked...)
		p = kit.Start(t, dir)
		kit.Verify(t, dir+"/data", topics, all)
		out := p.Out.String()
		if strings.Contains(out, "truncating") || repairRe.MatchString(out) {
			repaired++
		}
		if !bytes.Contains([]byte(p.Out.String()), []byte("recovery finished")) {
			t.Fatalf("cycle %d: no recovery line", cycle)
		}
	}
	t.Logf("%d cycles, %d acknowledged messages verified, %d restarts repaired torn or missing data", cycles, len(all), repaired)
	p.Term()
	kit.Verify(t, dir+"/data", topics, all)
	if _, err := os.Stat(dir + "/data/binlog"); err != nil {
		t.Fatal(err)
	}
}

// TestSigtermUnderLoad stops a loaded server with SIGTERM: it must exit
// cleanly and keep every acknowledged message.
func TestSigtermUnderLoad(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "  flushLevel: 1\n")
	topics := []string{"a", "b"}
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	for _, name := range topics {
		if err := c.Create(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	l := &kit.Load{}
	stop := make(chan struct{})
	l.Run(t, p.Addr, topics, 16, 0, stop)
	deadline := time.Now().Add(20 * time.Second)
	for l.Count.Load() < 2000 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	p.Term()
	close(stop)
	l.Wg.Wait()
	kit.Verify(t, dir+"/data", topics, l.Acked)
	p = kit.Start(t, dir)
	kit.Verify(t, dir+"/data", topics, l.Acked)
	p.Term()
}
