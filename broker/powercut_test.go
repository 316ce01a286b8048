package broker

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/segment"
)

// powerFiles wraps the log files the writer appends to and remembers, per
// path, how much of each was fsynced: what a power cut keeps for certain.
// A gate stops all writes and truncations so that a consistent image of
// the disk can be taken while the broker runs.
type powerFiles struct {
	mu       sync.Mutex
	cond     *sync.Cond
	gated    bool
	inflight int
	synced   map[string]int64
}

func newPowerFiles() *powerFiles {
	p := &powerFiles{synced: map[string]int64{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

type powerFile struct {
	*os.File
	p    *powerFiles
	path string
}

func (p *powerFiles) open(path string, flag int, perm os.FileMode) (segment.File, error) {
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return nil, err
	}
	return &powerFile{File: f, p: p, path: path}, nil
}

// enter waits for the gate to open and counts a mutation in flight.
func (p *powerFiles) enter() {
	p.mu.Lock()
	for p.gated {
		p.cond.Wait()
	}
	p.inflight++
	p.mu.Unlock()
}

func (p *powerFiles) leave() {
	p.mu.Lock()
	p.inflight--
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (f *powerFile) Write(b []byte) (int, error) {
	f.p.enter()
	defer f.p.leave()
	return f.File.Write(b)
}

// Truncate cuts what counts as synced too: the cut bytes are gone either
// way.
func (f *powerFile) Truncate(size int64) error {
	f.p.enter()
	defer f.p.leave()
	if err := f.File.Truncate(size); err != nil {
		return err
	}
	f.p.mu.Lock()
	f.p.synced[f.path] = min(f.p.synced[f.path], size)
	f.p.mu.Unlock()
	return nil
}

// Sync records the size the file had when the fsync began: bytes written
// meanwhile may or may not be durable, so they count as not. Durability
// only grows: a background fsync that began before the writer's own one
// (at a roll) and ends after it must not lower the mark.
func (f *powerFile) Sync() error {
	st, err := f.File.Stat()
	if err != nil {
		return err
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.p.mu.Lock()
	f.p.synced[f.path] = max(f.p.synced[f.path], st.Size())
	f.p.mu.Unlock()
	return nil
}

// cut stops every write, waits for those in flight, and returns the synced
// sizes; release lets the writes go on.
func (p *powerFiles) cut() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gated = true
	for p.inflight > 0 {
		p.cond.Wait()
	}
	out := make(map[string]int64, len(p.synced))
	for k, v := range p.synced {
		out[k] = v
	}
	return out
}

func (p *powerFiles) release() {
	p.mu.Lock()
	p.gated = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// diskImage copies dir to dst as a power cut would leave it: each log file
// the writer appended to keeps its fsynced bytes and, when torn, a random
// part of the rest; files never fsynced keep only what torn allows. Index
// files and meta are copied as they are (indexes are never trusted; meta
// is badger's to recover, and here it is at least as new as the logs).
func diskImage(t *testing.T, dir, dst string, synced map[string]int64, rng *rand.Rand, torn bool) {
	t.Helper()
	copyDirKeep(t, dir, dst, func(path, rel string, size int64) int64 {
		if !strings.HasSuffix(path, ".log") || strings.HasPrefix(rel, "meta") {
			return size
		}
		keep := min(synced[path], size) // 0 if it was never fsynced
		if torn && size > keep {
			keep += rng.Int64N(size - keep + 1)
		}
		return keep
	})
}

type ackedMsg struct {
	topic string
	id    int64
	rec   []byte
}

// TestPowerCut takes disk images of a broker under publish load as a power
// cut would leave them (unsynced bytes gone, or partly written), and opens
// each: start-up must succeed, binlog and topic files must agree, every
// acknowledged message still there must have its bytes, and a new publish
// must get an eventId above every one the image holds. At flushLevel 2
// every publish acknowledged before the cut must be there; at flushLevel 1
// the last second or so may be lost.
func TestPowerCut(t *testing.T) {
	for _, level := range []int{1, 2} {
		t.Run(fmt.Sprintf("flushLevel%d", level), func(t *testing.T) { powerCuts(t, level) })
	}
}

func powerCuts(t *testing.T, level int) {
	dir := t.TempDir()
	pf := newPowerFiles()
	b := openTest(t, dir, func(o *Options) {
		o.FlushLevel = level
		o.OpenFile = pf.open
		o.MaxLogSize = 64 << 10 // cuts fall near file rolls too
		o.Logger = quietLog
	})
	ctx := context.Background()
	topics := []string{"a", "b", "c"}
	for _, name := range topics {
		if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var acked []ackedMsg
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				topic := topics[(g+i)%len(topics)]
				n := 1 + i%3
				var payload []byte
				var recs [][]byte
				for j := 0; j < n; j++ {
					r := rec(fmt.Sprintf("g%d-%d-%d-%s", g, i, j, strings.Repeat("x", i%40)))
					recs = append(recs, r)
					payload = append(payload, r...)
				}
				id, err := b.Publish(ctx, []byte(topic), payload, n)
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				mu.Lock()
				for j, r := range recs {
					acked = append(acked, ackedMsg{topic, id + int64(j), r})
				}
				mu.Unlock()
			}
		}()
	}
	defer func() {
		close(stop)
		pf.release()
		wg.Wait()
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	const cuts = 6
	for c := 0; c < cuts; c++ {
		target := (c + 1) * 400
		deadline := time.Now().Add(time.Minute)
		for {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= target {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cut %d: only %d of %d publishes acknowledged", c, n, target)
			}
			time.Sleep(time.Millisecond)
		}
		// Acks are taken before the synced sizes: each of them came
		// after its fsync was recorded.
		mu.Lock()
		before := append([]ackedMsg(nil), acked...)
		mu.Unlock()
		synced := pf.cut()
		img := filepath.Join(t.TempDir(), "image")
		torn := c%2 == 1
		diskImage(t, dir, img, synced, rng, torn)
		pf.release()
		t.Run(fmt.Sprintf("cut%d-torn=%v", c, torn), func(t *testing.T) {
			checkPowerCutImage(t, img, topics, before, level == 2)
		})
	}
}

func checkPowerCutImage(t *testing.T, img string, topics []string, acked []ackedMsg, keepsAll bool) {
	logs := &smsstest.SyncBuffer{}
	b, err := Open(Options{Dir: img, FlushLevel: 2, Logger: textLogger(logs)})
	if err != nil {
		t.Fatalf("start-up after the power cut: %v", err)
	}
	maxHeld := int64(0)
	stored := map[string]map[int64][]byte{}
	for _, name := range topics {
		ids, recs := readTopic(t, img, name)
		stored[name] = map[int64][]byte{}
		for i, id := range ids {
			stored[name][id] = recs[i]
			maxHeld = max(maxHeld, id)
		}
	}
	// A cut loses a tail of the binlog at most, and topics follow the
	// binlog: whatever the level, an acknowledged message is only lost
	// when every later one is too.
	horizon := int64(0) // last acknowledged eventId that survived
	for _, m := range acked {
		if _, ok := stored[m.topic][m.id]; ok {
			horizon = max(horizon, m.id)
		}
	}
	for _, m := range acked {
		got, ok := stored[m.topic][m.id]
		if !ok {
			if !keepsAll && m.id > horizon {
				continue
			}
			t.Fatalf("acknowledged message %d of topic %s lost (acknowledged messages up to %d survived); log:\n%s", m.id, m.topic, horizon, logs.String())
		}
		if !bytes.Equal(got, m.rec) {
			t.Fatalf("message %d of topic %s changed: %q, acknowledged %q", m.id, m.topic, got, m.rec)
		}
	}
	binIDs := binlogPubIDs(t, img)
	for _, name := range topics {
		ids, _ := readTopic(t, img, name)
		if !equalIDs(ids, binIDs[name]) {
			t.Fatalf("topic %s holds %d messages, the binlog %d", name, len(ids), len(binIDs[name]))
		}
	}
	id, err := b.Publish(context.Background(), []byte(topics[0]), rec("after the cut"), 1)
	if err != nil {
		t.Fatalf("publish after the power cut: %v", err)
	}
	if id <= maxHeld {
		t.Fatalf("new eventId %d reuses one the store holds (max %d)", id, maxHeld)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "replayed") || strings.Contains(line, "truncat") {
			t.Log(line)
		}
	}
}
