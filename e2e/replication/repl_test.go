package replication

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

func binlogHas(t *testing.T, dataDir string, cmd uint8, topic string) bool {
	buf := kit.ReplBinlog(t, dataDir)
	for len(buf) > 0 {
		b, n, err := binlog.DecodeBlock(buf)
		if err != nil {
			return false // a block being written
		}
		if b.Cmd == cmd && string(b.Topic) == topic {
			return true
		}
		buf = buf[n:]
	}
	return false
}

// TestReplFullCopy: 100,000 messages plus creates, a delete, delayed
// messages and an expiring topic, half published before the slave starts
// and half while it follows; the slave's binlog ends byte-identical and
// subscribing on it yields the same messages with the same eventIds. The
// slave refuses writes and replica requests.
func TestReplFullCopy(t *testing.T) {
	t.Parallel() // long, mostly waiting on its faults; owns its ports and directories
	mdir, sdir := t.TempDir(), t.TempDir()
	mport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, "")
	kit.ReplConfig(t, sdir, 0, "")
	m := kit.StartArgs(t, mdir)
	c := kit.Dial(t, m.Addr)
	topics := []string{"t0", "t1", "t2"}
	for _, name := range append(topics, "gone", "delayed") {
		if err := c.Create(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create("short", time.Now().UnixMilli()+11000); err != nil {
		t.Fatal(err)
	}
	if err := c.Pub("short", kit.Record(nil, "dies with the topic")); err != nil {
		t.Fatal(err)
	}
	if err := c.Pub("gone", kit.Record(nil, "deleted")); err != nil {
		t.Fatal(err)
	}
	kit.ReplPublish(t, m.Addr, topics, 50000, "before")
	if err := c.Delay("delayed", 1500, append(kit.Record(nil, "late-1"), kit.Record(nil, "late-2")...)); err != nil {
		t.Fatal(err)
	}

	s := kit.StartReplSlave(t, sdir, mport, 0)
	kit.ReplPublish(t, m.Addr, topics, 50000, "live")
	if err := c.Del("gone"); err != nil {
		t.Fatal(err)
	}
	if !smsstest.Poll(30*time.Second, func() bool {
		return binlogHas(t, filepath.Join(mdir, "data"), binlog.CmdDelayApply, "delayed") &&
			binlogHas(t, filepath.Join(mdir, "data"), binlog.CmdDelete, "short")
	}) {
		t.Fatalf("the delayed message or the expiry did not happen on the master:\n%s", kit.Tail(m.Out.String(), 4000))
	}
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), s, 2*time.Minute)

	for _, name := range append(topics, "delayed") {
		mm, sm := kit.SubscribeAll(t, m.Addr, name), kit.SubscribeAll(t, s.Addr, name)
		if strings.Join(mm, ",") != strings.Join(sm, ",") {
			t.Fatalf("topic %s: master %d messages, slave %d", name, len(mm), len(sm))
		}
		if name == "delayed" && len(mm) != 2 {
			t.Fatalf("delayed topic holds %d messages", len(mm))
		}
	}
	sc := kit.Dial(t, s.Addr)
	for _, name := range []string{"gone", "short"} {
		if _, err := sc.RoundTrip(kit.Must(protocol.AppendTopicInfo(nil, []byte(name), nil)), protocol.ReplyJSON); kit.BizText(err) != "topic not exist" {
			t.Fatalf("info %s on the slave: %v", name, err)
		}
	}
	if err := sc.Pub("t0", kit.Record(nil, "x")); kit.BizText(err) != "just master can pub message" {
		t.Fatalf("pub on the slave: %v", err)
	}
	if err := sc.Create("new", 0); kit.BizText(err) != "just master can manage topic" {
		t.Fatalf("create on the slave: %v", err)
	}
	rc := kit.Dial(t, s.Addr)
	rc.C.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.C.Write(kit.Must(protocol.AppendReplica(nil, 0))); err != nil {
		t.Fatal(err)
	}
	if _, err := protocol.ReadReplicaFrame(rc.R, 1<<20); kit.BizText(err) != "don't support action" {
		t.Fatalf("replica from the slave (chaining): %v", err)
	}
	s.Term()
	m.Term()
	if mb, sb := kit.ReplBinlog(t, filepath.Join(mdir, "data")), kit.ReplBinlog(t, filepath.Join(sdir, "data")); string(mb) != string(sb) {
		t.Fatalf("binlogs differ after shutdown: master %d bytes, slave %d", len(mb), len(sb))
	}
}

// TestReplFaults kills the slave with SIGKILL 10 times and restarts the
// master 3 times (SIGTERM once, SIGKILL twice) at random moments under
// continuous publishing from 4 connections (-short: 3 and 1); at the end the slave is identical to the master
// and holds every acknowledged message exactly once.
func TestReplFaults(t *testing.T) {
	t.Parallel() // long, mostly waiting on its faults; owns its ports and directories
	mdir, sdir := t.TempDir(), t.TempDir()
	mport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, "")
	kit.ReplConfig(t, sdir, 0, "")
	topics := []string{"t0", "t1", "t2", "t3"}
	m := kit.StartArgs(t, mdir)
	c := kit.Dial(t, m.Addr)
	for _, name := range topics {
		if err := c.Create(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	s := kit.StartReplSlave(t, sdir, mport, 0)
	// The first kill comes after the slave replicated the creates: a slave
	// killed between its first-start topic sync and those creates stops
	// (see the replication package tests and the broker recovery note).
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), s, 30*time.Second)

	events := []string{"term-master", "kill-master", "kill-master"}
	slaveKills := 10
	if testing.Short() {
		events, slaveKills = events[1:2], 3
	}
	for i := 0; i < slaveKills; i++ {
		events = append(events, "kill-slave")
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	t.Logf("fault sequence: %v", events)

	var all []kit.Acked
	l := &kit.Load{}
	stop := make(chan struct{})
	l.Run(t, m.Addr, topics, 4, 0, stop)
	for i, ev := range events {
		target := l.Count.Load() + int64(200+rng.IntN(3000))
		if !smsstest.Poll(30*time.Second, func() bool { return l.Count.Load() >= target }) {
			t.Fatalf("event %d: publishing stalled at %d messages\nmaster:\n%s", i, l.Count.Load(), kit.Tail(m.Out.String(), 3000))
		}
		switch ev {
		case "kill-slave":
			s.Kill()
			s = kit.StartReplSlave(t, sdir, mport, 0)
		case "kill-master", "term-master":
			if ev == "kill-master" {
				m.Kill()
			} else {
				m.Term()
			}
			close(stop)
			l.Wg.Wait()
			all = append(all, l.Acked...)
			m = kit.StartArgs(t, mdir)
			l, stop = &kit.Load{}, make(chan struct{})
			l.Run(t, m.Addr, topics, 4, i+1, stop)
		}
	}
	close(stop)
	l.Wg.Wait()
	all = append(all, l.Acked...)
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), s, 2*time.Minute)
	kit.Verify(t, filepath.Join(sdir, "data"), topics, all)
	for _, name := range topics {
		mm, sm := kit.SubscribeAll(t, m.Addr, name), kit.SubscribeAll(t, s.Addr, name)
		if strings.Join(mm, ",") != strings.Join(sm, ",") {
			t.Fatalf("topic %s: master %d messages, slave %d", name, len(mm), len(sm))
		}
	}
	t.Logf("%d acknowledged messages on the slave after %d faults", len(all), len(events))
	s.Term()
	m.Term()
}

// TestReplSlaveBeforeMaster: a slave started while its master is down
// serves reads at once and replicates as soon as the master appears.
func TestReplSlaveBeforeMaster(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	mport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, "")
	kit.ReplConfig(t, sdir, 0, "")
	s := kit.StartReplSlave(t, sdir, mport, 0)
	sc := kit.Dial(t, s.Addr)
	if body, err := sc.RoundTrip(kit.Must(protocol.AppendList(nil, nil)), protocol.ReplyJSON); err != nil || len(body) != 0 {
		t.Fatalf("list on a slave without master: %q %v", body, err)
	}
	if !smsstest.Poll(20*time.Second, func() bool { return strings.Contains(s.Out.String(), "replication interrupted; retrying") }) {
		t.Fatalf("no failed connection logged:\n%s", s.Out.String())
	}
	m := kit.StartArgs(t, mdir)
	c := kit.Dial(t, m.Addr)
	if err := c.Create("t", 0); err != nil {
		t.Fatal(err)
	}
	kit.ReplPublish(t, m.Addr, []string{"t"}, 2000, "x")
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), s, time.Minute)
	if mm, sm := kit.SubscribeAll(t, m.Addr, "t"), kit.SubscribeAll(t, s.Addr, "t"); strings.Join(mm, ",") != strings.Join(sm, ",") || len(sm) != 2000 {
		t.Fatalf("master %d messages, slave %d", len(mm), len(sm))
	}
}

// TestReplPromoteSlave is the documented promotion procedure: after the
// master is lost, stop the slave and start its data directory as a master
// (no -role flag). It keeps everything replicated, continues the eventIds,
// fires the delayed messages the old master had pending, accepts writes,
// and a new slave can follow it.
func TestReplPromoteSlave(t *testing.T) {
	t.Parallel() // long, mostly waiting on its faults; owns its ports and directories
	mdir, sdir, s2dir := t.TempDir(), t.TempDir(), t.TempDir()
	mport, sport := kit.FreePort(t), kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, "")
	kit.ReplConfig(t, sdir, sport, "")
	kit.ReplConfig(t, s2dir, 0, "")
	m := kit.StartArgs(t, mdir)
	c := kit.Dial(t, m.Addr)
	if err := c.Create("t", 0); err != nil {
		t.Fatal(err)
	}
	s := kit.StartReplSlave(t, sdir, mport, 0)
	kit.ReplPublish(t, m.Addr, []string{"t"}, 1000, "old")
	// Due after the master is lost: the slave holds it, unscheduled.
	if err := c.Delay("t", 8000, kit.Record(nil, "pending")); err != nil {
		t.Fatal(err)
	}
	kit.WaitReplicated(t, filepath.Join(mdir, "data"), filepath.Join(sdir, "data"), s, time.Minute)
	before := kit.SubscribeAll(t, s.Addr, "t")
	m.Kill() // the master is lost
	if len(before) != 1000 {
		t.Fatalf("the slave holds %d messages before the promotion", len(before))
	}

	s.Term()
	p := kit.StartArgs(t, sdir) // promoted: same data, role master
	pc := kit.Dial(t, p.Addr)
	if err := pc.Pub("t", kit.Record(nil, "after promotion")); err != nil {
		t.Fatalf("pub on the promoted master: %v", err)
	}
	var got []string
	if !smsstest.Poll(20*time.Second, func() bool {
		got = kit.SubscribeAll(t, p.Addr, "t")
		return len(got) == len(before)+2
	}) {
		t.Fatalf("promoted master holds %d messages, want %d (+ the new one and the delayed one)", len(got), len(before)+2)
	}
	if strings.Join(got[:len(before)], ",") != strings.Join(before, ",") {
		t.Fatal("the promoted master lost or changed replicated messages")
	}
	s2 := kit.StartReplSlave(t, s2dir, sport, 0)
	kit.WaitReplicated(t, filepath.Join(sdir, "data"), filepath.Join(s2dir, "data"), s2, time.Minute)
	s2.Term()
	p.Term()
}
