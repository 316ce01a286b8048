package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// node is a scripted server on real TCP for what no released smss does yet
// (the status command, "write not confirmed") or what a real one cannot be
// made to do on cue (hang, drop a reply).
type node struct {
	f *fake
	// status is the status reply's JSON; "" answers like an original
	// server: 400 "don't support action", then close.
	status string
	// script answers successive pubs: replyOK, replyClose (read the
	// request, close without answering), replyHang (never answer) or a
	// 400 text. Pubs past the script get 200.
	script []string
	dead   atomic.Bool // record a pub, then close; close on any other request
	// hangStatus never answers status (a hung host whose kernel still
	// accepts connections).
	hangStatus bool

	mu   sync.Mutex
	pubs []string // the smss-msg-id of each pub or delay received ("" when none)
}

const (
	replyOK    = "200"
	replyClose = "close"
	replyHang  = "hang"
)

func startNode(t *testing.T, status string, script ...string) *node {
	t.Helper()
	n := &node{status: status, script: script}
	n.f = startFake(t, n.serve)
	return n
}

func masterStatus(epoch int) string {
	return fmt.Sprintf(`{"role":"master","epoch":%d,"lastEventId":7}`, epoch)
}

const slaveStatus = `{"role":"slave","epoch":1,"lastEventId":5,"master":"127.0.0.1:1"}`

func (n *node) addr() string { return n.f.addr() }

// setStatus changes the status reply, as a node's role changes.
func (n *node) setStatus(status string) {
	n.mu.Lock()
	n.status = status
	n.mu.Unlock()
}

func (n *node) ids() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.pubs...)
}

func (n *node) serve(c net.Conn, r *bufio.Reader) {
	for {
		raw, err := readRawRequestAny(r)
		if err != nil {
			return
		}
		var h [protocol.HeaderSize]byte
		copy(h[:], raw)
		hd := protocol.ParseHeader(&h)
		if n.dead.Load() && hd.Cmd != protocol.CmdPub && hd.Cmd != protocol.CmdDelay {
			return
		}
		switch hd.Cmd {
		case protocol.CmdStatus:
			if n.hangStatus {
				io.Copy(io.Discard, r)
				return
			}
			n.mu.Lock()
			status := n.status
			n.mu.Unlock()
			if status == "" {
				c.Write(protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg))
				return
			}
			out, _ := protocol.AppendReplyJSON(nil, []byte(status))
			c.Write(out)
		case protocol.CmdPub, protocol.CmdDelay:
			payload := raw[protocol.HeaderSize+int(hd.TopicLen)+int(hd.TraceLen):]
			if hd.Cmd == protocol.CmdDelay {
				payload = payload[8:] // the delay in ms precedes the records
			}
			rec, _, err := protocol.ParseRecord(payload)
			if err != nil {
				c.Write(protocol.AppendReplyError(nil, "bad record: "+err.Error()))
				continue
			}
			id := ""
			for _, kv := range rec.Headers {
				if kv.Key == MessageIDHeader {
					id = kv.Value
				}
			}
			n.mu.Lock()
			k := len(n.pubs)
			n.pubs = append(n.pubs, id)
			n.mu.Unlock()
			reply := replyOK
			if k < len(n.script) {
				reply = n.script[k]
			}
			if n.dead.Load() {
				reply = replyClose
			}
			switch reply {
			case replyOK:
				c.Write(protocol.AppendReplyOK(nil))
			case replyClose:
				return
			case replyHang:
				io.Copy(io.Discard, r) // until the client gives up
				return
			default:
				c.Write(protocol.AppendReplyError(nil, reply))
			}
		default:
			c.Write(protocol.AppendReplyOK(nil))
		}
	}
}

// readRawRequestAny is readRawRequest that also takes status (no body).
func readRawRequestAny(r *bufio.Reader) ([]byte, error) {
	b, err := r.Peek(1)
	if err != nil {
		return nil, err
	}
	if protocol.Command(b[0]) != protocol.CmdStatus {
		return readRawRequest(r)
	}
	var hb [protocol.HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return nil, err
	}
	h := protocol.ParseHeader(&hb)
	rest := make([]byte, int(h.TopicLen)+int(h.TraceLen))
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, err
	}
	return append(hb[:], rest...), nil
}

func nodeAddrs(ns ...*node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.addr()
	}
	return out
}

// TestDiscoveryTakesNewestMaster: with status available the client goes to
// the master with the highest epoch, skipping slaves and servers without
// status, and after that master fails it moves to the next one with the
// same message id.
func TestDiscoveryTakesNewestMaster(t *testing.T) {
	slave := startNode(t, slaveStatus, "just master can pub message")
	original := startNode(t, "", "just master can pub message")
	old := startNode(t, masterStatus(1))
	newest := startNode(t, masterStatus(2))
	c := dialT(t, "", Options{Addrs: nodeAddrs(slave, original, old, newest), HealthCheckInterval: -1,
		RetryBackoff: time.Millisecond})
	if err := c.Publish(ctxT(t, 10*time.Second), "t", NewMessage([]byte("a"))); err != nil {
		t.Fatal(err)
	}
	if got := c.Master(); got != newest.addr() {
		t.Fatalf("master %s, want the epoch-2 master %s", got, newest.addr())
	}
	for _, n := range []*node{slave, original, old} {
		if ids := n.ids(); len(ids) != 0 {
			t.Errorf("%s received pubs %q", n.addr(), ids)
		}
	}
	// The newest master dies with a request in flight: the retry goes to
	// the other master with the id the lost attempt had.
	newest.dead.Store(true)
	if err := c.Publish(ctxT(t, 10*time.Second), "t", NewMessage([]byte("b"))); err != nil {
		t.Fatal(err)
	}
	if got := c.Master(); got != old.addr() {
		t.Fatalf("master %s after the newest died, want %s", got, old.addr())
	}
	got, lost := old.ids(), newest.ids()
	if len(got) != 1 || len(lost) != 2 || got[0] != lost[1] || lost[0] == lost[1] || !isMessageID(got[0]) {
		t.Fatalf("newest master received %q, the old one %q: want the second call's id on both", lost, got)
	}
}

// TestOriginalServersTriedBySending: servers without status (original
// smss) are tried in order by sending the request; a slave's refusal moves
// the same request, id included, to the next, and the server that took it
// is remembered.
func TestOriginalServersTriedBySending(t *testing.T) {
	refuse := make([]string, 10)
	for i := range refuse {
		refuse[i] = "just master can pub message"
	}
	slave := startNode(t, "", refuse...)
	master := startNode(t, "")
	c := dialT(t, "", Options{Addrs: nodeAddrs(slave, master), HealthCheckInterval: -1, RetryBackoff: time.Millisecond})
	for i := range 3 {
		if err := c.Publish(ctxT(t, 10*time.Second), "t", NewMessage([]byte("m"))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	refused, took := slave.ids(), master.ids()
	if len(refused) != 1 || len(took) != 3 || refused[0] != took[0] || took[0] == took[1] {
		t.Fatalf("the slave refused %q, the master took %q: want the first call on both with one id, then only the master", refused, took)
	}
	if c.Master() != master.addr() {
		t.Fatalf("master %q", c.Master())
	}
}

// TestRetryPolicy drives one call against a scripted server and checks how
// often the request was sent and that every attempt carried the same id.
func TestRetryPolicy(t *testing.T) {
	const notConfirmed = "write not confirmed by 1 slave(s) within 2000 ms; it is stored on the master and may still be replicated"
	for _, tc := range []struct {
		name     string
		script   []string
		noIDs    bool
		attempts int
		wantErr  error // nil: success
	}{
		{"not confirmed, retried with the id", []string{notConfirmed}, false, 2, nil},
		{"not confirmed, ids off: returned", []string{notConfirmed}, true, 1, ErrWriteNotConfirmed},
		{"connection lost, retried with the id", []string{replyClose}, false, 2, nil},
		{"connection lost, ids off: returned", []string{replyClose}, true, 1, io.EOF},
		{"timeout, retried with the id", []string{replyHang}, false, 2, nil},
		{"other 400 not retried", []string{"topic not exist"}, false, 1, ErrTopicNotExist},
		{"slave refusal with one address not retried", []string{"just master can pub message"}, false, 1, ErrNotMaster},
		{"budget exhausted", []string{replyClose, replyClose, replyClose, replyClose}, false, 3, ErrRetriesExhausted},
	} {
		for _, delay := range []bool{false, true} {
			name := tc.name
			if delay {
				name = "delay: " + name
			}
			t.Run(name, func(t *testing.T) {
				n := startNode(t, "", tc.script...)
				c := dialT(t, n.addr(), Options{HealthCheckInterval: -1, DisableMessageIDs: tc.noIDs,
					MaxRetries: 2, RetryBackoff: time.Millisecond, AttemptTimeout: 300 * time.Millisecond})
				var err error
				if delay {
					err = c.PublishDelay(ctxT(t, 20*time.Second), "t", 2*time.Second, NewMessage([]byte("m")), NewMessage([]byte("n")))
				} else {
					err = c.Publish(ctxT(t, 20*time.Second), "t", NewMessage([]byte("m")))
				}
				switch {
				case tc.wantErr == nil && err != nil:
					t.Fatalf("publish: %v", err)
				case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
					t.Fatalf("publish: %v, want %v", err, tc.wantErr)
				}
				ids := n.ids()
				if len(ids) != tc.attempts {
					t.Fatalf("%d attempts (%q), want %d", len(ids), ids, tc.attempts)
				}
				for _, id := range ids {
					if tc.noIDs && id != "" || !tc.noIDs && (id != ids[0] || !isMessageID(id)) {
						t.Fatalf("attempt ids %q", ids)
					}
				}
			})
		}
	}
}

// TestExhaustedBudgetWrapsLastCause: the error after the last retry says
// so and still matches the last attempt's cause.
func TestExhaustedBudgetWrapsLastCause(t *testing.T) {
	n := startNode(t, "", replyClose, replyClose, replyClose, replyClose, "write not confirmed by 1 slave(s)")
	c := dialT(t, n.addr(), Options{HealthCheckInterval: -1, MaxRetries: 4, RetryBackoff: time.Millisecond})
	err := c.Publish(ctxT(t, 20*time.Second), "t", NewMessage([]byte("m")))
	if !errors.Is(err, ErrRetriesExhausted) || !errors.Is(err, ErrWriteNotConfirmed) || errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want retries exhausted wrapping the last cause (not confirmed) only", err)
	}
}

// TestCancelStopsRetries: cancelling the context ends a call that is
// waiting to retry at once, not after the backoff.
func TestCancelStopsRetries(t *testing.T) {
	script := make([]string, 100)
	for i := range script {
		script[i] = replyClose
	}
	n := startNode(t, "", script...)
	c := dialT(t, n.addr(), Options{HealthCheckInterval: -1, MaxRetries: 50, RetryBackoff: time.Minute, MaxRetryBackoff: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Publish(ctx, "t", NewMessage([]byte("m"))) }()
	smsstest.WaitFor(t, 10*time.Second, "the first attempt", func() bool { return len(n.ids()) >= 1 })
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("returned %v after cancel", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("publish did not return after cancel (waiting out the 30 s..1 min backoff)")
	}
	if k := len(n.ids()); k != 1 {
		t.Errorf("%d attempts", k)
	}
}

// clusterStatus is the status of a node of a cluster: its own role and
// epoch, and the view (cluster epoch, master, fenced) it applied.
func clusterStatus(role, node string, epoch, viewEpoch int, master, fenced string) string {
	return fmt.Sprintf(`{"role":%q,"epoch":%d,"lastEventId":7,"cluster":{"node":%q,"epoch":%d,"master":%q,"fenced":%q}}`,
		role, epoch, node, viewEpoch, master, fenced)
}

// TestDiscoveryTakesProvenMasterAtOnce: a cluster master whose own view
// names it master of its epoch, not fenced, is taken as soon as it
// answers; a node that never answers status costs nothing, however long
// the probe timeout.
func TestDiscoveryTakesProvenMasterAtOnce(t *testing.T) {
	hung := startNode(t, masterStatus(9))
	hung.hangStatus = true
	master := startNode(t, clusterStatus("master", "b", 3, 3, "b", ""))
	c := dialT(t, "", Options{Addrs: nodeAddrs(hung, master), HealthCheckInterval: -1, ProbeTimeout: 20 * time.Second})
	start := time.Now()
	if err := c.Publish(ctxT(t, 30*time.Second), "t", NewMessage([]byte("a"))); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("publish took %v: discovery waited for the hung node", d)
	}
	if c.Master() != master.addr() || len(master.ids()) != 1 || len(hung.ids()) != 0 {
		t.Fatalf("master %s, pubs %q / %q", c.Master(), master.ids(), hung.ids())
	}
}

// TestDiscoverySkipsStaleMaster: a master behind the epoch another node
// reports (its cluster view, or its own) is not taken, nor is a master
// that knows of a newer epoch than its own; a fenced master is not taken
// before the others answered.
func TestDiscoverySkipsStaleMaster(t *testing.T) {
	t.Run("newer view elsewhere", func(t *testing.T) {
		stale := startNode(t, masterStatus(2))
		slave := startNode(t, clusterStatus("slave", "c", 2, 3, "b", ""))
		master := startNode(t, clusterStatus("master", "b", 3, 3, "b", ""))
		c := dialT(t, "", Options{Addrs: nodeAddrs(stale, slave, master), HealthCheckInterval: -1})
		if err := c.Publish(ctxT(t, 10*time.Second), "t", NewMessage([]byte("a"))); err != nil {
			t.Fatal(err)
		}
		if c.Master() != master.addr() || len(stale.ids()) != 0 {
			t.Fatalf("master %s; the stale one got %q", c.Master(), stale.ids())
		}
	})
	t.Run("only a stale master reachable", func(t *testing.T) {
		stale := startNode(t, clusterStatus("master", "a", 2, 3, "b", "this node is not the cluster's master"))
		slave := startNode(t, clusterStatus("slave", "c", 3, 3, "b", ""))
		c := dialT(t, "", Options{Addrs: nodeAddrs(stale, slave), HealthCheckInterval: -1, MaxRetries: 1,
			RetryBackoff: time.Millisecond})
		err := c.Publish(ctxT(t, 10*time.Second), "t", NewMessage([]byte("a")))
		if !errors.Is(err, ErrNoMaster) || len(stale.ids()) != 0 {
			t.Fatalf("publish: %v (stale master got %q), want ErrNoMaster and nothing sent", err, stale.ids())
		}
	})
}

// TestFencedRefusalMovesToMaster: a master that answers "fenced: ..."
// makes the client look for the master again; the retry, with the same
// id, goes to the master that is current by then. Without a message id
// the refusal is returned (the write may be stored on the fenced node).
func TestFencedRefusalMovesToMaster(t *testing.T) {
	const fenced = "fenced: this node lost contact with the cluster's majority (its lease expired); a new master may be elected"
	for _, noIDs := range []bool{false, true} {
		t.Run(fmt.Sprintf("noIDs=%v", noIDs), func(t *testing.T) {
			old := startNode(t, masterStatus(4), fenced, fenced, fenced)
			newer := startNode(t, slaveStatus)
			c := dialT(t, "", Options{Addrs: nodeAddrs(old, newer), HealthCheckInterval: -1, DisableMessageIDs: noIDs,
				RetryBackoff: time.Millisecond})
			if err := c.Alive(ctxT(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			// The election happens: the refusing node learns of epoch 5.
			old.setStatus(clusterStatus("master", "a", 4, 5, "b", "this node is not the cluster's master"))
			newer.setStatus(clusterStatus("master", "b", 5, 5, "b", ""))
			err := c.Publish(ctxT(t, 10*time.Second), "t", NewMessage([]byte("a")))
			if noIDs {
				if !errors.Is(err, ErrFenced) || len(old.ids()) != 1 || len(newer.ids()) != 0 {
					t.Fatalf("publish: %v (pubs %q / %q), want ErrFenced after one attempt", err, old.ids(), newer.ids())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, refused := newer.ids(), old.ids()
			if c.Master() != newer.addr() || len(got) != 1 || len(refused) != 1 || got[0] != refused[0] {
				t.Fatalf("master %s, the fenced node got %q, the new master %q: want one attempt each, one id", c.Master(), refused, got)
			}
		})
	}
}

// TestDialDoesNotWaitForHungServer: with several addresses Dial connects
// to all at once and returns with the first open connection; one whose
// connection (TLS, login) never completes does not hold it up.
func TestDialDoesNotWaitForHungServer(t *testing.T) {
	live := startNode(t, masterStatus(1))
	const hung = "127.0.0.1:1"
	dialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == hung {
			<-ctx.Done() // a handshake that never completes
			return nil, ctx.Err()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	start := time.Now()
	c := dialT(t, "", Options{Addrs: []string{hung, live.addr()}, DialContext: dialer, DialTimeout: 20 * time.Second,
		HealthCheckInterval: -1})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Dial took %v with a hung first address", d)
	}
	if err := c.Publish(ctxT(t, 30*time.Second), "t", NewMessage([]byte("a"))); err != nil {
		t.Fatal(err)
	}
	if len(live.ids()) != 1 {
		t.Fatalf("pubs %q", live.ids())
	}
}
