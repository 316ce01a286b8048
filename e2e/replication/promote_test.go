package replication

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/admin"
	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// binlogBlocks decodes a binlog read with kit.ReplBinlog.
func binlogBlocks(t *testing.T, raw []byte) []binlog.Block {
	t.Helper()
	var out []binlog.Block
	for len(raw) > 0 {
		b, _, n, err := binlog.DecodeSpan(raw)
		if err != nil {
			t.Fatalf("decode binlog block at %d bytes from the end: %v", len(raw), err)
		}
		out = append(out, b)
		raw = raw[n:]
	}
	return out
}

// TestPromoteAndFollow is the online failover of issue 16 on real
// processes: a master with two slaves, a delayed message pending and a
// topic with a lifetime; the master dies; `smssctl promote` turns one slave
// into a master without a restart and `smssctl follow` re-points the
// other. The promoted node must behave as a master started as one: writes
// accepted with eventIds continuing the replicated ones, the pending delay
// published exactly once, the expired topic reaped, replica requests
// served, a higher epoch shown everywhere.
func TestPromoteAndFollow(t *testing.T) {
	t.Parallel() // long, mostly waiting on its faults; owns its ports and directories
	mdir, s1dir, s2dir, s3dir := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	mport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, "")
	kit.ReplConfig(t, s1dir, 0, kit.AdminConfig(kit.AdminToken))
	kit.ReplConfig(t, s2dir, 0, "")
	kit.ReplConfig(t, s3dir, 0, "")
	master := kit.StartArgs(t, mdir)
	c := kit.Dial(t, master.Addr)
	// The shortest lifetime allowed is 10 s: the topic expires after the
	// promotion, so only the promoted node's reaper can delete it.
	expireAt := time.Now().UnixMilli() + 11_000
	if err := c.Create("life", expireAt); err != nil {
		t.Fatal(err)
	}
	if err := c.Create("orders", 0); err != nil {
		t.Fatal(err)
	}
	kit.ReplPublish(t, master.Addr, []string{"orders"}, 100, "before")
	const delayed = "the-delayed-message"
	delayDue := time.Now().Add(4 * time.Second)
	if err := c.Delay("orders", 4000, kit.Record(nil, delayed)); err != nil {
		t.Fatal(err)
	}

	s1 := kit.StartReplSlave(t, s1dir, mport, 0)
	s2 := kit.StartReplSlave(t, s2dir, mport, 0)
	mdata, s1data, s2data := filepath.Join(mdir, "data"), filepath.Join(s1dir, "data"), filepath.Join(s2dir, "data")
	kit.WaitReplicated(t, mdata, s1data, s1, 30*time.Second)
	kit.WaitReplicated(t, mdata, s2data, s2, 30*time.Second)
	masterAddr := "127.0.0.1:" + strconv.Itoa(mport)
	st := kit.StatusOf(t, s1.Addr)
	if st.Role != "slave" || st.Master != masterAddr || st.Epoch != 0 {
		t.Fatalf("slave status before promotion %+v", st)
	}
	lastReplicated := st.LastEventID

	master.Kill()
	kit.WaitMasterGone(t, s1.Addr)
	if time.Now().After(delayDue) {
		t.Logf("the delay came due before the promotion (slow machine): it must fire right after it")
	}
	out, errOut, code := kit.Smssctl(t, s1.Addr, "promote")
	if code != 0 || !strings.Contains(out, "promoted to master, epoch 1") {
		t.Fatalf("smssctl promote: exit %d\n%s%s\n%s", code, out, errOut, kit.Tail(s1.Out.String(), 4000))
	}
	if _, errOut, code := kit.Smssctl(t, s1.Addr, "promote"); code != 1 || !strings.Contains(errOut, "already a master") {
		t.Fatalf("second promote: exit %d %s", code, errOut)
	}
	st = kit.StatusOf(t, s1.Addr)
	if st.Role != "master" || st.Epoch != 1 || st.Master != "" {
		t.Fatalf("status after promotion %+v", st)
	}

	// Writes are accepted and continue the eventIds.
	c1 := kit.Dial(t, s1.Addr)
	if err := c1.Pub("orders", kit.Record(nil, "after-promotion")); err != nil {
		t.Fatalf("publish on the promoted slave: %v", err)
	}
	kit.ReplPublish(t, s1.Addr, []string{"orders"}, 40, "after")

	// The other slave follows the new master from where it is.
	if out, errOut, code := kit.Smssctl(t, s2.Addr, "follow", s1.Addr); code != 0 || !strings.Contains(out, "now follows "+s1.Addr) {
		t.Fatalf("smssctl follow: exit %d\n%s%s", code, out, errOut)
	}
	if st := kit.StatusOf(t, s2.Addr); st.Role != "slave" || st.Master != s1.Addr {
		t.Fatalf("re-pointed slave's status %+v", st)
	}
	if _, errOut, code := kit.Smssctl(t, s1.Addr, "follow", s2.Addr); code != 1 || !strings.Contains(errOut, "-rejoin") {
		t.Fatalf("follow on a master: exit %d %s", code, errOut)
	}

	// The pending delay fires once, on the new master.
	if !smsstest.Poll(30*time.Second, func() bool {
		return countBody(t, s1.Addr, "orders", delayed) > 0
	}) {
		t.Fatalf("the pending delayed message was never published after the promotion\n%s", kit.Tail(s1.Out.String(), 4000))
	}
	// The expired topic is reaped by the new master.
	c1 = kit.Dial(t, s1.Addr)
	if !smsstest.Poll(time.Until(time.UnixMilli(expireAt))+30*time.Second, func() bool {
		_, err := c1.RoundTrip(kit.Must(protocol.AppendTopicInfo(nil, []byte("life"), nil)), protocol.ReplyJSON)
		return err != nil && strings.Contains(err.Error(), "topic not exist")
	}) {
		t.Fatalf("the expired topic was not reaped by the promoted master\n%s", kit.Tail(s1.Out.String(), 4000))
	}
	kit.ReplPublish(t, s1.Addr, []string{"orders"}, 20, "late")

	// A new slave replicates from the promoted node: it serves replica.
	s3 := kit.StartReplSlave(t, s3dir, kit.PortOf(t, s1.Addr), 0)
	kit.WaitReplicated(t, s1data, filepath.Join(s3dir, "data"), s3, 30*time.Second)
	// The re-pointed slave holds the new master's history, no gap, no
	// duplicate: its binlog is the new master's byte for byte.
	kit.WaitReplicated(t, s1data, s2data, s2, 30*time.Second)

	if n := countBody(t, s1.Addr, "orders", delayed); n != 1 {
		t.Fatalf("the delayed message was published %d times", n)
	}
	// eventIds: the new master's binlog continues the replicated prefix
	// without a gap, and holds one delay apply.
	blocks := binlogBlocks(t, kit.ReplBinlog(t, s1data))
	next, applies := int64(1), 0
	for _, b := range blocks {
		if b.EventID != next {
			t.Fatalf("binlog block eventId %d, want %d (cmd %d)", b.EventID, next, b.Cmd)
		}
		last, err := b.LastEventID()
		if err != nil {
			t.Fatal(err)
		}
		next = last + 1
		if b.Cmd == binlog.CmdDelayApply {
			applies++
		}
	}
	if applies != 1 || next-1 <= lastReplicated {
		t.Fatalf("%d delay applies, last eventId %d (replicated up to %d)", applies, next-1, lastReplicated)
	}

	// The epoch shows in /api/info and the metrics; the re-pointed slave
	// learned it from its new master.
	adm := kit.AdminAddr(t, s1)
	var info admin.Info
	kit.AdminJSON(t, adm, "/api/info", &info)
	if info.Role != "master" || info.Epoch != 1 {
		t.Fatalf("/api/info after promotion: role %s epoch %d", info.Role, info.Epoch)
	}
	kit.WaitMetric(t, adm, kit.Series("smss_promotion_epoch"), 1)
	kit.WaitMetric(t, adm, kit.Series("smss_is_master"), 1)
	if !smsstest.Poll(10*time.Second, func() bool { return kit.StatusOf(t, s2.Addr).Epoch == 1 }) {
		t.Fatalf("the re-pointed slave did not learn the new master's epoch: %+v", kit.StatusOf(t, s2.Addr))
	}
	for _, p := range []*kit.Proc{s1, s2, s3} {
		if strings.Contains(p.Out.String(), "REPLICATION STOPPED") || strings.Contains(p.Out.String(), "panic") {
			t.Fatalf("unexpected failure in %s:\n%s", p.Dir, kit.Tail(p.Out.String(), 4000))
		}
	}
	// Stopping the promoted node is clean (its master jobs stop too).
	s2.Term()
	s3.Term()
	s1.Term()
	if _, err := os.Stat(filepath.Join(s1data, "binlog")); err != nil {
		t.Fatal(err)
	}
}

// countBody counts the messages of topic whose record body is body.
func countBody(t *testing.T, addr, topic, body string) int {
	t.Helper()
	want := fmt.Sprintf("%x", kit.Record(nil, body))
	n := 0
	for _, m := range kit.SubscribeAll(t, addr, topic) {
		if strings.HasSuffix(m, ":"+want) {
			n++
		}
	}
	return n
}

// rawStatus asks addr's status over c (cmd 34).
func rawStatus(t *testing.T, c *kit.Client) kit.CtlStatus {
	t.Helper()
	body, err := c.RoundTrip(kit.Must(protocol.AppendStatus(nil, nil)), protocol.ReplyJSON)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var st kit.CtlStatus
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("status %q: %v", body, err)
	}
	return st
}

// A promotion while blocks stream in under load stops replication after a
// whole block: the promoted node's binlog is then a byte prefix of the old
// master's, made of whole blocks, and its own writes continue right after
// its last block.
func TestPromoteDuringReplication(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	mport := kit.FreePort(t)
	kit.ReplConfig(t, mdir, mport, "")
	kit.ReplConfig(t, sdir, 0, "")
	master := kit.StartArgs(t, mdir)
	if err := kit.Dial(t, master.Addr).Create("orders", 0); err != nil {
		t.Fatal(err)
	}
	slave := kit.StartReplSlave(t, sdir, mport, 0)

	pubs := []*kit.Client{kit.Dial(t, master.Addr), kit.Dial(t, master.Addr)}
	stop := make(chan struct{})
	errs := make(chan error, len(pubs))
	for g, pc := range pubs {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				recs := make([][]byte, 1+i%10)
				for j := range recs {
					recs[j] = kit.Record(nil, fmt.Sprintf("g%d-%d-%d-%s", g, i, j, strings.Repeat("x", i%200)))
				}
				if err := pc.Pub("orders", recs...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	sc := kit.Dial(t, slave.Addr)
	if !smsstest.Poll(30*time.Second, func() bool { return rawStatus(t, sc).LastEventID > 500 }) {
		t.Fatalf("the slave did not replicate under load: %+v", rawStatus(t, sc))
	}
	// A plain promote is refused while the master streams writes
	// (replication.promoteQuietMs); forced, it goes ahead.
	if body, err := sc.RoundTrip(kit.Must(protocol.AppendPromote(nil, nil)), protocol.ReplyJSON); err == nil ||
		!strings.Contains(err.Error(), "its master is still streaming writes") {
		t.Fatalf("promote under load without force: %s %v", body, err)
	}
	body, err := sc.RoundTrip(kit.Must(protocol.AppendPromoteForce(nil, nil)), protocol.ReplyJSON)
	if err != nil || !strings.HasPrefix(string(body), `{"role":"master","epoch":1,"warning":"its master is still streaming writes`) {
		t.Fatalf("forced promote under load: %s %v\n%s", body, err, kit.Tail(slave.Out.String(), 3000))
	}
	// The master took writes after the promotion too: the promoted node
	// must hold none of them (checked below by the prefix).
	close(stop)
	for range pubs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	sdata := filepath.Join(sdir, "data")
	promoted := kit.ReplBinlog(t, sdata)
	if m := kit.ReplBinlog(t, filepath.Join(mdir, "data")); !bytes.HasPrefix(m, promoted) || len(promoted) == 0 {
		t.Fatalf("the promoted binlog (%d bytes) is not a prefix of the old master's (%d bytes); common %d",
			len(promoted), len(m), kit.ReplCommon(m, promoted))
	}
	blocks := binlogBlocks(t, promoted) // whole blocks only, or it fails
	last, err := blocks[len(blocks)-1].LastEventID()
	if err != nil {
		t.Fatal(err)
	}
	if got := rawStatus(t, sc); got.LastEventID != last || got.Role != "master" {
		t.Fatalf("status %+v, binlog ends at %d", got, last)
	}
	if err := sc.Pub("orders", kit.Record(nil, "first-own-write")); err != nil {
		t.Fatal(err)
	}
	after := binlogBlocks(t, kit.ReplBinlog(t, sdata))
	if len(after) != len(blocks)+1 || after[len(blocks)].EventID != last+1 {
		t.Fatalf("%d blocks after the first own write (was %d); its eventId %d, want %d",
			len(after), len(blocks), after[len(after)-1].EventID, last+1)
	}
}
