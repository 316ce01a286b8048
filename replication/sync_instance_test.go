package replication

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
)

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSyncReplacedConnection: of two connections with one instance id only
// the one whose stream started later counts, with the position of its
// hello (never the older one's confirmations, before or after), whichever
// hello is read first; a replaced connection that still confirms after
// sharedIDGrace is two live slaves sharing an id (a copied data
// directory): logged once as a warning, still not counted.
func TestSyncReplacedConnection(t *testing.T) {
	cases := []struct {
		name       string
		oldFirst   bool  // the older stream's hello is read first
		oldPos     int64 // the older connection's confirmed position
		newPos     int64 // the newer connection's hello
		oldLater   int64 // a confirmation the older one sends after (0: none)
		inGrace    bool  // ... within sharedIDGrace of its replacement
		wantWarn   bool
		wantNewPos int64
		// then the newer connection ends and the older one confirms
		// again: it counts again (live: it confirms) when it was
		// replaced long enough ago, from the position it confirms then.
		thenNewEnds bool
	}{
		{name: "restart, new hello lower", oldFirst: true, oldPos: 10, newPos: 6, wantNewPos: 6},
		{name: "restart, new hello equal", oldFirst: true, oldPos: 10, newPos: 10, wantNewPos: 10},
		{name: "copied directory: old keeps confirming", oldFirst: true, oldPos: 10, newPos: 6, oldLater: 12, wantWarn: true, wantNewPos: 6},
		{name: "restart, a late confirmation of the old connection", oldFirst: true, oldPos: 10, newPos: 10, oldLater: 11, inGrace: true, wantNewPos: 10},
		{name: "older hello read last", oldFirst: false, oldPos: 10, newPos: 6, wantNewPos: 6},
		{name: "older hello read last, then confirms", oldFirst: false, oldPos: 10, newPos: 6, oldLater: 12, wantWarn: true, wantNewPos: 6},
		{name: "copied directory, the copy leaves", oldFirst: true, oldPos: 10, newPos: 6, oldLater: 12, wantWarn: true, wantNewPos: 6, thenNewEnds: true},
		{name: "restart, the new connection ends, a late old confirmation", oldFirst: true, oldPos: 10, newPos: 10, oldLater: 11, inGrace: true, wantNewPos: 10, thenNewEnds: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs lockedBuffer
			tr, err := NewSyncTracker(SyncOptions{Slaves: 1, Timeout: 50 * time.Millisecond, LastEventID: func() int64 { return 0 },
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if !c.inGrace {
				tr.sharedGrace = 0
			}
			oldSeq, newSeq := tr.streams.Add(1), tr.streams.Add(1)
			var old, nw *SyncSlave
			if c.oldFirst {
				old = tr.register("old", oldSeq, hello(7, 1), nil)
				old.confirm(c.oldPos, false, 0, false)
				if got := tr.Confirmed(); got != c.oldPos {
					t.Fatalf("before the newer connection: confirmed %d, want %d", got, c.oldPos)
				}
				nw = tr.register("new", newSeq, hello(7, c.newPos), nil)
			} else {
				nw = tr.register("new", newSeq, hello(7, c.newPos), nil)
				old = tr.register("old", oldSeq, hello(7, c.oldPos), nil)
			}
			if c.oldLater > 0 {
				old.confirm(c.oldLater, false, 0, false)
				old.confirm(c.oldLater+1, false, 0, false)
			}
			in, slaves := tr.Info()
			if in.Confirming != 1 || in.Confirmed != c.wantNewPos {
				t.Fatalf("info %+v, want 1 confirming at %d", in, c.wantNewPos)
			}
			if _, ok := slaves["new"]; !ok || len(slaves) != 1 {
				t.Fatalf("slaves %+v, want only the newer connection", slaves)
			}
			if err := tr.Wait(context.Background(), c.wantNewPos+1); !errors.Is(err, ErrNotConfirmed) {
				t.Fatalf("a write only the older connection confirmed: %v", err)
			}
			warns := strings.Count(logs.String(), "two live slaves send the same instance id")
			if want := map[bool]int{false: 0, true: 1}[c.wantWarn]; warns != want {
				t.Fatalf("%d shared-id warnings, want %d; log:\n%s", warns, want, logs.String())
			}
			if !strings.Contains(logs.String(), "instanceId=07") {
				t.Fatalf("the replacement is not logged with the id:\n%s", logs.String())
			}
			if !c.thenNewEnds {
				return
			}
			nw.remove()
			again := c.oldLater + 5
			old.confirm(again, false, 0, false)
			in, slaves = tr.Info()
			if c.inGrace {
				if in.Confirming != 0 || in.Confirmed != 0 {
					t.Fatalf("a late confirmation reinstated the old connection: %+v", in)
				}
				return
			}
			if _, ok := slaves["old"]; !ok || in.Confirming != 1 || in.Confirmed != again {
				t.Fatalf("the live older connection does not count again at %d: %+v %+v", again, in, slaves)
			}
		})
	}
}

// holdProxy forwards TCP connections to target. When the slave's side
// ends, the master's side is kept open and drained: the master does not
// learn that the slave is gone, as when a slave host dies or a network
// drops the FIN.
type holdProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	ups    []net.Conn
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.ups = append(p.ups, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); c.Close() }() // the master's side stays open
			go func() { io.Copy(c, up); c.Close(); io.Copy(io.Discard, up) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.ups {
			c.Close()
		}
	})
	return p
}

func (p *holdProxy) addr() string { return p.ln.Addr().String() }

// TestSyncRestartedSlaveCountsOnce (real TCP, real brokers): with
// syncSlaves 2, a slave that stops and starts again on its data directory
// while the master still holds its old connection (the master did not
// notice it went away) is counted once: a write that only this slave has
// is not confirmed by "two" slaves, its old and its new connection. The
// id comes from the data directory (broker.InstanceID), as cmd/smss passes
// it.
func TestSyncRestartedSlaveCountsOnce(t *testing.T) {
	m, ms, tr := syncMaster(t, 2, 300*time.Millisecond)
	ctx := context.Background()
	if _, err := m.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	proxy := startHoldProxy(t, ms.addr)
	adir := t.TempDir()
	startA := func() (*broker.Broker, *Slave, func() error) {
		b := openBroker(t, adir, true, nil)
		id, err := b.InstanceID()
		if err != nil {
			t.Fatal(err)
		}
		s, stop := runSlave(t, b, SlaveOptions{MasterAddr: proxy.addr(), AliveInterval: 200 * time.Millisecond, InstanceID: id})
		return b, s, stop
	}
	ab, a, stopA := startA()
	bb := openBroker(t, t.TempDir(), true, nil)
	defer bb.Close()
	_, stopB := runSlave(t, bb, SlaveOptions{MasterAddr: ms.addr, AliveInterval: 200 * time.Millisecond})
	smsstest.WaitFor(t, 10*time.Second, "both slaves confirming", func() bool { in, _ := tr.Info(); return in.Confirming == 2 })
	if err := tr.Wait(ctx, publish(t, m, "t", "both", 1)); err != nil {
		t.Fatalf("with both slaves: %v", err)
	}

	// Slave B goes away; a write reaches slave A only.
	stopB()
	smsstest.WaitFor(t, 10*time.Second, "B gone", func() bool { in, _ := tr.Info(); return in.Confirming == 1 })
	id := publish(t, m, "t", "only A", 1)
	if err := tr.Wait(ctx, id); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("one slave of two: %v", err)
	}
	smsstest.WaitFor(t, 10*time.Second, "A to confirm the write", func() bool {
		_, slaves := tr.Info()
		for _, s := range slaves {
			if s.Confirmed >= id {
				return true
			}
		}
		return false
	})
	if a.Status().LastEventID < id {
		t.Fatal("A confirmed what it does not have")
	}

	// A stops and starts again on its directory; the master still holds
	// A's old connection (through the proxy).
	if err := stopA(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("stop A: %v", err)
	}
	if err := ab.Close(); err != nil {
		t.Fatal(err)
	}
	addrs := func() map[string]bool {
		_, slaves := tr.Info()
		out := map[string]bool{}
		for a := range slaves {
			out[a] = true
		}
		return out
	}
	before := addrs()
	ab, _, _ = startA()
	defer ab.Close()
	smsstest.WaitFor(t, 10*time.Second, "A's new connection to confirm", func() bool {
		for a := range addrs() {
			if !before[a] {
				return true
			}
		}
		return false
	})
	if err := tr.Wait(ctx, id); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("a write only A has, after A restarted: %v (want %v)", err, ErrNotConfirmed)
	}
	if in, _ := tr.Info(); in.Confirming != 1 || in.Confirmed != 0 {
		t.Fatalf("the restarted slave counts twice: %+v", in)
	}
}
