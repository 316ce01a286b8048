package clientapi

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

const qworkerBinary = "./e2e/clientapi/testdata/qworker"

// qworker is one worker process (e2e/clientapi/testdata/qworker).
type qworker struct {
	name string
	p    *smsstest.Proc
}

func startQWorker(t *testing.T, name, addrs, work string) *qworker {
	t.Helper()
	cmd := exec.Command(smsstest.Binary(t, qworkerBinary), "-addrs", addrs, "-topic", "jobs", "-group", "g",
		"-name", name, "-work", work, "-concurrency", "2")
	return &qworker{name: name, p: smsstest.StartProc(t, cmd, regexp.MustCompile(`(?m)^ready$`))}
}

// qevent is one line of a worker's output.
type qevent struct {
	worker  string
	kind    string // got, acked, gone
	id      int64
	attempt int
	at      int64 // unix ms
	body    string
}

func (w *qworker) events(t *testing.T) []qevent {
	t.Helper()
	var out []qevent
	for _, l := range strings.Split(w.p.Out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || (f[0] != "got" && f[0] != "acked" && f[0] != "gone") {
			continue
		}
		e := qevent{worker: w.name, kind: f[0]}
		e.id, _ = strconv.ParseInt(f[1], 10, 64)
		if f[0] == "got" {
			if len(f) < 5 {
				continue // a line cut by SIGKILL
			}
			e.attempt, _ = strconv.Atoi(f[2])
			e.at, _ = strconv.ParseInt(f[3], 10, 64)
			e.body = f[4]
		} else {
			e.at, _ = strconv.ParseInt(f[2], 10, 64)
		}
		out = append(out, e)
	}
	return out
}

func (w *qworker) count(t *testing.T, kind string) int {
	n := 0
	for _, e := range w.events(t) {
		if e.kind == kind {
			n++
		}
	}
	return n
}

func queueInfo(t *testing.T, addr string) protocol.QueueInfo {
	t.Helper()
	out, errOut, code := kit.Smssctl(t, addr, "queue", "info", "jobs", "g", "--json")
	var qi protocol.QueueInfo
	if code != 0 || json.Unmarshal([]byte(out), &qi) != nil {
		t.Fatalf("queue info on %s: code %d %q %q", addr, code, out, errOut)
	}
	return qi
}

// TestQueueWorkersSurviveKillsAndFailover: three worker processes share a
// queue group of a master with a semi-synchronous slave. One worker is
// SIGKILLed holding messages, the master is SIGKILLed and restarted, then
// SIGKILLed again and its slave promoted, while messages flow. Every
// message ends acknowledged or dead-lettered; an ack the server confirmed
// is never followed by a delivery of that message; what the dead worker
// held comes back no earlier than the ack wait; the live workers share the
// work; a poison message reaches the dead-letter topic after exactly
// max deliveries, with its headers.
func TestQueueWorkersSurviveKillsAndFailover(t *testing.T) {
	t.Parallel() // mostly waiting on its ack waits; owns its ports and directories
	const (
		ackWait = 2 * time.Second
		first   = 1000
		later   = 200
	)
	extra := "replication:\n  syncSlaves: 1\n  syncTimeoutMs: 2000\n  onSyncTimeout: fail\n" + kit.AdminConfig("")
	a := &kit.Fnode{Name: "A", Dir: t.TempDir(), Port: kit.FreePort(t)}
	b := &kit.Fnode{Name: "B", Dir: t.TempDir(), Port: kit.FreePort(t)}
	kit.ReplConfig(t, a.Dir, a.Port, extra)
	kit.ReplConfig(t, b.Dir, b.Port, extra)
	a.P = kit.StartArgs(t, a.Dir, "-role", "master")
	b.P = kit.StartReplSlave(t, b.Dir, a.Port, 0)
	c := kit.Dial(t, a.Addr())
	if err := c.Create("jobs", 0); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := kit.Smssctl(t, a.Addr(), "queue", "create", "jobs", "g", "--ack-wait", ackWait.String(),
		"--max-deliver", "3", "--dead-letter", "jobs-dead", "--from", "oldest"); code != 0 {
		t.Fatalf("queue create: %d %s %s", code, out, errOut)
	}
	for i := 0; i < first; i++ {
		if err := c.Pub("jobs", kit.Record(nil, fmt.Sprintf("m-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	c.C.Close()

	addrs := a.Addr() + "," + b.Addr()
	ws := []*qworker{startQWorker(t, "w1", addrs, "20ms"), startQWorker(t, "w2", addrs, "20ms"), startQWorker(t, "w3", addrs, "20ms")}
	acked := func() int {
		n := 0
		for _, w := range ws {
			n += w.count(t, "acked")
		}
		return n
	}

	// w1 dies holding messages.
	smsstest.WaitFor(t, 60*time.Second, "w1 holding messages after 50 acks", func() bool {
		got, done := ws[0].count(t, "got"), ws[0].count(t, "acked")+ws[0].count(t, "gone")
		return done >= 50 && got > done
	})
	ws[0].p.Kill()
	killed := map[int64]int64{} // held by w1 at its death: eventId → delivered at
	for _, e := range ws[0].events(t) {
		switch e.kind {
		case "got":
			killed[e.id] = e.at
		default:
			delete(killed, e.id)
		}
	}
	if len(killed) == 0 {
		t.Fatal("w1 held nothing when killed")
	}

	// The master is SIGKILLed and comes back.
	smsstest.WaitFor(t, 60*time.Second, "300 acks", func() bool { return acked() >= 300 })
	a.P.Kill()
	a.P = kit.StartArgs(t, a.Dir, "-role", "master")

	// Then it dies for good and its slave is promoted; the old master
	// rejoins as the new one's slave (syncSlaves 1 needs one).
	dump := func(what string) {
		t.Helper()
		msg := what + "\n"
		for _, w := range ws {
			msg += fmt.Sprintf("--- %s\n%s\n", w.name, kit.Tail(w.p.Out.String(), 1500))
		}
		t.Fatalf("%s--- A\n%s\n--- B\n%s", msg, kit.Tail(a.P.Out.String(), 3000), kit.Tail(b.P.Out.String(), 2000))
	}
	if !smsstest.Poll(60*time.Second, func() bool { return acked() >= 600 }) {
		dump("no 600 acks within 60 s")
	}
	interrupted := strings.Count(b.P.Out.String(), "replication interrupted")
	a.P.Kill()
	smsstest.WaitFor(t, 30*time.Second, "B noticing the master's death", func() bool {
		return strings.Count(b.P.Out.String(), "replication interrupted") > interrupted
	})
	if st := kit.AdminCommand(t, b.Addr(), protocol.CmdPromote, ""); st.Role != "master" {
		t.Fatalf("promote answered %+v", st)
	}
	a.P = kit.StartArgs(t, a.Dir, "-role", "slave", "-host", "127.0.0.1", "-port", strconv.Itoa(b.Port), "-event", "0", "-rejoin")

	c = kit.Dial(t, b.Addr())
	for i := first; i < first+later; i++ {
		if err := c.Pub("jobs", kit.Record(nil, fmt.Sprintf("m-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Pub("jobs", kit.Record(nil, "poison-1")); err != nil {
		t.Fatal(err)
	}
	total := int64(first + later + 1)
	var qi protocol.QueueInfo
	smsstest.WaitFor(t, 90*time.Second, "every message done", func() bool {
		qi = queueInfo(t, b.Addr())
		return qi.Pending == 0 && qi.Acked+qi.DeadLettered+qi.Dropped >= total
	})
	for _, w := range ws[1:] {
		w.p.Term()
	}
	if qi.Acked != total-1 || qi.DeadLettered != 1 || qi.Dropped != 0 {
		t.Fatalf("final group: %d acked, %d dead-lettered, %d dropped; want %d, 1, 0", qi.Acked, qi.DeadLettered, qi.Dropped, total-1)
	}

	// The group in status, the admin API and the metrics of the master,
	// and on no slave.
	if out, _, _ := kit.Smssctl(t, b.Addr(), "status"); !strings.Contains(out, "1 queue group(s)") {
		t.Errorf("status of the master: %q", out)
	}
	var api []protocol.QueueInfo
	kit.AdminJSON(t, kit.AdminAddr(t, b.P), "/api/queues", &api)
	if len(api) != 1 || api[0].Acked != total-1 || api[0].Topic != "jobs" || api[0].Config.Group != "g" {
		t.Errorf("/api/queues on the master: %+v", api)
	}
	kit.AdminJSON(t, kit.AdminAddr(t, a.P), "/api/queues", &api)
	if len(api) != 0 {
		t.Errorf("/api/queues on a slave: %+v", api)
	}
	_, prom := kit.AdminGet(t, kit.AdminAddr(t, b.P), "", "/metrics")
	for _, want := range []string{
		fmt.Sprintf(`smss_queue_acked_total{group="g",topic="jobs"} %d`, total-1),
		`smss_queue_dead_lettered_total{group="g",topic="jobs"} 1`,
		`smss_queue_pending_messages{group="g",topic="jobs"} 0`,
	} {
		if !strings.Contains(prom, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	perWorker := noDeliveryAfterConfirmedAck(t, ws)
	bodies := map[string]bool{}
	var poison []qevent
	for _, w := range ws {
		for _, e := range w.events(t) {
			if e.kind != "got" {
				continue
			}
			bodies[e.body] = true
			if strings.HasPrefix(e.body, "poison") {
				poison = append(poison, e)
			}
			if held, ok := killed[e.id]; ok && e.worker != "w1" && e.at < held+ackWait.Milliseconds()-50 {
				t.Errorf("eventId %d held by the killed w1 (delivered at %d) redelivered at %d, before the ack wait of %v", e.id, held, e.at, ackWait)
			}
		}
	}
	for i := 0; i < first+later; i++ {
		if !bodies[fmt.Sprintf("m-%d", i)] {
			t.Errorf("m-%d never delivered", i)
		}
	}
	for _, w := range ws[1:] {
		if perWorker[w.name] < int(total)/5 {
			t.Errorf("%s handled %d of %d messages: work not shared (%v)", w.name, perWorker[w.name], total, perWorker)
		}
	}
	if len(poison) != 3 {
		t.Fatalf("poison delivered %d times, want exactly 3 (max deliveries): %+v", len(poison), poison)
	}
	// Two deliveries within one ms may be listed in either order.
	sort.Slice(poison, func(i, j int) bool { return poison[i].attempt < poison[j].attempt })
	for i, e := range poison {
		if e.attempt != i+1 {
			t.Errorf("poison deliveries carried attempts %+v, want 1, 2, 3", poison)
			break
		}
	}
	// The dead letter, on the new master, with its headers.
	dead := kit.ReadStore(t, b.Data(), []string{"jobs-dead"}).Topics["jobs-dead"]
	if len(dead) != 1 {
		t.Fatalf("%d messages in the dead-letter topic, want 1", len(dead))
	}
	r, _, err := protocol.ParseRecord(dead[0].Record)
	if err != nil {
		t.Fatal(err)
	}
	hs := map[string]string{}
	for _, h := range r.Headers {
		hs[h.Key] = h.Value
	}
	want := map[string]string{protocol.DeadHeaderTopic: "jobs", protocol.DeadHeaderGroup: "g",
		protocol.DeadHeaderEventID: strconv.FormatInt(poison[0].id, 10), protocol.DeadHeaderAttempts: "3",
		protocol.DeadHeaderReason: "maxDeliver"}
	for k, v := range want {
		if hs[k] != v {
			t.Errorf("dead letter header %s = %q, want %q (all: %v)", k, hs[k], v, hs)
		}
	}
	if string(r.Body) != "poison-1" {
		t.Errorf("dead letter body %q", r.Body)
	}
	t.Logf("%d messages: %d deliveries to w1 (killed holding %d), %v; the poison dead-lettered after 3",
		total, perWorker["w1"], len(killed), perWorker)
}

// noDeliveryAfterConfirmedAck checks the workers' lines: no ack confirmed
// twice, no delivery of a message after its ack was confirmed.
func noDeliveryAfterConfirmedAck(t *testing.T, ws []*qworker) map[string]int {
	t.Helper()
	var all []qevent
	for _, w := range ws {
		all = append(all, w.events(t)...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at < all[j].at })
	ackedAt := map[int64]int64{}
	per := map[string]int{}
	for _, e := range all {
		switch e.kind {
		case "acked":
			if _, dup := ackedAt[e.id]; dup {
				t.Errorf("eventId %d: two acks confirmed as done", e.id)
			}
			ackedAt[e.id] = e.at
		case "got":
			per[e.worker]++
			if at, ok := ackedAt[e.id]; ok && e.at > at {
				t.Errorf("eventId %d delivered to %s (attempt %d) at %d, after its ack was confirmed at %d", e.id, e.worker, e.attempt, e.at, at)
			}
		}
	}
	return per
}

// TestQueueWorkersFollowClusterFailover: workers given the three addresses
// of a -role auto cluster keep working through a SIGKILL of the master
// that nobody repairs by hand: the cluster elects another, the group's
// state is there, every message ends acknowledged and none whose ack was
// confirmed is delivered again.
func TestQueueWorkersFollowClusterFailover(t *testing.T) {
	t.Parallel() // waits on an election and an ack wait; owns its ports and directories
	const total = 600
	nodes := kit.StartClusterNodes(t, "replication:\n  syncSlaves: 1\n  syncTimeoutMs: 2000\n  onSyncTimeout: fail\n")
	master, epoch := kit.WaitClusterMaster(t, nodes, 0, 60*time.Second)
	// Refused until the cluster has a slave in sync.
	smsstest.WaitFor(t, 60*time.Second, "the topic and the group on the cluster's master", func() bool {
		_, _, code := kit.Smssctl(t, master.Addr(), "topic", "create", "jobs")
		_, _, code2 := kit.Smssctl(t, master.Addr(), "queue", "create", "jobs", "g", "--ack-wait", "2s", "--from", "oldest")
		return (code == 0 || code == 1) && code2 == 0
	})
	c := kit.Dial(t, master.Addr())
	for i := 0; i < total; i++ {
		if err := c.Pub("jobs", kit.Record(nil, fmt.Sprintf("m-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	c.C.Close()
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	ws := []*qworker{startQWorker(t, "w1", strings.Join(addrs, ","), "10ms"), startQWorker(t, "w2", strings.Join(addrs, ","), "10ms")}
	smsstest.WaitFor(t, 60*time.Second, "150 acks", func() bool { return ws[0].count(t, "acked")+ws[1].count(t, "acked") >= 150 })
	smsstest.WaitFor(t, 30*time.Second, "an eligible in-sync slave", func() bool { return kit.HasEligibleInSync(master.Addr()) })
	master.P.Kill()
	var rest []*kit.ClusterNode
	for _, n := range nodes {
		if n != master {
			rest = append(rest, n)
		}
	}
	next, _ := kit.WaitClusterMaster(t, rest, epoch, 30*time.Second)
	master.P = kit.StartArgs(t, master.Dir, "-role", "auto") // rejoins by itself
	var qi protocol.QueueInfo
	smsstest.WaitFor(t, 90*time.Second, "every message acknowledged on the new master", func() bool {
		out, _, code := kit.Smssctl(t, next.Addr(), "queue", "info", "jobs", "g", "--json")
		if code != 0 || json.Unmarshal([]byte(out), &qi) != nil {
			return false
		}
		return qi.Pending == 0 && qi.Acked >= total
	})
	for _, w := range ws {
		w.p.Term()
	}
	if qi.Acked != total || qi.DeadLettered != 0 || qi.Dropped != 0 {
		t.Fatalf("final group on %s: %+v", next.ID, qi)
	}
	per := noDeliveryAfterConfirmedAck(t, ws)
	t.Logf("%d messages through a master kill (%s → %s): deliveries %v", total, master.ID, next.ID, per)
}
