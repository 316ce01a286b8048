package e2e

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// acked is one message the server acknowledged.
type acked struct {
	topic string
	body  string
}

// load runs publishers against addr until stop is closed or their
// connection breaks, and reports every acknowledged message.
type load struct {
	mu    sync.Mutex
	acked []acked
	count atomic.Int64
	wg    sync.WaitGroup
}

func (l *load) run(t *testing.T, addr string, topics []string, workers int, cycle int, stop <-chan struct{}) {
	for g := 0; g < workers; g++ {
		l.wg.Add(1)
		go func(g int) {
			defer l.wg.Done()
			c := dial(t, addr)
			topic := topics[g%len(topics)]
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				// Every third request is a batch of 1–20 records.
				n := 1
				if seq%3 == 2 {
					n = 1 + (seq/3)%20
				}
				recs := make([][]byte, n)
				bodies := make([]string, n)
				for i := range recs {
					bodies[i] = fmt.Sprintf("c%d-g%d-s%d-i%d-%s", cycle, g, seq, i, bytes.Repeat([]byte("x"), seq%50))
					recs[i] = record([][2]string{{"traceId", strconv.Itoa(seq)}}, bodies[i])
				}
				if err := c.pub(topic, recs...); err != nil {
					return // the server died: this request is not acknowledged
				}
				l.mu.Lock()
				for _, b := range bodies {
					l.acked = append(l.acked, acked{topic: topic, body: b})
				}
				l.mu.Unlock()
				l.count.Add(int64(n))
			}
		}(g)
	}
}

// verify checks the store against what was acknowledged: every
// acknowledged message exactly once in its topic file and in the binlog,
// eventIds strictly increasing everywhere.
func verify(t *testing.T, dataDir string, topics []string, acks []acked) {
	t.Helper()
	s := readStore(t, dataDir, topics)
	binBodies := map[string]int{}
	last := int64(0)
	for _, b := range s.binlog {
		if b.EventID <= last {
			t.Fatalf("binlog eventId %d after %d", b.EventID, last)
		}
		n, err := b.MessageCount()
		if err != nil {
			t.Fatal(err)
		}
		last = b.EventID + int64(n) - 1
		if b.Cmd != 1 {
			continue
		}
		recs := b.Payload
		for len(recs) > 0 {
			size := 8 + int(uint32(recs[0])|uint32(recs[1])<<8|uint32(recs[2])<<16|uint32(recs[3])<<24)
			binBodies[string(b.Topic)+"/"+bodyOf(t, recs[:size])]++
			recs = recs[size:]
		}
	}
	topicBodies := map[string]int{}
	for _, name := range topics {
		prev := int64(0)
		for _, blk := range s.topics[name] {
			if blk.EventID <= prev {
				t.Fatalf("topic %s eventId %d after %d", name, blk.EventID, prev)
			}
			prev = blk.EventID
			topicBodies[name+"/"+bodyOf(t, blk.Record)]++
		}
	}
	for key, n := range binBodies {
		if n != 1 {
			t.Fatalf("binlog holds %q %d times", key, n)
		}
		if topicBodies[key] != 1 {
			t.Fatalf("binlog message %q is %d times in its topic file", key, topicBodies[key])
		}
	}
	for key, n := range topicBodies {
		if n != 1 || binBodies[key] != 1 {
			t.Fatalf("topic message %q: %d times in topic, %d in binlog", key, n, binBodies[key])
		}
	}
	for _, a := range acks {
		if binBodies[a.topic+"/"+a.body] != 1 {
			t.Fatalf("acknowledged message %s/%s lost", a.topic, a.body)
		}
	}
}

func bodyOf(t *testing.T, rec []byte) string {
	t.Helper()
	r, _, err := parseRecord(rec)
	if err != nil {
		t.Fatalf("stored record: %v", err)
	}
	return string(r)
}

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
	writeConfig(t, dir, "  flushLevel: 1\n  maxLogSize: 65536\n")
	topics := []string{"t0", "t1", "t2", "t3"}
	p := start(t, dir)
	c := dial(t, p.addr)
	for _, name := range topics {
		if err := c.create(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	var all []acked
	repaired := 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for cycle := 0; cycle < cycles; cycle++ {
		l := &load{}
		stop := make(chan struct{})
		l.run(t, p.addr, topics, 16, cycle, stop)
		// Kill at a random moment once some writes were acknowledged.
		target := int64(50 + rng.IntN(2000))
		deadline := time.Now().Add(20 * time.Second)
		for l.count.Load() < target && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if l.count.Load() == 0 {
			t.Fatalf("cycle %d: no publish acknowledged\n%s", cycle, p.out.String())
		}
		p.kill()
		close(stop)
		l.wg.Wait()
		all = append(all, l.acked...)
		p = start(t, dir)
		verify(t, dir+"/data", topics, all)
		out := p.out.String()
		if strings.Contains(out, "truncating") || repairRe.MatchString(out) {
			repaired++
		}
		if !bytes.Contains([]byte(p.out.String()), []byte("recovery finished")) {
			t.Fatalf("cycle %d: no recovery line", cycle)
		}
	}
	t.Logf("%d cycles, %d acknowledged messages verified, %d restarts repaired torn or missing data", cycles, len(all), repaired)
	p.stop()
	verify(t, dir+"/data", topics, all)
	if _, err := os.Stat(dir + "/data/binlog"); err != nil {
		t.Fatal(err)
	}
}

// TestSigtermUnderLoad stops a loaded server with SIGTERM: it must exit
// cleanly and keep every acknowledged message.
func TestSigtermUnderLoad(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "  flushLevel: 1\n")
	topics := []string{"a", "b"}
	p := start(t, dir)
	c := dial(t, p.addr)
	for _, name := range topics {
		if err := c.create(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	l := &load{}
	stop := make(chan struct{})
	l.run(t, p.addr, topics, 16, 0, stop)
	deadline := time.Now().Add(20 * time.Second)
	for l.count.Load() < 2000 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	p.stop()
	close(stop)
	l.wg.Wait()
	verify(t, dir+"/data", topics, l.acked)
	p = start(t, dir)
	verify(t, dir+"/data", topics, l.acked)
	p.stop()
}
