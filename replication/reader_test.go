package replication

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// TestReplicaReaderNeverCounts: a replica reader (the hello smss-bridge
// sends to a version 3 master) gets the commit frames of version 2 over
// real TCP, with the commit point rising when a slave confirms and not
// before, but never counts as a confirming slave: with syncSlaves 1 and
// only the reader connected a write is refused, and the tracker lists no
// slave. Its epoch record reaches OnEpoch.
func TestReplicaReaderNeverCounts(t *testing.T) {
	ctx := context.Background()
	m := openBroker(t, t.TempDir(), false, func(o *broker.Options) { o.ReadCommitted = true })
	t.Cleanup(func() { m.Close() })
	tr, err := NewSyncTracker(SyncOptions{Slaves: 1, Timeout: 300 * time.Millisecond, LastEventID: m.LastEventID,
		Logger: quiet, OnCommit: m.SetCommitPoint})
	if err != nil {
		t.Fatal(err)
	}
	var readerEpoch atomic.Uint64
	const alive = 30 * time.Second // a commit frame within the deadlines was sent because the point moved
	ms := serveMaster(t, m, "", MasterOptions{AliveInterval: alive, Sync: tr,
		Epoch: func() uint64 { return 5 }, OnEpoch: func(e uint64) { readerEpoch.Store(e) }})
	if _, err := m.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}

	conn, err := net.Dial("tcp", ms.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, _ := protocol.AppendReplica(nil, 0)
	if _, err := conn.Write(req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	type commit struct {
		point int64
		epoch uint64
	}
	commits := make(chan commit, 64)
	blocks := make(chan struct{}, 64)
	readErr := make(chan error, 1)
	go func() {
		hello := true
		for {
			f, err := protocol.ReadReplicaFrameV2(br, 1<<20)
			if err != nil {
				readErr <- err
				return
			}
			if hello {
				// After the first frame, as a reader does.
				rec := protocol.AppendConfirm(nil, protocol.Confirm{Kind: protocol.ConfirmHello, Reader: true})
				rec = protocol.AppendConfirm(rec, protocol.Confirm{Kind: protocol.ConfirmEpoch, EventID: 4})
				if _, err := conn.Write(rec); err != nil {
					readErr <- err
					return
				}
				hello = false
			}
			switch f.Code {
			case protocol.StatusCommit:
				cp, epoch, err := protocol.DecodeCommitFrame(f.Body)
				if err != nil {
					readErr <- err
					return
				}
				commits <- commit{cp, epoch}
			case protocol.StatusOK:
				blocks <- struct{}{}
			}
		}
	}()
	next := func(what string) commit {
		t.Helper()
		select {
		case c := <-commits:
			return c
		case err := <-readErr:
			t.Fatalf("%s: the stream ended: %v", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no commit frame within 10 s", what)
		}
		return commit{}
	}
	// The create's block, then the first commit frame answers the hello.
	<-blocks
	if c := next("after the hello"); c.point != 0 || c.epoch != 5 {
		t.Fatalf("first commit frame %+v, want point 0 at epoch 5", c)
	}
	smsstest.WaitFor(t, 10*time.Second, "the reader's epoch record", func() bool { return readerEpoch.Load() == 4 })

	id := publish(t, m, "t", "a", 1)
	if err := tr.Wait(ctx, id); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("only a reader connected: the write is %v, want ErrNotConfirmed", err)
	}
	if in, slaves := tr.Info(); in.Confirming != 0 || len(slaves) != 0 || len(tr.SlaveReports()) != 0 {
		t.Fatalf("the reader counts as a slave: %+v %v", in, slaves)
	}
	select {
	case c := <-commits:
		t.Fatalf("commit frame %+v while nothing was confirmed", c)
	default:
	}

	// A slave confirms: the point passes the write, and the reader is told.
	sb := openBroker(t, t.TempDir(), true, nil)
	t.Cleanup(func() { sb.Close() })
	_, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr, AliveInterval: alive, InstanceID: [6]byte{1}})
	defer stop()
	for {
		if c := next("after a slave confirmed"); c.point >= id {
			break
		}
	}
	if in, _ := tr.Info(); in.Confirming != 1 {
		t.Fatalf("%d confirming slaves with the slave and the reader connected, want 1", in.Confirming)
	}
}
