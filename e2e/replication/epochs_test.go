package replication

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	smss "github.com/smssmq/smss/client"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// statusEpochs is a node's status reply as this test reads it: its epoch
// history among the rest.
func statusEpochs(t *testing.T, addr string) protocol.NodeStatus {
	t.Helper()
	body, err := kit.Dial(t, addr).RoundTrip(kit.Must(protocol.AppendStatus(nil, nil)), protocol.ReplyJSON)
	if err != nil {
		t.Fatal(err)
	}
	var st protocol.NodeStatus
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// takeAll subscribes to topic at addr after eventId `after` and returns the
// messages handed out until want arrived or nothing came for 2 s (the
// test checks what did come).
func takeAll(t *testing.T, addr, topic, who string, after int64, want int) []protocol.SubMessage {
	t.Helper()
	c := kit.Dial(t, addr)
	if err := c.Sub(topic, who, after, 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var got []protocol.SubMessage
	for len(got) < want {
		u, err := c.NextData(2 * time.Second)
		if err != nil {
			break
		}
		if u.Code != protocol.StatusOK {
			t.Fatalf("subscription of %s at %s after %d: %v", who, addr, after, u)
		}
		got = append(got, u.Msgs...)
		if err := c.Ack(0); err != nil {
			t.Fatal(err)
		}
	}
	c.C.Close()
	return got
}

// leftBehind starts an asynchronous master a and its slave b, publishes
// 50 messages to topic ep that both hold (b's last eventId is aLast), cuts
// b off and publishes 30 more that only a holds.
func leftBehind(t *testing.T) (a, b *kit.Proc, aaddr, baddr string, aLast int64) {
	t.Helper()
	adir, bdir := t.TempDir(), t.TempDir()
	aport, bport := kit.FreePort(t), kit.FreePort(t)
	kit.ReplConfig(t, adir, aport, "")
	kit.ReplConfig(t, bdir, bport, "")
	a = kit.StartArgs(t, adir, "-role", "master")
	link := smsstest.NewProxy(t, "127.0.0.1:"+strconv.Itoa(aport))
	b = kit.StartReplSlave(t, bdir, link.Port(), 0)
	aaddr, baddr = "127.0.0.1:"+strconv.Itoa(aport), "127.0.0.1:"+strconv.Itoa(bport)
	ca := kit.Dial(t, aaddr)
	if err := ca.Create("ep", 0); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 50; i++ {
		if err := ca.Pub("ep", kit.Record(nil, fmt.Sprintf("old-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	aLast = statusEpochs(t, aaddr).LastEventID
	if !smsstest.Poll(20*time.Second, func() bool { return statusEpochs(t, baddr).LastEventID == aLast }) {
		t.Fatalf("the slave did not reach eventId %d", aLast)
	}
	link.Cut()
	for i := 51; i <= 80; i++ {
		if err := ca.Pub("ep", kit.Record(nil, fmt.Sprintf("old-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, aaddr, baddr, aLast
}

// TestPositionsAcrossChangedHistory: an asynchronous master hands a
// consumer 30 messages its slave never got, dies, and the slave is
// promoted by hand, then numbers its own writes over the same eventIds. A
// consumer resuming "after the last eventId it took" would skip the new
// master's writes; with the epoch the old master placed its position in
// and the new master's epoch history (status "epochs") it resumes at the
// end of the shared history and takes every message of the new one, once.
// A slave started from the new master adopts its history.
func TestPositionsAcrossChangedHistory(t *testing.T) {
	cdir, cport := t.TempDir(), kit.FreePort(t)
	kit.ReplConfig(t, cdir, cport, "")
	a, b, aaddr, baddr, aLast := leftBehind(t)
	// The consumer takes all 80 from the old master and notes where it is.
	took := takeAll(t, aaddr, "ep", "old", 0, 80)
	if len(took) != 80 {
		t.Fatalf("took %d of 80 from the old master", len(took))
	}
	last := took[len(took)-1].EventID
	hA := statusEpochs(t, aaddr).Epochs
	es := protocol.EpochStartOf(hA, last)
	pos := protocol.Position{EventID: last, Epoch: es.Epoch, Start: es.Start}

	failOverToLeftBehind(t, a, baddr)
	stB := statusEpochs(t, baddr)
	if len(stB.Epochs) == 0 || stB.Epochs[len(stB.Epochs)-1].Epoch != stB.Epoch || stB.Epochs[len(stB.Epochs)-1].Start != aLast+1 {
		t.Fatalf("the promoted slave's history %v (epoch %d): want its epoch to begin at %d", stB.Epochs, stB.Epoch, aLast+1)
	}
	point, ok := protocol.ResumePoint(stB.Epochs, pos)
	if ok || point != aLast {
		t.Fatalf("ResumePoint(%v, %+v) = %d, %v; want %d (the shared history's end), false", stB.Epochs, pos, point, ok, aLast)
	}
	// Resuming where the consumer was skips the new writes numbered at or
	// below it: it is handed only the last ones.
	after := 40 - int(last-aLast)
	if naive := takeAll(t, baddr, "ep", "naive", last, after); len(naive) != after || string(naive[0].Record.Body) == "new-01" {
		t.Fatalf("resuming after %d took %d messages: the test does not show the hole", last, len(naive))
	}
	got := takeAll(t, baddr, "ep", "checked", point, 40)
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, string(m.Record.Body))
	}
	var want []string
	for i := 1; i <= 40; i++ {
		want = append(want, fmt.Sprintf("new-%02d", i))
	}
	if !reflect.DeepEqual(bodies, want) {
		t.Fatalf("resumed at %d and took %v, want every new message once: %v", point, bodies, want)
	}

	// smssctl sub, given the position the way it prints it, does the same.
	out, stderr, code := kit.Smssctl(t, baddr, "sub", "ep", "--who", "cli", "--from", strconv.FormatInt(last, 10),
		"--epoch", fmt.Sprintf("%d:%d", pos.Epoch, pos.Start), "--count", "40")
	if code != 0 || !strings.Contains(stderr, fmt.Sprintf("resuming after %d", aLast)) {
		t.Fatalf("smssctl sub --epoch: rc %d\n%s", code, stderr)
	}
	for i := 1; i <= 40; i++ {
		if !strings.Contains(out, fmt.Sprintf("new-%02d", i)) {
			t.Fatalf("smssctl sub --epoch did not print new-%02d:\n%s", i, out)
		}
	}
	if !strings.Contains(stderr, fmt.Sprintf("--epoch %d:%d", stB.Epoch, aLast+1)) {
		t.Fatalf("smssctl sub does not print the position to resume with:\n%s", stderr)
	}

	// A new slave of the new master adopts its history.
	_, bportStr, _ := net.SplitHostPort(baddr)
	bport, _ := strconv.Atoi(bportStr)
	c := kit.StartReplSlave(t, cdir, bport, 0)
	defer c.Term()
	if !smsstest.Poll(20*time.Second, func() bool {
		return reflect.DeepEqual(statusEpochs(t, "127.0.0.1:"+strconv.Itoa(cport)).Epochs, stB.Epochs)
	}) {
		t.Fatalf("the new slave's history %v, want the master's %v", statusEpochs(t, "127.0.0.1:"+strconv.Itoa(cport)).Epochs, stB.Epochs)
	}
	b.Term()
}

// TestSubscriberAcrossChangedHistory: the same failover as
// TestPositionsAcrossChangedHistory with the Go client's Subscriber given
// both addresses: it takes the old master's 80 messages, the old master
// dies, and once the slave is promoted and writes 40 of its own the
// Subscriber, checking its position against the new master's epoch
// history, resumes at the end of the shared history (OnHistoryChange) and
// hands the handler every new message once.
func TestSubscriberAcrossChangedHistory(t *testing.T) {
	a, b, aaddr, baddr, aLast := leftBehind(t)
	defer b.Term()

	var mu sync.Mutex
	var bodies []string
	var changes []smss.HistoryChange
	sub, err := smss.NewSubscriber(aaddr, smss.SubscriberConfig{Topic: "ep", Who: "w", Addrs: []string{baddr},
		BatchSize: 10, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, IdleTimeout: 2 * time.Second,
		Handler: func(_ context.Context, batch []smss.Delivery) smss.AckAction {
			mu.Lock()
			defer mu.Unlock()
			for _, d := range batch {
				bodies = append(bodies, string(d.Body))
			}
			return smss.Ack
		},
		OnHistoryChange: func(ch smss.HistoryChange) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, ch)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- sub.Run(ctx) }()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(bodies)
	}
	if !smsstest.Poll(20*time.Second, func() bool { return count() == 80 }) {
		t.Fatalf("the subscriber took %d of the old master's 80", count())
	}
	if pos, ok := sub.Position(); !ok || pos.EventID != sub.LastAcked() {
		t.Fatalf("position %+v %v after 80 acknowledged (last acked %d)", pos, ok, sub.LastAcked())
	}
	failOverToLeftBehind(t, a, baddr)
	if !smsstest.Poll(30*time.Second, func() bool { return count() >= 120 }) {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the subscriber took %d messages, want 120; the last: %v", len(bodies), bodies[max(0, len(bodies)-5):])
	}
	cancel()
	<-runErr
	mu.Lock()
	defer mu.Unlock()
	var want []string
	for i := 1; i <= 80; i++ {
		want = append(want, fmt.Sprintf("old-%02d", i))
	}
	for i := 1; i <= 40; i++ {
		want = append(want, fmt.Sprintf("new-%02d", i))
	}
	if !reflect.DeepEqual(bodies, want) {
		t.Fatalf("the handler saw %v, want the old master's 80 then the new master's 40", bodies)
	}
	if len(changes) != 1 || changes[0].Addr != baddr || changes[0].ResumeAfter != aLast {
		t.Fatalf("history changes %+v, want one at %s resuming after %d", changes, baddr, aLast)
	}
}

// failOverToLeftBehind kills the master a, promotes the slave left behind
// at baddr once it has seen a go, and publishes new-01..new-40 to topic ep
// there: the new history's messages at eventIds the old one had used.
func failOverToLeftBehind(t *testing.T, a *kit.Proc, baddr string) {
	t.Helper()
	a.Kill()
	kit.WaitMasterGone(t, baddr)
	if _, stderr, code := kit.Smssctl(t, baddr, "promote"); code != 0 {
		t.Fatalf("promote: rc %d %s", code, stderr)
	}
	cb := kit.Dial(t, baddr)
	for i := 1; i <= 40; i++ {
		if err := cb.Pub("ep", kit.Record(nil, fmt.Sprintf("new-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
}
