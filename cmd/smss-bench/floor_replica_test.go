package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// startFloorReplica serves a floor replica on a free port for the test's
// duration, writing into a temp file it returns.
func startFloorReplica(t *testing.T, fsync bool) (string, *os.File) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "replica")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveFloorReplica(t.Context(), ln, f, fsync, io.Discard) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("replica: %v", err)
		}
		f.Close()
	})
	return ln.Addr().String(), f
}

// startReplicatedFloor serves a floor master with --writer replicating to
// replicaAddr, with --sync and --fsync as given.
func startReplicatedFloor(t *testing.T, replicaAddr string, syncAck, fsync bool) (string, *floorServer) {
	t.Helper()
	st, err := dialFloorStream(replicaAddr, syncAck)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "master")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // after the server's cleanup: it runs first
	fl := newFloor(ln)
	fl.stream = st
	if fsync {
		fl.fsync = f.Sync
	}
	fl.startWriter(f)
	return serveFloorForTest(t, fl), fl
}

// TestFloorReplicated publishes on 16 connections to a replicating floor
// master, asynchronous and semi-synchronous, with and without fsync: the
// replica ends up with every publish (twice); with --sync it holds them
// when the last one was answered (whether a reply waits for its own
// group's confirmation is TestFloorSyncWaitsForConfirmation's).
func TestFloorReplicated(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	const count = 3000
	want := int64(2 * count * (protocol.RecordPrefixSize + 200))
	for _, tc := range []struct {
		name        string
		sync, fsync bool
	}{
		{"async", false, false},
		{"sync", true, false},
		{"sync-fsync", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raddr, rf := startFloorReplica(t, tc.fsync)
			addr, fl := startReplicatedFloor(t, raddr, tc.sync, tc.fsync)
			var r Result
			benchJSON(t, &r, "pub", "--addr", addr, "--pid", pid, "--topic", "floorrepl", "--conns", "16", "--count", strconv.Itoa(count))
			if r.Messages != count {
				t.Fatalf("%d messages, want %d", r.Messages, count)
			}
			size := func() int64 {
				st, err := rf.Stat()
				if err != nil {
					t.Fatal(err)
				}
				return st.Size()
			}
			if tc.sync {
				if got := size(); got != want {
					t.Fatalf("the replica holds %d bytes when every publish was answered, want %d", got, want)
				}
			} else if !smsstest.Poll(10*time.Second, func() bool { return size() == want }) {
				t.Fatalf("the replica holds %d bytes, want %d", size(), want)
			}
			t.Logf("%d groups for %d publishes", fl.groups.Load(), count)
		})
	}
}

// TestFloorSyncWaitsForConfirmation: with --sync a publish is answered
// only after the replica confirmed its group; a confirmation of a later
// group answers every group up to it.
func TestFloorSyncWaitsForConfirmation(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	addr, _ := startReplicatedFloor(t, ln.Addr().String(), true, false)
	rc := <-accepted
	defer rc.Close()
	rr := bufio.NewReader(rc)

	c, err := dialSmss(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	rec, err := protocol.AppendRecord(nil, protocol.Record{Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := protocol.AppendPub(nil, []byte("t"), nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.c.Write(pub); err != nil {
		t.Fatal(err)
	}
	// The replica is sent the group ...
	var hdr [floorGroupHeader]byte
	rc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(rr, hdr[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.LittleEndian.Uint32(hdr[8:]))
	if _, err := io.ReadFull(rr, body); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, rec) {
		t.Fatalf("the replica was sent %x, want %x", body, rec)
	}
	// ... and until it confirms, the publish is not answered.
	reply := make(chan error, 1)
	go func() {
		_, err := protocol.ReadReply(c.r, protocol.ReplyPlain, 0)
		reply <- err
	}()
	select {
	case err := <-reply:
		t.Fatalf("answered (%v) before the replica confirmed", err)
	case <-time.After(200 * time.Millisecond):
	}
	seq := binary.LittleEndian.Uint64(hdr[:8])
	if _, err := rc.Write(binary.LittleEndian.AppendUint64(nil, seq)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-reply:
		if err != nil {
			t.Fatalf("answered %v after the confirmation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not answered 10 s after the replica confirmed")
	}
}

// TestFloorReplicaFlags: --sync needs --replicate-to, which needs
// --writer; --replica excludes the writer modes.
func TestFloorReplicaFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--sync"},
		{"--writer", "--sync"},
		{"--replicate-to", "127.0.0.1:1"},
		{"--leader", "--replicate-to", "127.0.0.1:1"},
		{"--replica", "--writer"},
		{"--replica", "--sync"},
		{"--fsync"},
	} {
		var stdout, stderr bytes.Buffer
		if code := runFloor(t.Context(), append([]string{"--listen", "127.0.0.1:0"}, args...), &stdout, &stderr); code != 2 {
			t.Fatalf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}
