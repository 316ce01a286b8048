package replication

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// Read-committed delivery on real processes (issue 32): a master with
// replication.syncSlaves 1 and two slaves, each behind a proxy that can
// drop what the slave sends (its confirmations) while the master's stream
// still reaches it. Subscribers on all three nodes.

// muteProxy forwards TCP connections to target; while muted, bytes from
// the client side (a slave's confirmations) are read and dropped, so the
// slave applies what the master streams but the master never learns it.
type muteProxy struct {
	ln     net.Listener
	target string
	muted  atomic.Bool
}

func startMuteProxy(t *testing.T, target string) *muteProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &muteProxy{ln: ln, target: target}
	var mu sync.Mutex
	var conns []net.Conn
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
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 && !p.muted.Load() {
						if _, werr := up.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				up.Close()
				c.Close()
			}()
			go func() { io.Copy(c, up); up.Close(); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return p
}

func (p *muteProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// TestReadCommittedRefusedInvisible: writes the slaves hold but did not
// confirm to the master are refused, and no subscriber on the master or
// on either slave is handed them, although both slaves' binlogs hold
// them; once a slave confirms again (its link back, or the slave
// restarted) they are delivered to every subscriber, once each.
func TestReadCommittedRefusedInvisible(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
	}{{"link back", false}, {"slave restarted", true}} {
		t.Run(tc.name, func(t *testing.T) { readCommittedRefused(t, tc.restart) })
	}
}

func readCommittedRefused(t *testing.T, restart bool) {
	mdir := t.TempDir()
	kit.ReplConfig(t, mdir, 0, kit.SemiSyncConfig("fail"))
	master := kit.StartArgs(t, mdir)
	madm := kit.AdminAddr(t, master)
	var slaves []*kit.Proc
	var proxies []*muteProxy
	for range 2 {
		sdir := t.TempDir()
		kit.ReplConfig(t, sdir, 0, "replication:\n  syncSlaves: 1\n"+kit.AdminConfig(kit.AdminToken))
		p := startMuteProxy(t, master.Addr)
		proxies = append(proxies, p)
		slaves = append(slaves, kit.StartReplSlave(t, sdir, p.port(), 0))
	}
	kit.WaitConfirming(t, madm, 2)
	pub := kit.Dial(t, master.Addr)
	if err := pub.Create("rc", 0); err != nil {
		t.Fatal(err)
	}
	subs := []*kit.LiveSub{kit.StartLiveSub(t, master.Addr, "rc", "master")}
	for i, s := range slaves {
		subs = append(subs, kit.StartLiveSub(t, s.Addr, "rc", fmt.Sprintf("slave%d", i)))
	}
	for i := range 5 {
		if err := pub.Pub("rc", kit.Record(nil, fmt.Sprintf("ok-%d", i))); err != nil {
			t.Fatalf("healthy write %d: %v", i, err)
		}
	}
	for _, s := range subs {
		if !smsstest.Poll(20*time.Second, func() bool { return s.Has("ok-4") }) {
			t.Fatalf("%s never got the confirmed writes (has %d)\n%s", s.Name, s.Count(), slaveLogs(slaves))
		}
	}

	// Both slaves muted: they still receive and apply every block.
	for _, p := range proxies {
		p.muted.Store(true)
	}
	var refused []string
	for i := range 5 {
		body := fmt.Sprintf("unconfirmed-%d", i)
		err := pub.Pub("rc", kit.Record(nil, body))
		var be *protocol.BizError
		if !errors.As(err, &be) || !strings.HasPrefix(be.Msg, "write not confirmed") {
			t.Fatalf("write %q with muted slaves: %v, want write not confirmed", body, err)
		}
		refused = append(refused, body)
	}
	last := refused[len(refused)-1]
	for i, s := range slaves {
		data := filepath.Join(s.Dir, "data")
		if !smsstest.Poll(20*time.Second, func() bool { return strings.Contains(string(kit.ReplBinlog(t, data)), last) }) {
			t.Fatalf("slave %d never applied the refused writes", i)
		}
	}
	// Every subscriber has read up to the commit point and waits for it:
	// each node says so (heldByCommit), so a refused write it could be
	// handed would have been handed by now.
	for i, p := range append([]*kit.Proc{master}, slaves...) {
		adm := kit.AdminAddr(t, p)
		if !smsstest.Poll(20*time.Second, func() bool {
			var r metrics.ReplicationInfo
			kit.AdminJSON(t, adm, "/api/replication", &r)
			return r.ReadCommitted && r.HeldByCommit >= 1
		}) {
			t.Fatalf("node %d: its subscriber never waited on the commit point", i)
		}
	}
	for _, s := range subs {
		for _, b := range refused {
			if s.Has(b) {
				t.Fatalf("%s was handed %q, a write refused as not confirmed (dirty read)", s.Name, b)
			}
		}
	}

	// One slave confirms again: the next write is confirmed, and with it
	// everything before; every subscriber gets the refused writes once.
	if restart {
		// The slave comes back from its own data directory; its
		// subscriber went with it, a new one reads it from the start.
		slaves[0].Kill()
		proxies[0].muted.Store(false)
		slaves[0] = kit.StartReplSlave(t, slaves[0].Dir, proxies[0].port(), 0)
		subs[1] = kit.StartLiveSub(t, slaves[0].Addr, "rc", "slave0-restarted")
	} else {
		proxies[0].muted.Store(false)
	}
	if !smsstest.Poll(20*time.Second, func() bool { return pub.Pub("rc", kit.Record(nil, "after")) == nil }) {
		t.Fatal("writes never confirmed again after the slave was unmuted")
	}
	for _, s := range subs {
		if !smsstest.Poll(20*time.Second, func() bool { return s.Has(last) && s.Has("after") }) {
			t.Fatalf("%s never got the writes confirmed after the slave came back (has %d)", s.Name, s.Count())
		}
		s.Mu.Lock()
		seen := map[string]int{}
		for _, g := range s.Got {
			seen[g]++
		}
		s.Mu.Unlock()
		for _, b := range refused {
			if seen[b] != 1 {
				t.Fatalf("%s got %q %d times", s.Name, b, seen[b])
			}
		}
		if s.Err != nil {
			t.Fatalf("%s: %v", s.Name, s.Err)
		}
	}
}

func slaveLogs(ps []*kit.Proc) string {
	var b strings.Builder
	for i, p := range ps {
		fmt.Fprintf(&b, "--- slave %d\n", i)
		for _, l := range strings.Split(p.Out.String(), "\n") {
			if strings.Contains(l, "replication") || strings.Contains(l, "WARN") || strings.Contains(l, "ERROR") {
				if !strings.Contains(l, "config.source") {
					b.WriteString(l + "\n")
				}
			}
		}
	}
	return b.String()
}
