package delay

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// clock is a test clock: the wall clock plus an offset the test moves, or
// a frozen time.
type clock struct{ off, frozen atomic.Int64 }

func (c *clock) Now() int64 {
	if f := c.frozen.Load(); f != 0 {
		return f
	}
	return time.Now().UnixMilli() + c.off.Load()
}

func (c *clock) Set(ms int64) { c.frozen.Store(ms) }

func rec(body string) []byte {
	r, err := protocol.AppendRecord(nil, protocol.Record{Body: []byte(body)})
	if err != nil {
		panic(err)
	}
	return r
}

func openBroker(t testing.TB, dir string, clk *clock) *broker.Broker {
	t.Helper()
	o := broker.Options{Dir: dir, FlushLevel: 1}
	if clk != nil {
		o.Now = clk.Now
	}
	b, err := broker.Open(o)
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	return b
}

// startScheduler runs a scheduler on b with the broker's hook installed
// and stops it at the end of the test (before the broker is closed by the
// caller's own cleanup order).
func startScheduler(t testing.TB, b *broker.Broker, opts Options) *Scheduler {
	t.Helper()
	s, err := New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	b.SetHooks(broker.Hooks{DelayStored: s.Notify})
	s.Start()
	t.Cleanup(func() { stopScheduler(t, s) })
	return s
}

func stopScheduler(t testing.TB, s *Scheduler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("stop scheduler: %v", err)
	}
}

func pending(t testing.TB, b *broker.Broker) int {
	t.Helper()
	p, err := b.ScanDelays(0, math.MaxInt64, math.MaxInt)
	if err != nil {
		t.Fatal(err)
	}
	return len(p.Due)
}

func decodeTopic(buf []byte) (int64, int64, int, error) {
	b, n, err := topicblock.DecodeBlock(buf)
	return b.EventID, b.EventID, n, err
}

func decodeBinlog(buf []byte) (int64, int64, int, error) {
	b, n, err := binlog.DecodeBlock(buf)
	return b.EventID, b.EventID, n, err
}

// message is one stored topic message.
type message struct {
	ID   int64
	Ts   int64
	Body string
}

// readTopic returns the messages in a topic's files (the broker may be
// open: only committed whole blocks are read).
func readTopic(t testing.TB, dir, name string) []message {
	t.Helper()
	l, err := segment.Open(segment.Options{Dir: topicblock.Dir(filepath.Join(dir, "topic"), []byte(name), 10), Decode: decodeTopic})
	if err != nil {
		t.Fatal(err)
	}
	var out []message
	_, err = l.Scan(segment.Position{}, func(_ segment.Position, _, _ int64, raw []byte) error {
		blk, _, err := topicblock.DecodeBlock(raw)
		if err != nil {
			return err
		}
		r, _, err := protocol.ParseRecord(blk.Record)
		if err != nil {
			return err
		}
		out = append(out, message{ID: blk.EventID, Ts: blk.Ts, Body: string(r.Body)})
		return nil
	})
	if err != nil {
		t.Fatalf("scan topic %s: %v", name, err)
	}
	return out
}

// binlogApplies returns the delay eventIds named by the delay-apply blocks
// of the binlog, in binlog order.
func binlogApplies(t testing.TB, dir string) []int64 {
	t.Helper()
	l, err := segment.Open(segment.Options{Dir: filepath.Join(dir, "binlog"), Decode: decodeBinlog})
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	_, err = l.Scan(segment.Position{}, func(_ segment.Position, _, _ int64, raw []byte) error {
		blk, _, err := binlog.DecodeBlock(raw)
		if err != nil {
			return err
		}
		if blk.Cmd == binlog.CmdDelayApply {
			_, id, _, err := meta.ParseDelayKey(must(meta.DelayKeyFromValue(blk.Payload, blk.Topic)))
			if err != nil {
				return err
			}
			out = append(out, id)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan binlog: %v", err)
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// exactlyOnce checks that the topic holds each of want exactly once and
// nothing else.
func exactlyOnce(t testing.TB, got []message, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range got {
		seen[m.Body]++
	}
	for _, w := range want {
		if seen[w] != 1 {
			t.Errorf("message %q published %d times, want once", w, seen[w])
		}
		delete(seen, w)
	}
	for body, n := range seen {
		t.Errorf("unexpected message %q (%d times)", body, n)
	}
}

// fireLog records OnFire calls.
type fireLog struct {
	mu    sync.Mutex
	fires []fired
}

type fired struct {
	e       meta.DelayEntry
	eventID int64
	at      int64
}

func (f *fireLog) OnFire(e meta.DelayEntry, eventID, at int64) {
	f.mu.Lock()
	f.fires = append(f.fires, fired{e: e, eventID: eventID, at: at})
	f.mu.Unlock()
}

func (f *fireLog) snapshot() []fired {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fired(nil), f.fires...)
}

// lateness summarizes fired-at minus trigger over fires, in ms.
func lateness(fires []fired) (p50, p99, maxLate, minLate int64) {
	if len(fires) == 0 {
		return
	}
	l := make([]int64, len(fires))
	for i, f := range fires {
		l[i] = f.at - f.e.TriggerTime
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[len(l)/2], l[(len(l)*99+99)/100-1], l[len(l)-1], l[0]
}

func body(i int) string { return fmt.Sprintf("d%05d", i) }
