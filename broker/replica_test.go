package broker

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReplicatedBinlogIsByteIdentical streams a master's binlog into a
// slave through ApplyReplicated and compares binlogs and topic contents.
func TestReplicatedBinlogIsByteIdentical(t *testing.T) {
	ctx := context.Background()
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openTest(t, mdir, nil)
	m.CreateTopic(ctx, []byte("order"), 0)
	m.CreateTopic(ctx, []byte("gone"), 0)
	m.Publish(ctx, []byte("order"), rec("one"), 1)
	m.Publish(ctx, []byte("gone"), rec("x"), 1)
	m.Publish(ctx, []byte("order"), append(rec("two"), rec("three")...), 2)
	if _, err := m.PublishDelay(ctx, []byte("order"), rec("later"), 1, 1000); err != nil {
		t.Fatal(err)
	}
	due, err := m.Meta().DueDelays(time.Now().UnixMilli()+5000, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due delays %v %v", due, err)
	}
	if id, err := m.ApplyDelay(ctx, due[0].Topic, due[0].Value); err != nil || id == 0 {
		t.Fatalf("apply delay: %d %v", id, err)
	}
	if id, _ := m.ApplyDelay(ctx, due[0].Topic, due[0].Value); id != 0 {
		t.Fatalf("second apply published again: %d", id)
	}
	m.DeleteTopic(ctx, []byte("gone"))

	s := openTest(t, sdir, func(o *Options) { o.Slave = true })
	stream, err := m.ReplicaStream(0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		n, err := stream.Next(ctx, 10, 10*time.Millisecond, func(block []byte) error {
			_, err := s.ApplyReplicated(ctx, append([]byte(nil), block...))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	stream.Close()
	if s.LastEventID() != m.LastEventID() {
		t.Fatalf("slave last %d, master %d", s.LastEventID(), m.LastEventID())
	}
	// Resuming from a block's last id works; from inside a block it fails.
	if _, err := m.ReplicaStream(5); err == nil {
		t.Fatalf("resume inside a 2-message block accepted")
	}
	if st, err := m.ReplicaStream(6); err != nil {
		t.Fatalf("resume after block ending at 6: %v", err)
	} else {
		st.Close()
	}
	m.Close()
	s.Close()
	mb, _ := os.ReadFile(filepath.Join(mdir, "binlog", "0.log"))
	sb, _ := os.ReadFile(filepath.Join(sdir, "binlog", "0.log"))
	if len(mb) == 0 || !bytes.Equal(mb, sb) {
		t.Fatalf("binlogs differ: master %d bytes, slave %d", len(mb), len(sb))
	}
	mi, _ := readTopic(t, mdir, "order")
	si, _ := readTopic(t, sdir, "order")
	if !equalIDs(mi, si) || len(mi) != 4 {
		t.Fatalf("topic ids master %v slave %v", mi, si)
	}
	if ids, _ := readTopic(t, sdir, "gone"); len(ids) != 0 {
		t.Fatalf("deleted topic still on slave: %v", ids)
	}
}
