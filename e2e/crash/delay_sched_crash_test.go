package crash

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// TestDelayKill9ExactlyOnce stores delayed messages due one every 5 ms,
// then kills the server with SIGKILL while they fire (right at the first
// scan after start, which fires the backlog of the downtime, or while it
// fires them on time), 20 times, restarting it each time. After every
// restart the data holds each delayed message at most once; at the end a
// subscriber receives each exactly once and the files agree.
func TestDelayKill9ExactlyOnce(t *testing.T) {
	t.Parallel() // long, mostly waiting on its faults; owns its ports and directories
	cycles := 20
	if testing.Short() {
		cycles = 5
	}
	// Due one every 5 ms: 1.6 s of triggers per cycle (about a cycle's
	// length), so each restart has a backlog of a few hundred to fire.
	const perCycle = 320
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "  flushLevel: 1\n  maxLogSize: 65536\nbackground:\n  firstExecSecond: 1\n")
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	if err := c.Create("dk", 0); err != nil {
		t.Fatal(err)
	}
	// store adds count delayed messages, due one every 5 ms from 1 s on.
	n := 0 // delayed messages stored
	var lastDue time.Time
	store := func(c *kit.Client, count int) {
		t.Helper()
		for i := 0; i < count; i++ {
			if err := c.Delay("dk", int64(1000+5*i), kit.Record(nil, dkBody(n))); err != nil {
				t.Fatalf("delay %d: %v", n, err)
			}
			n++
		}
		lastDue = time.Now().Add(time.Duration(1000+5*count) * time.Millisecond)
	}
	store(c, cycles*perCycle)
	data := dir + "/data"
	topicPath := topicblock.Dir(filepath.Join(data, "topic"), []byte("dk"), 10)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	fired, firing, repaired, caught := 0, 0, 0, 0
	for cycle := 0; cycle < cycles; cycle++ {
		// The first scan, firstExecSecond after start, fires the backlog of
		// the downtime in a burst: every other cycle kill a few ms after the
		// topic starts growing, i.e. inside that burst; else at a random
		// moment of on-time firing.
		if cycle%2 == 0 {
			waitGrowth(t, topicPath, 30*time.Second)
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		} else {
			time.Sleep(time.Duration(1000+rng.IntN(400)) * time.Millisecond)
		}
		p.Kill()
		if inFlight(t, data) {
			caught++
		}
		p = kit.Start(t, dir)
		// Checked before the restarted server's first scan (1 s away),
		// with the server stopped: on a loaded machine the check can take
		// longer than that, and must not read files the scan is writing.
		p.Cmd.Process.Signal(syscall.SIGSTOP)
		was := fired
		fired = checkDelayStore(t, data, n, false)
		p.Cmd.Process.Signal(syscall.SIGCONT)
		if fired > was && fired < n {
			firing++ // delays were firing in the cycle the kill ended
		}
		if repairRe.MatchString(p.Out.String()) {
			repaired++ // recovery completed a write the kill interrupted
		}
		// Restarts and checks are slower on a loaded machine: when the
		// triggers stored so far are about to run out, store another
		// cycle's worth, so that every kill still has delays to fire (an
		// even cycle would otherwise wait for growth that cannot come).
		if cycle < cycles-1 && time.Until(lastDue) < 2*time.Second {
			store(kit.Dial(t, p.Addr), perCycle)
			t.Logf("cycle %d: triggers ran short, %d delayed messages stored in all", cycle, n)
		}
	}
	t.Logf("%d kills, %d of them while delays were firing, %d in the middle of a delay-apply (binlog block written, delay key not yet removed), %d restarts re-applied interrupted writes; %d of %d delayed messages fired before the last restart",
		cycles, firing, caught, repaired, fired, n)
	if firing < cycles/2 {
		t.Errorf("only %d of %d kills came while delays were firing", firing, cycles)
	}

	s := kit.Dial(t, p.Addr)
	if err := s.Sub("dk", "v", 0, 100, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	deadline := lastDue.Add(15 * time.Second)
	for len(seen) < n {
		u, err := s.NextData(time.Until(deadline))
		if err != nil {
			t.Fatalf("subscriber got %d of %d delayed messages: %v", len(seen), n, err)
		}
		if u.Code != protocol.StatusOK {
			t.Fatalf("subscriber: %v", u)
		}
		for _, m := range u.Msgs {
			if seen[string(m.Body)]++; seen[string(m.Body)] > 1 {
				t.Fatalf("delayed message %q delivered twice", m.Body)
			}
		}
		if err := s.Ack(0); err != nil {
			t.Fatal(err)
		}
	}
	p.Term()
	checkDelayStore(t, data, n, true)
}

func dkBody(i int) string { return fmt.Sprintf("dk-%05d", i) }

// checkDelayStore verifies the delay history in a data directory: n delay
// blocks, each delayed message applied at most once (exactly once when
// complete) by a delay-apply block whose messages are in the topic file,
// with the same bodies, never stored before their trigger time, and no
// other message in the topic. It returns how many were applied.
func checkDelayStore(t *testing.T, dataDir string, n int, complete bool) int {
	t.Helper()
	s := kit.ReadStore(t, dataDir, []string{"dk"})
	type delayed struct {
		body    string
		trigger int64
	}
	delays := map[int64]delayed{}  // delay eventId → what it holds
	applied := map[int64]int64{}   // delay eventId → first eventId of its apply
	applyOf := map[int64]delayed{} // published eventId → delay it came from
	last := int64(0)
	for _, b := range s.Binlog {
		if b.EventID <= last {
			t.Fatalf("binlog eventId %d after %d", b.EventID, last)
		}
		k, err := b.MessageCount()
		if err != nil {
			t.Fatal(err)
		}
		last = b.EventID + int64(k) - 1
		if b.Cmd != binlog.CmdDelay && b.Cmd != binlog.CmdDelayApply {
			continue
		}
		trigger := int64(binary.LittleEndian.Uint64(b.Payload[0:]))
		id := int64(binary.LittleEndian.Uint64(b.Payload[8:]))
		d := delayed{body: kit.BodyOf(t, b.Payload[binlog.DelayPrefixLen:]), trigger: trigger}
		if b.Cmd == binlog.CmdDelay {
			delays[id] = d
			continue
		}
		if prev, dup := applied[id]; dup {
			t.Fatalf("delay %d (%s) applied twice: eventIds %d and %d", id, d.body, prev, b.EventID)
		}
		if delays[id] != d {
			t.Fatalf("delay-apply %d names delay %d with %+v, the delay holds %+v", b.EventID, id, d, delays[id])
		}
		applied[id] = b.EventID
		applyOf[b.EventID] = d
	}
	if len(delays) != n {
		t.Fatalf("%d delay blocks in the binlog, want %d", len(delays), n)
	}
	if complete && len(applied) != n {
		t.Fatalf("%d of %d delays applied", len(applied), n)
	}
	prev := int64(0)
	bodies := map[string]bool{}
	for _, blk := range s.Topics["dk"] {
		if blk.EventID <= prev {
			t.Fatalf("topic eventId %d after %d", blk.EventID, prev)
		}
		prev = blk.EventID
		d, ok := applyOf[blk.EventID]
		body := kit.BodyOf(t, blk.Record)
		if !ok || d.body != body {
			t.Fatalf("topic message %d %q is not the delay-apply's %+v", blk.EventID, body, d)
		}
		if blk.Ts < d.trigger {
			t.Fatalf("message %q stored at %d, before its trigger time %d", body, blk.Ts, d.trigger)
		}
		if bodies[body] {
			t.Fatalf("message %q twice in the topic", body)
		}
		bodies[body] = true
	}
	if len(bodies) != len(applied) {
		t.Fatalf("%d delay-applies in the binlog, %d messages in the topic", len(applied), len(bodies))
	}
	return len(applied)
}

// inFlight inspects a killed server's data before the restart: whether a
// delay-apply block is in the binlog while its delay key is still in meta,
// i.e. the kill came between the two halves of one apply (recovery must
// then drop the key, not fire it again). A torn binlog tail ends the scan.
func inFlight(t *testing.T, dataDir string) bool {
	t.Helper()
	l, err := segment.Open(segment.Options{Dir: filepath.Join(dataDir, "binlog"), Decode: kit.BinlogDecode})
	if err != nil {
		t.Fatal(err)
	}
	var keys [][]byte
	_, err = l.Scan(segment.Position{FileID: l.Files()[0]}, func(_ segment.Position, _, _ int64, raw []byte) error {
		b, _, err := binlog.DecodeBlock(raw)
		if err != nil {
			return err
		}
		if b.Cmd == binlog.CmdDelayApply {
			k, err := meta.DelayKeyFromValue(b.Payload, b.Topic)
			if err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return nil
	})
	var ce *segment.CorruptError
	if err != nil && !(errors.As(err, &ce) && ce.Torn()) {
		t.Fatalf("scan binlog after kill: %v", err)
	}
	ms, err := meta.Open(meta.Options{Dir: filepath.Join(dataDir, "meta"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open meta after kill: %v", err)
	}
	defer ms.Close()
	for _, k := range keys[max(0, len(keys)-200):] {
		ok, err := ms.HasDelay(k)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return true
		}
	}
	return false
}

// waitGrowth returns as soon as the log files in dir hold more bytes than
// when it was called.
func waitGrowth(t *testing.T, dir string, timeout time.Duration) {
	t.Helper()
	size := func() (n int64) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".log") {
				n += info.Size()
			}
		}
		return n
	}
	start := size()
	if !smsstest.Poll(timeout, func() bool { return size() > start }) {
		t.Fatalf("the topic did not grow within %v", timeout)
	}
}
