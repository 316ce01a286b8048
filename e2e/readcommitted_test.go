package e2e

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

// liveSub is a subscriber that records every body it is handed.
type liveSub struct {
	name string
	mu   sync.Mutex
	got  []string
	err  error
}

func startLiveSub(t *testing.T, addr, topic, name string) *liveSub {
	t.Helper()
	s := &liveSub{name: name}
	// The topic may not have reached a slave yet: subscribe until the
	// first unit is not a refusal (an idle stream's first unit is an
	// alive within the alive interval).
	var c *client
	var first unit
	if !smsstest.Poll(20*time.Second, func() bool {
		c = dial(t, addr)
		if err := c.sub(topic, "rc-"+name, 0, 10, 5*time.Second); err != nil {
			return false
		}
		u, err := c.next(10 * time.Second)
		first = u
		return err == nil && u.code != protocol.StatusError
	}) {
		t.Fatalf("%s: cannot subscribe to %s at %s: %v", name, topic, addr, first)
	}
	s.add(first)
	if first.code == protocol.StatusOK {
		if err := c.ack(0); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		for {
			u, err := c.next(60 * time.Second)
			if err != nil {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
				return
			}
			if u.code != protocol.StatusOK {
				continue
			}
			s.add(u)
			if err := c.ack(0); err != nil {
				return
			}
		}
	}()
	return s
}

func (s *liveSub) add(u unit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range u.msgs {
		s.got = append(s.got, string(m.Record.Body))
	}
}

func (s *liveSub) has(body string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.got {
		if g == body {
			return true
		}
	}
	return false
}

func (s *liveSub) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

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
	replConfig(t, mdir, 0, semiSyncConfig("fail"))
	master := startArgs(t, mdir)
	madm := adminAddr(t, master)
	var slaves []*proc
	var proxies []*muteProxy
	for range 2 {
		sdir := t.TempDir()
		replConfig(t, sdir, 0, "replication:\n  syncSlaves: 1\n"+adminConfig(adminToken))
		p := startMuteProxy(t, master.addr)
		proxies = append(proxies, p)
		slaves = append(slaves, startReplSlave(t, sdir, p.port(), 0))
	}
	waitConfirming(t, madm, 2)
	pub := dial(t, master.addr)
	if err := pub.create("rc", 0); err != nil {
		t.Fatal(err)
	}
	subs := []*liveSub{startLiveSub(t, master.addr, "rc", "master")}
	for i, s := range slaves {
		subs = append(subs, startLiveSub(t, s.addr, "rc", fmt.Sprintf("slave%d", i)))
	}
	for i := range 5 {
		if err := pub.pub("rc", record(nil, fmt.Sprintf("ok-%d", i))); err != nil {
			t.Fatalf("healthy write %d: %v", i, err)
		}
	}
	for _, s := range subs {
		if !smsstest.Poll(20*time.Second, func() bool { return s.has("ok-4") }) {
			t.Fatalf("%s never got the confirmed writes (has %d)\n%s", s.name, s.count(), slaveLogs(slaves))
		}
	}

	// Both slaves muted: they still receive and apply every block.
	for _, p := range proxies {
		p.muted.Store(true)
	}
	var refused []string
	for i := range 5 {
		body := fmt.Sprintf("unconfirmed-%d", i)
		err := pub.pub("rc", record(nil, body))
		var be *protocol.BizError
		if !errors.As(err, &be) || !strings.HasPrefix(be.Msg, "write not confirmed") {
			t.Fatalf("write %q with muted slaves: %v, want write not confirmed", body, err)
		}
		refused = append(refused, body)
	}
	last := refused[len(refused)-1]
	for i, s := range slaves {
		data := filepath.Join(s.dir, "data")
		if !smsstest.Poll(20*time.Second, func() bool { return strings.Contains(string(replBinlog(t, data)), last) }) {
			t.Fatalf("slave %d never applied the refused writes", i)
		}
	}
	// Every subscriber has read up to the commit point and waits for it:
	// each node says so (heldByCommit), so a refused write it could be
	// handed would have been handed by now.
	for i, p := range append([]*proc{master}, slaves...) {
		adm := adminAddr(t, p)
		if !smsstest.Poll(20*time.Second, func() bool {
			var r metrics.ReplicationInfo
			adminJSON(t, adm, "/api/replication", &r)
			return r.ReadCommitted && r.HeldByCommit >= 1
		}) {
			t.Fatalf("node %d: its subscriber never waited on the commit point", i)
		}
	}
	for _, s := range subs {
		for _, b := range refused {
			if s.has(b) {
				t.Fatalf("%s was handed %q, a write refused as not confirmed (dirty read)", s.name, b)
			}
		}
	}

	// One slave confirms again: the next write is confirmed, and with it
	// everything before; every subscriber gets the refused writes once.
	if restart {
		// The slave comes back from its own data directory; its
		// subscriber went with it, a new one reads it from the start.
		slaves[0].kill()
		proxies[0].muted.Store(false)
		slaves[0] = startReplSlave(t, slaves[0].dir, proxies[0].port(), 0)
		subs[1] = startLiveSub(t, slaves[0].addr, "rc", "slave0-restarted")
	} else {
		proxies[0].muted.Store(false)
	}
	if !smsstest.Poll(20*time.Second, func() bool { return pub.pub("rc", record(nil, "after")) == nil }) {
		t.Fatal("writes never confirmed again after the slave was unmuted")
	}
	for _, s := range subs {
		if !smsstest.Poll(20*time.Second, func() bool { return s.has(last) && s.has("after") }) {
			t.Fatalf("%s never got the writes confirmed after the slave came back (has %d)", s.name, s.count())
		}
		s.mu.Lock()
		seen := map[string]int{}
		for _, g := range s.got {
			seen[g]++
		}
		s.mu.Unlock()
		for _, b := range refused {
			if seen[b] != 1 {
				t.Fatalf("%s got %q %d times", s.name, b, seen[b])
			}
		}
		if s.err != nil {
			t.Fatalf("%s: %v", s.name, s.err)
		}
	}
}

func slaveLogs(ps []*proc) string {
	var b strings.Builder
	for i, p := range ps {
		fmt.Fprintf(&b, "--- slave %d\n", i)
		for _, l := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(l, "replication") || strings.Contains(l, "WARN") || strings.Contains(l, "ERROR") {
				if !strings.Contains(l, "config.source") {
					b.WriteString(l + "\n")
				}
			}
		}
	}
	return b.String()
}
