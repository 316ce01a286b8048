package main

import (
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/replication"
)

// TestStartReplicationWithoutMaster: a slave whose master is unreachable
// keeps retrying in the background, reports it, and stops on request.
func TestStartReplicationWithoutMaster(t *testing.T) {
	port := closedPort(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := broker.Open(broker.Options{Dir: t.TempDir(), Slave: true, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := config.Default()
	if _, err := startReplication(cfg, "", port, 0, b, b.Epoch, logger, nil); err == nil {
		t.Fatal("a slave without -host was accepted")
	}
	r, err := startReplication(cfg, "127.0.0.1", port, 0, b, b.Epoch, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.Status().Reconnects == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no failed attempt reported: %+v", r.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := r.Status()
	if st.State != replication.StateConnecting || !strings.HasSuffix(st.MasterAddr, ":"+strconv.Itoa(port)) || st.LastError == "" {
		t.Fatalf("status %+v", st)
	}
	done := make(chan struct{})
	go func() { r.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return while waiting to retry")
	}
	if st := r.Status(); st.State != replication.StateStopped {
		t.Fatalf("status after Stop %+v", st)
	}
}
