package bridge

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// mirroredIDs lists the eventIds a JetStream stream holds, in order.
func mirroredIDs(t *testing.T, url, stream string) []int64 {
	var ids []int64
	for _, g := range readNATS(t, url, stream) {
		ids = append(ids, g.EventID)
	}
	return ids
}

// TestHeldAtCommitPoint: against a version 3 master (read-committed
// delivery) the bridge says a reader's hello, mirrors only the blocks at
// or below the commit point the master's commit frames carry, and holds
// the rest in memory; its safe position never passes what it mirrored,
// so a restarted bridge reads a held block again and mirrors it once
// the point passes it. Over real TCP into an in-process JetStream.
func TestHeldAtCommitPoint(t *testing.T) {
	h := newHistory()
	h.create("orders")
	var ids []int64
	for i := range 6 {
		ids = append(ids, h.pub("orders", rec(fmt.Sprint("m", i))))
	}
	m := startFakeMaster(t, h.blocks)
	m.v3, m.epoch = true, 3
	m.setCommit(ids[1]) // m0 and m1 were confirmed, m2..m5 were not
	cfg := testConfig(m.addr())
	newTarget, _ := natsKind().setup(t, &cfg)
	b, stop := runBridge(t, cfg, newTarget())
	smsstest.WaitFor(t, 10*time.Second, "every block received, m0 and m1 mirrored", func() bool {
		s := b.Stats()
		return s.Safe >= ids[1] && s.CommitPoint == ids[1] && s.Received == lastID(h)
	})
	if got := mirroredIDs(t, cfg.NATS.URL, cfg.NATS.Stream); !slices.Equal(got, ids[:2]) {
		t.Fatalf("the stream holds eventIds %v, above the commit point %d; want %v", got, ids[1], ids[:2])
	}
	if s := b.Stats(); s.HeldBlocks != 4 || s.HeldBytes == 0 || s.Safe != ids[1] {
		t.Fatalf("stats %+v, want m2..m5 held (4 blocks) and safe %d", s, ids[1])
	}
	want := protocol.AppendConfirm(nil, protocol.Confirm{Kind: protocol.ConfirmHello, Reader: true})
	want = protocol.AppendConfirm(want, protocol.Confirm{Kind: protocol.ConfirmEpoch, EventID: 3})
	if got := m.received(); !bytes.Equal(got, want) {
		t.Fatalf("the bridge sent % x after its replica request, want a reader's hello and epoch 3: % x", got, want)
	}

	m.setCommit(ids[3])
	smsstest.WaitFor(t, 10*time.Second, "m2 and m3 released", func() bool {
		s := b.Stats()
		return s.Safe == ids[3] && s.HeldBlocks == 2
	})
	// A restart loses the held blocks from memory, not from the target:
	// it resumes after the last mirrored one and holds m4, m5 again.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b, _ = runBridge(t, cfg, newTarget())
	smsstest.WaitFor(t, 10*time.Second, "the restarted bridge holds m4 and m5", func() bool {
		s := b.Stats()
		return s.HeldBlocks == 2 && s.CommitPoint == ids[3] && s.Received == lastID(h)
	})
	// It resumes after the safe position the last message carries, at
	// or below m3 (and skips what the stream already holds).
	if r := m.requests(); r[len(r)-1] > ids[3] {
		t.Fatalf("the restarted bridge asked to resume after %d, past the last mirrored eventId %d", r[len(r)-1], ids[3])
	}
	if got := mirroredIDs(t, cfg.NATS.URL, cfg.NATS.Stream); !slices.Equal(got, ids[:4]) {
		t.Fatalf("after the restart the stream holds %v, want %v", got, ids[:4])
	}
	m.setCommit(lastID(h))
	smsstest.WaitFor(t, 10*time.Second, "everything mirrored", func() bool {
		s := b.Stats()
		return s.Safe == lastID(h) && s.HeldBlocks == 0
	})
	if got := mirroredIDs(t, cfg.NATS.URL, cfg.NATS.Stream); !slices.Equal(got, ids) {
		t.Fatalf("the stream holds %v, want %v once each", got, ids)
	}
}

// TestHeldOverflow: held blocks are bounded by source.maxHeldBytes; past
// it the session keeps no more, mirrors what it kept once the point
// passes it, and resumes to read the rest again: the target ends with
// every message once.
func TestHeldOverflow(t *testing.T) {
	h := newHistory()
	h.create("orders")
	for i := range 40 {
		h.pub("orders", rec(fmt.Sprintf("message %02d with a body of some length", i)))
	}
	m := startFakeMaster(t, h.blocks)
	m.v3, m.epoch = true, 1
	cfg := testConfig(m.addr())
	cfg.Source.MaxBlock, cfg.Source.MaxHeldBytes = 1024, 1024 // about a dozen blocks
	newTarget, _ := natsKind().setup(t, &cfg)
	b, _ := runBridge(t, cfg, newTarget())
	smsstest.WaitFor(t, 10*time.Second, "every block received and a commit frame", func() bool {
		s := b.Stats()
		return s.Received == lastID(h) && s.CommitPoint == 0 && s.Sessions > 0 && len(m.received()) == 2*protocol.ConfirmLen
	})
	smsstest.WaitFor(t, 10*time.Second, "the held bytes at their bound", func() bool {
		s := b.Stats()
		return s.Safe == 0 && s.HeldBlocks > 0 && s.HeldBytes+100 > 1024
	})
	if s := b.Stats(); s.HeldBytes > 1024 || s.Safe != 0 {
		t.Fatalf("held %d bytes over the bound 1024, or mirrored up to %d before the commit point passed it", s.HeldBytes, s.Safe)
	}
	m.setCommit(lastID(h))
	smsstest.WaitFor(t, 10*time.Second, "everything mirrored", func() bool { return b.Stats().Safe == lastID(h) })
	f, _ := NewFilter(cfg.Topics, cfg.Exclude)
	checkMirror(t, readNATS(t, cfg.NATS.URL, cfg.NATS.Stream), want(t, h.blocks, f), false)
	if r := m.requests(); len(r) < 2 {
		t.Fatalf("replica requests %v: the overflowing session should have resumed", r)
	}
}

// TestOldMasterRefused: a version 3 master whose epoch is below one the
// bridge saw is not followed (a failover replaced it: its commit point
// says nothing of the history kept); the bridge goes on to the next
// address.
func TestOldMasterRefused(t *testing.T) {
	h := newHistory()
	h.create("orders")
	id := h.pub("orders", rec("a"))
	newer := startFakeMaster(t, h.blocks)
	newer.v3, newer.epoch = true, 5
	newer.setCommit(id)
	old := startFakeMaster(t, h.blocks)
	old.v3, old.epoch = true, 4
	old.setCommit(id)
	cfg := testConfig(newer.addr())
	cfg.Master = []string{newer.addr(), old.addr()}
	newTarget, _ := natsKind().setup(t, &cfg)
	b, _ := runBridge(t, cfg, newTarget())
	smsstest.WaitFor(t, testDeadline, "mirrored from the newer master", func() bool { return b.Stats().Safe == id })
	newer.close() // the bridge now tries the old master, again and again
	smsstest.WaitFor(t, testDeadline, "the old master probed", func() bool { return b.Stats().MasterErrs >= 3 })
	if r := old.requests(); len(r) != 0 {
		t.Fatalf("the bridge asked the old master (epoch 4, below 5) to replicate after %v", r)
	}
}
