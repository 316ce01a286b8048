package main

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/server"
)

// closedPort returns a loopback port nothing listens on, reserved for this
// test process so nothing starts listening there meanwhile.
func closedPort(t *testing.T) int {
	t.Helper()
	return smsstest.FreePort(t)
}

// slaveNode is a node on a slave broker whose master is unreachable.
func slaveNode(t *testing.T) *node {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	cfg := config.Default()
	b, err := broker.Open(broker.Options{Dir: t.TempDir(), Logger: log, Slave: true})
	if err != nil {
		t.Fatal(err)
	}
	bg, err := startBackground(cfg, b, log)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{cfg: cfg, b: b, bg: bg, log: log}
	if err := n.startFollowing("127.0.0.1", closedPort(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.stop()
		bg.stop()
		b.Close()
	})
	return n
}

// Concurrent promotions are serialized: one wins, the others find a
// master; the master's jobs run once.
func TestNodePromoteConcurrent(t *testing.T) {
	n := slaveNode(t)
	if n.bg.delay != nil {
		t.Fatal("a slave runs the delay scheduler")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wins []uint64
	var already int
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := n.Promote(context.Background())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins = append(wins, e)
			case errors.Is(err, protocol.ErrAlreadyMaster):
				already++
			default:
				t.Errorf("promote: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(wins) != 1 || wins[0] != 1 || already != 7 {
		t.Fatalf("wins %v, %d already a master", wins, already)
	}
	// The promotion began epoch 1 at the next eventId, 1.
	if st := n.Status(); !reflect.DeepEqual(st, server.NodeStatus{Role: server.RoleMaster, Epoch: 1,
		Epochs: []protocol.EpochStart{{Epoch: 1, Start: 1}}}) {
		t.Fatalf("status %+v", st)
	}
	if n.runner.Load() != nil || n.bg.delay == nil || n.bg.reaper == nil {
		t.Fatal("after promotion: replication still set or the master's jobs not started")
	}
	if err := n.Follow(context.Background(), "127.0.0.1:1"); !errors.Is(err, errFollowOnMaster) {
		t.Fatalf("follow on a master: %v", err)
	}
	// A promoted broker takes writes.
	if _, err := n.b.CreateTopic(context.Background(), []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
}

func TestNodeFollow(t *testing.T) {
	n := slaveNode(t)
	first := n.Status().Master
	next := "127.0.0.1:" + strconv.Itoa(closedPort(t))
	if first == "" || first == next {
		t.Fatalf("first master %q", first)
	}
	old := n.runner.Load()
	if err := n.Follow(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	if st := n.Status(); st.Role != server.RoleSlave || st.Master != next {
		t.Fatalf("status after follow %+v", st)
	}
	select {
	case <-old.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the previous runner still runs")
	}
	if st := n.runner.Load().Status(); st.MasterAddr != next {
		t.Fatalf("runner follows %s", st.MasterAddr)
	}
	n.stop()
	if err := n.Follow(context.Background(), next); !errors.Is(err, errShuttingDown) {
		t.Fatalf("follow after stop: %v", err)
	}
	if _, err := n.Promote(context.Background()); !errors.Is(err, errShuttingDown) {
		t.Fatalf("promote after stop: %v", err)
	}
}
